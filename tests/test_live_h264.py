"""Live H.264 plumbing: Annex B and AVCC, and SPS sizes and avcC records checked against
what FFmpeg makes of the same streams (x264 at several sizes and profiles, scaling lists
spliced in). Helpers in ``tests/live_helpers.py``."""

from __future__ import annotations

import struct
from pathlib import Path

import av
import pytest

from mediaflow.live import (
    BitstreamError,
    VideoTrack,
    avc_decoder_config,
    is_keyframe,
    parameter_sets,
    split_annexb,
    sps_dimensions,
    to_avcc,
)
from tests.live_helpers import (  # noqa: F401 - fixtures among them
    GOP,
    EncodedVideo,
    encode_video,
    ffprobe,
    run_tool,
    tool,
    video_fixture,
)

# -- Annex B and AVCC ------------------------------------------------------------------------

SPS = b"\x67\x64\x00\x0d\xac"
PPS = b"\x68\xee\x3c\xb0"
IDR = b"\x65\x88\x84\x00\x33"
AUD = b"\x09\xf0"


@pytest.mark.parametrize(
    ("stream", "nals"),
    [
        (b"", []),
        (b"\x00\x00\x00\x01" + SPS + b"\x00\x00\x00\x01" + PPS, [SPS, PPS]),
        (b"\x00\x00\x01" + SPS + b"\x00\x00\x01" + PPS, [SPS, PPS]),
        (b"\x00\x00\x00\x01" + AUD + b"\x00\x00\x01" + IDR, [AUD, IDR]),
        (b"\x00\x00\x01" + IDR + b"\x00\x00\x00\x00\x01" + PPS + b"\x00\x00", [IDR, PPS]),
        (b"\x00\x00\x00\x00\x01" + IDR, [IDR]),  # leading zero_byte padding
    ],
    ids=["empty", "4-byte", "3-byte", "mixed", "trailing zeros", "leading zeros"],
)
def test_split_annexb_finds_every_nal_without_start_codes(stream: bytes, nals: list[bytes]) -> None:
    assert split_annexb(stream) == nals


@pytest.mark.parametrize("stream", [b"\x00\x00\x00\x0a" + IDR, IDR], ids=["avcc", "no start"])
def test_split_annexb_refuses_data_that_is_not_annexb(stream: bytes) -> None:
    with pytest.raises(BitstreamError):
        split_annexb(stream)


def test_to_avcc_keeps_slices_and_sei_and_leaves_parameter_sets_and_aud_out() -> None:
    stream = b"".join(b"\x00\x00\x00\x01" + nal for nal in (AUD, SPS, PPS, IDR))
    assert to_avcc(stream) == struct.pack(">I", len(IDR)) + IDR
    assert parameter_sets(stream + b"\x00\x00\x01" + SPS) == ([SPS], [PPS])  # repeats once
    assert is_keyframe(stream) and not is_keyframe(b"\x00\x00\x01\x41\x9a")


def avcc_nals(sample: bytes) -> list[bytes]:
    nals, position = [], 0
    while position < len(sample):
        (size,) = struct.unpack_from(">I", sample, position)
        nals.append(sample[position + 4 : position + 4 + size])
        position += 4 + size
    assert position == len(sample)
    return nals


