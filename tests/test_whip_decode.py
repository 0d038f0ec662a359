"""A WHIP receiver's decoding queue (connectors._whip_decode): bounded, dropping to the
next keyframe for video, asking the publisher for one; the end always goes in."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from connectors._whip_decode import LatestFrames, starts_picture

IDR = b"\x00\x00\x00\x01\x67\x42" + b"\x00\x00\x00\x01\x65\x88\x84"
SLICE = b"\x00\x00\x00\x01\x41\x9a"


@dataclass
class Codec:
    name: str


@dataclass
class Encoded:
    data: bytes


@pytest.mark.parametrize(
    ("codec", "data", "starts"),
    [
        ("H264", IDR, True),
        ("H264", SLICE, False),
        ("H264", b"\x41\x9a", False),  # no start code: not Annex B, nothing to start at
        ("VP8", b"\x50\x42\x00", True),  # frame tag's bit 0 clear: a key frame
        ("VP8", b"\x51\x42\x00", False),
        ("VP8", b"", False),
        ("opus", b"\x78", True),  # sound: every frame stands alone
    ],
)
def test_where_a_decoder_can_start(codec: str, data: bytes, starts: bool) -> None:
    assert starts_picture(codec, data) is starts


def test_a_full_video_queue_drops_to_the_next_keyframe_and_asks_for_one() -> None:
    asked: list[bool] = []
    frames = LatestFrames(3, video=True, ask_keyframe=lambda: asked.append(True))
    h264 = Codec("H264")
    for data in (IDR, SLICE, SLICE):
        frames.put((h264, Encoded(data)))
    frames.put((h264, Encoded(SLICE)))  # full: all three go, and this one (no keyframe)
    assert frames.qsize() == 0 and frames.dropped == 4 and asked == [True]
    frames.put((h264, Encoded(SLICE)))
    frames.put((h264, Encoded(IDR)))
    frames.put((h264, Encoded(SLICE)))
    assert [bytes(frames.get()[1].data) for _ in range(2)] == [IDR, SLICE]
    assert frames.dropped == 5 and frames.max_depth == 3
    frames.put(None)  # the end of the stream, whatever waits
    assert frames.get() is None


def test_a_full_sound_queue_keeps_the_newest() -> None:
    frames = LatestFrames(2, video=False, ask_keyframe=lambda: pytest.fail("sound has none"))
    opus = Codec("opus")
    for index in range(5):
        frames.put((opus, Encoded(bytes([index]))))
    assert [frames.get()[1].data for _ in range(frames.qsize())] == [b"\x04"]
    assert frames.dropped == 4
