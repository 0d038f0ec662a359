"""The image side of the motion node (mediaflow.nodes.motion_detect): polygons on a
grid, zones and masks, the JPEG decode, and the background comparison."""

from __future__ import annotations

import numpy as np
import pytest
import simplejpeg  # type: ignore[import-untyped]

from mediaflow.nodes.motion_detect import (
    MotionAnalyser,
    MotionInputError,
    ZoneLayout,
    decode_gray,
    parse_polygon,
    rasterise,
    smooth,
)

SQUARE = ((0.25, 0.25), (0.75, 0.25), (0.75, 0.75), (0.25, 0.75))


def drawn(grid: np.ndarray) -> list[str]:
    return ["".join("#" if cell else "." for cell in row) for row in grid]


def test_a_square_covers_the_pixels_whose_centres_are_inside() -> None:
    assert drawn(rasterise(SQUARE, 8, 4)) == ["........", "..####..", "..####..", "........"]


def test_a_triangle_and_the_whole_picture() -> None:
    triangle = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0))
    assert drawn(rasterise(triangle, 4, 4)) == ["###.", "##..", "#...", "...."]
    whole = ((0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0))
    assert rasterise(whole, 7, 5).all()


def test_a_self_crossing_polygon_is_filled_even_odd() -> None:
    """A pentagram drawn in one stroke: its centre is covered twice, so it is out."""
    star = tuple(
        (0.5 + 0.5 * np.sin(2 * np.pi * k * 2 / 5), 0.5 - 0.5 * np.cos(2 * np.pi * k * 2 / 5))
        for k in range(5)
    )
    grid = rasterise(star, 41, 41)
    assert not grid[20, 20]  # the centre: inside two windings
    assert grid[6, 20]  # the top point


def test_masks_take_their_pixels_out_of_every_zone() -> None:
    left = ((0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (0.0, 1.0))
    top = ((0.0, 0.0), (1.0, 0.0), (1.0, 0.5), (0.0, 0.5))
    grids = ZoneLayout({"left": left}, (top,)).grids(4, 4)
    assert drawn(grids["left"]) == ["....", "....", "##..", "##.."]
    whole = ZoneLayout(None, (top,)).grids(4, 2)
    assert list(whole) == [None] and drawn(whole[None]) == ["....", "####"]


@pytest.mark.parametrize(
    "value",
    [
        [[0, 0], [1, 1]],
        "abc",
        [[0, 0], [1, 0], [1, 2]],
        [[0, 0], [1, 0], [1]],
        [[0, 0], [1, 0], [True, 1]],
    ],
)
def test_polygons_refuse_what_is_not_three_points_in_the_picture(value: object) -> None:
    with pytest.raises(ValueError, match="zone 'door'"):
        parse_polygon(value, "zone 'door'")


def test_a_polygon_of_the_flow_file_becomes_float_points() -> None:
    assert parse_polygon([[0, 0], [1, 0], [0.5, 1]], "x") == ((0.0, 0.0), (1.0, 0.0), (0.5, 1.0))


@pytest.mark.parametrize(
    ("width", "height", "decoded"),
    [(320, 240, 160), (640, 480, 160), (1280, 720, 160), (1920, 1080, 240), (100, 60, 100)],
)
def test_decode_gray_downscales_while_decoding(width: int, height: int, decoded: int) -> None:
    """To the smallest of libjpeg's scales (1/8, 1/4 ...) at least 160 wide."""
    rgb = np.zeros((height, width, 3), dtype=np.uint8)
    rgb[:, : width // 2] = 255  # left half white
    gray = decode_gray(simplejpeg.encode_jpeg(rgb, quality=90))
    assert gray.dtype == np.uint8 and gray.shape == (height * decoded // width, decoded)
    assert gray[:, 2].min() > 240 and gray[:, -3].max() < 15


def test_decode_gray_refuses_what_is_not_a_jpeg() -> None:
    with pytest.raises(MotionInputError, match="not a JPEG"):
        decode_gray(b"\x89PNG\r\n\x1a\n" + bytes(100))


def test_smoothing_averages_each_neighbourhood() -> None:
    gray = np.zeros((5, 5), dtype=np.uint8)
    gray[2, 2] = 90
    out = smooth(gray)
    assert out[1:4, 1:4].tolist() == [[10.0] * 3] * 3 and out[0, 0] == 0


def box_frame(x: int | None, size: int = 20, shape: tuple[int, int] = (120, 160)) -> np.ndarray:
    frame = np.full(shape, 128, dtype=np.uint8)
    if x is not None:
        frame[50 : 50 + size, x : x + size] = 235
    return frame


def test_the_analyser_sees_a_box_against_the_background_per_zone() -> None:
    left = ((0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (0.0, 1.0))
    right = ((0.5, 0.0), (1.0, 0.0), (1.0, 1.0), (0.5, 1.0))
    analyser = MotionAnalyser(ZoneLayout({"left": left, "right": right}), 25.0, 5.0)
    assert analyser.observe(box_frame(None), 0.0) == {"left": 0.0, "right": 0.0}
    assert analyser.observe(box_frame(None), 0.1) == {"left": 0.0, "right": 0.0}
    seen = analyser.observe(box_frame(10), 0.2)
    # A 20x20 box and, once smoothed, the rim around it where 3 of 9 pixels are box (a
    # rim pixel by a corner has 2: 24 levels, under the threshold); in the left half.
    assert seen == {"left": (20 * 20 + 4 * 18) / (120 * 80), "right": 0.0}


def test_what_stays_goes_into_the_background() -> None:
    analyser = MotionAnalyser(ZoneLayout(), 25.0, 1.0)
    analyser.observe(box_frame(None), 0.0)
    fractions = [analyser.observe(box_frame(10), 0.1 * i)[None] for i in range(1, 40)]
    assert fractions[0] > 0.02 and fractions[-1] == 0.0  # absorbed within a few seconds


def test_a_new_frame_size_or_an_older_frame_starts_afresh() -> None:
    analyser = MotionAnalyser(ZoneLayout(), 25.0, 5.0)
    analyser.observe(box_frame(None), 0.0)
    assert analyser.observe(box_frame(10, shape=(90, 160)), 0.1) == {None: 0.0}
    assert analyser.observe(box_frame(40, shape=(90, 160)), 0.05) == {None: 0.0}
    assert analyser.observe(box_frame(40, shape=(90, 160)), 0.2)[None] == 0.0


def test_a_zone_under_a_mask_has_no_pixels() -> None:
    whole = ((0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0))
    analyser = MotionAnalyser(ZoneLayout({"all": whole, "hidden": SQUARE}, (SQUARE,)), 25, 5)
    analyser.observe(box_frame(None), 0.0)
    assert analyser.empty_zones == ["hidden"]
    assert analyser.observe(box_frame(70), 0.1)["hidden"] == 0.0