def test_to_avcc_round_trips_real_access_units(video: EncodedVideo) -> None:
    stream = video.extradata + video.packets[0]  # as a stream starts: SPS, PPS, SEI, IDR
    sample = to_avcc(stream)
    kept = [nal for nal in split_annexb(stream) if nal[0] & 0x1F not in (7, 8, 9)]
    assert avcc_nals(sample) == kept and {nal[0] & 0x1F for nal in kept} == {5, 6}
    for packet in video.packets:
        nals = avcc_nals(to_avcc(packet))
        assert split_annexb(b"".join(b"\x00\x00\x00\x01" + nal for nal in nals)) == nals
        assert split_annexb(b"".join(b"\x00\x00\x01" + nal for nal in nals)) == nals
    assert [is_keyframe(p) for p in video.packets] == video.keyframes
    assert video.keyframes[:: GOP // 2] == [True, False, True, False]  # fragments of 0.5 s


# -- SPS and avcC against FFmpeg -------------------------------------------------------------


def ffmpeg_view(annexb: bytes, tmp_path: Path) -> tuple[bytes, int, int]:
    """What FFmpeg makes of a raw H.264 stream: (the avcC its mp4 muxer writes, width, height)."""
    raw, remuxed = tmp_path / "stream.h264", tmp_path / "remuxed.mp4"
    raw.write_bytes(annexb)
    done = run_tool(
        tool("ffmpeg"), "-v", "error", "-f", "h264", "-i", str(raw), "-c", "copy", str(remuxed)
    )
    assert done.returncode == 0, done.stderr
    (stream,) = ffprobe(remuxed)["streams"]
    data = remuxed.read_bytes()
    at = data.index(b"avcC") - 4
    (size,) = struct.unpack_from(">I", data, at)
    return data[at + 8 : at + size], stream["width"], stream["height"]


SIZES = [
    pytest.param(1280, 720, "yuv420p", "veryfast", "", id="720p-high"),
    pytest.param(640, 360, "yuv420p", "veryfast", "", id="360p-high"),
    pytest.param(320, 180, "yuv420p", "ultrafast", "", id="180p-baseline"),
    pytest.param(1920, 1080, "yuv420p", "veryfast", "", id="1080p-cropped"),
    pytest.param(1920, 1080, "yuv420p", "ultrafast", "interlaced=1", id="1080i-field-crop"),
    pytest.param(640, 360, "yuv422p", "veryfast", "", id="high-422"),
    pytest.param(640, 360, "yuv444p", "veryfast", "", id="high-444-predictive"),
    pytest.param(640, 360, "yuv420p10le", "veryfast", "", id="high-10"),
    pytest.param(322, 182, "gray", "veryfast", "", id="monochrome-odd-size"),
]


@pytest.mark.parametrize(("width", "height", "pix_fmt", "preset", "params"), SIZES)
def test_sps_dimensions_and_avcc_match_ffmpeg(
    width: int, height: int, pix_fmt: str, preset: str, params: str, tmp_path: Path
) -> None:
    encoded = encode_video(width, height, 2, pix_fmt=pix_fmt, preset=preset, x264_params=params)
    sps, pps = parameter_sets(encoded.extradata)
    avcc, ffmpeg_width, ffmpeg_height = ffmpeg_view(
        encoded.extradata + b"".join(encoded.packets), tmp_path
    )
    assert sps_dimensions(sps[0]) == (ffmpeg_width, ffmpeg_height) == (width, height)
    assert avc_decoder_config(sps, pps) == avcc


def ue(value: int) -> str:
    """Exp-Golomb ue(v) as a bit string (H.264 §9.1)."""
    code = bin(value + 1)[2:]
    return "0" * (len(code) - 1) + code


def se(value: int) -> str:
    return ue(2 * value - 1 if value > 0 else -2 * value)


def with_scaling_lists(sps: bytes) -> bytes:
    """``sps`` (a High profile one without scaling lists) with seq_scaling_matrix_present_flag
    set and lists written: list 0 stops at once (delta -8: the default matrix), list 6 has all
    64 entries, the last list too. Slices do not depend on scaling lists, so the stream still
    decodes: FFmpeg says which size it reads."""
    rbsp = sps[1:].replace(b"\x00\x00\x03", b"\x00\x00")
    bits = "".join(f"{byte:08b}" for byte in rbsp)
    position = 24  # profile_idc, constraint flags, level_idc

    def read_ue() -> int:
        nonlocal position
        zeros = bits.index("1", position) - position
        value = int(bits[position + zeros : position + 2 * zeros + 1], 2) - 1
        position += 2 * zeros + 1
        return value

    read_ue()  # seq_parameter_set_id
    chroma = read_ue()
    position += chroma == 3  # separate_colour_plane_flag
    read_ue(), read_ue()  # bit depths
    position += 1  # qpprime_y_zero_transform_bypass_flag
    assert bits[position] == "0", "the SPS has scaling lists already"
    count = 8 if chroma != 3 else 12
    full = "1" + "".join(se(1 if j % 2 else -1) for j in range(64))  # 7, 8, 7, 8, ...
    lists = ["1" + se(-8), *["0"] * (count - 2), full]
    lists[6] = full
    spliced = bits[:position] + "1" + "".join(lists) + bits[position + 1 :]
    spliced = spliced.rstrip("0")  # back to the stop bit, then align again
    spliced += "0" * (-len(spliced) % 8)
    payload = bytes(int(spliced[i : i + 8], 2) for i in range(0, len(spliced), 8))
    escaped, zeros = bytearray(sps[:1]), 0
    for byte in payload:  # emulation prevention (§7.4.1)
        if zeros >= 2 and byte <= 3:
            escaped.append(3)
            zeros = 0
        escaped.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return bytes(escaped)


@pytest.mark.parametrize(
    ("width", "height", "pix_fmt"), [(640, 360, "yuv420p"), (320, 180, "yuv444p")]
)
def test_sps_dimensions_skips_scaling_lists_as_ffmpeg_does(
    width: int, height: int, pix_fmt: str, tmp_path: Path
) -> None:
    encoded = encode_video(width, height, 2, pix_fmt=pix_fmt)
    sps, pps = parameter_sets(encoded.extradata)
    scaled = with_scaling_lists(sps[0])
    stream = b"".join(b"\x00\x00\x00\x01" + nal for nal in (scaled, *pps))
    avcc, ffmpeg_width, ffmpeg_height = ffmpeg_view(stream + b"".join(encoded.packets), tmp_path)
    assert sps_dimensions(scaled) == (ffmpeg_width, ffmpeg_height) == (width, height)
    assert avc_decoder_config([scaled], pps) == avcc
    with av.open(str(tmp_path / "stream.h264"), format="h264") as decoded:
        sizes = {(f.width, f.height) for f in decoded.decode(video=0)}
    assert sizes == {(width, height)}


@pytest.mark.parametrize(
    "sps",
    [b"", PPS, SPS[:3], b"\x67\x64\x00\x0d\x00\x00\x00\x00"],
    ids=["empty", "not an SPS", "short", "endless Exp-Golomb"],
)
def test_sps_dimensions_refuses_what_is_no_sps(sps: bytes) -> None:
    with pytest.raises(BitstreamError):
        sps_dimensions(sps)


def test_avc_decoder_config_needs_an_sps() -> None:
    with pytest.raises(BitstreamError):
        avc_decoder_config([], [PPS])
    with pytest.raises(BitstreamError):
        VideoTrack.from_annexb(b"\x00\x00\x00\x01" + PPS)
