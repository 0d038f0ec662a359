"""What moved in a picture: the image side of ``use = "motion"``, numpy only.

* :func:`parse_polygon` checks a polygon of the flow file: three or more ``[x, y]``
  points, fractions 0..1 of the picture's width and height (0,0 the top left).
* :func:`rasterise` lays a polygon on a grid of pixels (even-odd rule, by each
  pixel's centre). Pure.
* :class:`ZoneLayout` holds the named zones and the masks, and rasterises them once
  per grid size: each zone's pixels, those under a mask taken out.
* :func:`decode_gray` decodes a JPEG to its luma, downscaled while decoding
  (libjpeg-turbo's DCT scaling through ``simplejpeg``: the smallest of 1/8, 1/4 ...
  that keeps the picture at least :data:`ANALYSIS_WIDTH` wide), so a 1080p frame
  costs a fraction of a full decode. Blocks for milliseconds: call it in a thread.
* :class:`MotionAnalyser` smooths each frame (a 3x3 box: a sensor's pixel noise
  falls threefold, anything a few pixels wide stays), compares it with a running
  background (an exponential average with time constant ``background_s``, on the
  frames' own clock) and says which fraction of each zone's pixels differs from it by
  more than ``threshold`` luma levels (0-255). Slow changes (daylight) go into the
  background; a thing that appears and stays goes in too, after a few ``background_s``.
  Measured on lavfi ``noise=alls=20:allf=t`` over gray at 320x240: the noisiest frame
  changed 0.8 % of the picture at ``threshold`` 25 unsmoothed (``min_area``'s default
  is 1 %), none smoothed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import simplejpeg  # type: ignore[import-untyped]  # ships no type information

ANALYSIS_WIDTH: Final = 160
"""Frames are analysed at least this wide (and at most twice as wide, bar DCT
scaling's steps): enough for a person at a door, and the cost does not grow with the
camera's resolution beyond the decode."""

Point = tuple[float, float]
Polygon = tuple[Point, ...]
Grid = npt.NDArray[np.bool_]


class MotionInputError(ValueError):
    """A frame the motion node cannot read (not a JPEG, no ``captured_at``)."""


def parse_polygon(value: object, what: str) -> Polygon:
    """``value`` (from a flow file) as a polygon; ``ValueError`` naming ``what``."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 3:
        raise ValueError(f"{what} must be a list of 3 or more [x, y] points, got {value!r}")
    points = []
    for point in value:
        if (
            not isinstance(point, Sequence)
            or isinstance(point, str)
            or len(point) != 2
            or not all(_is_fraction(c) for c in point)
        ):
            raise ValueError(
                f"{what}: each point is [x, y], fractions 0..1 of the picture, got {point!r}"
            )
        points.append((float(point[0]), float(point[1])))
    return tuple(points)


def _is_fraction(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def rasterise(polygon: Polygon, width: int, height: int) -> Grid:
    """The pixels of a ``height`` x ``width`` grid whose centre is inside ``polygon``
    (even-odd rule: a self-crossing polygon has holes where it overlaps itself)."""
    px = ((np.arange(width) + 0.5) / width)[np.newaxis, :]
    py = ((np.arange(height) + 0.5) / height)[:, np.newaxis]
    inside = np.zeros((height, width), dtype=np.bool_)
    for (x1, y1), (x2, y2) in zip(polygon, polygon[1:] + polygon[:1], strict=True):
        if y1 == y2:
            continue  # a horizontal edge: no row's ray crosses it
        crosses = (y1 > py) != (y2 > py)
        x_at = x1 + (py - y1) * (x2 - x1) / (y2 - y1)
        inside ^= crosses & (px < x_at)
    return inside


@dataclass(frozen=True)
class ZoneLayout:
    """Named zones (None: one zone, the whole picture, named None) and masks."""

    zones: Mapping[str, Polygon] | None = None
    masks: tuple[Polygon, ...] = ()

    @property
    def names(self) -> list[str | None]:
        return [None] if self.zones is None else list(self.zones)

    def grids(self, width: int, height: int) -> dict[str | None, Grid]:
        """Each zone's pixels on a ``width`` x ``height`` grid, masked pixels out."""
        masked = np.zeros((height, width), dtype=np.bool_)
        for mask in self.masks:
            masked |= rasterise(mask, width, height)
        if self.zones is None:
            return {None: ~masked}
        return {name: rasterise(p, width, height) & ~masked for name, p in self.zones.items()}


def decode_gray(data: bytes) -> npt.NDArray[np.uint8]:
    """A JPEG's luma, ``[height, width]``, downscaled while decoding (module doc).
    Blocks; raises :class:`MotionInputError` for bytes that are not a JPEG."""
    try:
        gray = simplejpeg.decode_jpeg(
            data, colorspace="GRAY", fastdct=True, min_width=ANALYSIS_WIDTH
        )
    except ValueError as exc:
        raise MotionInputError(f"not a JPEG simplejpeg decodes: {exc}") from exc
    return np.asarray(gray, dtype=np.uint8).reshape(gray.shape[0], gray.shape[1])


def smooth(gray: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """``gray`` averaged over each pixel's 3x3 neighbourhood (edges repeated). Pure."""
    padded = np.pad(gray.astype(np.float32), 1, mode="edge")
    rows = padded[:-2] + padded[1:-1] + padded[2:]
    smoothed: npt.NDArray[np.float32] = (rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]) / 9
    return smoothed


@dataclass
class MotionAnalyser:
    """The running background and each zone's pixels (module doc). Not thread-safe:
    one frame at a time, in order, though any one thread may run it."""

    layout: ZoneLayout
    threshold: float
    background_s: float
    _background: npt.NDArray[np.float32] | None = field(default=None, init=False)
    _grids: dict[str | None, tuple[Grid, int]] = field(default_factory=dict, init=False)
    _at: float = field(default=-math.inf, init=False)

    @property
    def empty_zones(self) -> list[str | None]:
        """Zones with no pixel on the current grid (all masked, or too thin)."""
        return [name for name, (_, pixels) in self._grids.items() if pixels == 0]

    def observe(self, gray: npt.NDArray[np.uint8], at: float) -> dict[str | None, float]:
        """The fraction of each zone's pixels that differ from the background (0 for
        a zone without pixels), then the background learns ``gray``. The first
        frame, a new frame size, or a frame older than the last starts afresh: all 0."""
        frame = smooth(gray)
        background = self._background
        if background is None or background.shape != frame.shape or at < self._at:
            self._background, self._at = frame, at
            height, width = frame.shape
            grids = self.layout.grids(width, height)
            self._grids = {name: (grid, int(grid.sum())) for name, grid in grids.items()}
            return dict.fromkeys(self._grids, 0.0)
        changed = np.abs(frame - background) > self.threshold
        fractions = {
            name: (int(np.count_nonzero(changed & grid)) / pixels) if pixels else 0.0
            for name, (grid, pixels) in self._grids.items()
        }
        # An exponential average on the frames' clock: the same time constant at any fps.
        alpha = 1.0 - math.exp(-(at - self._at) / self.background_s)
        background += np.float32(alpha) * (frame - background)
        self._at = at
        return fractions
