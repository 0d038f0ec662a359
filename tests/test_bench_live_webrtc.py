"""The live benchmark's WebRTC rules on made-up input: frames placed on the capture
clock by their flashes, RTP time unwrapped, and the floor cutting a frame as the
server does (``tests/test_bench_live.py`` has the rest, and one short real run)."""

from __future__ import annotations

import pytest

from bench.live import floor
from bench.live.webrtc import derive, unwrap
from mediaflow.live.rtp import MAX_PAYLOAD


def test_the_floor_cuts_a_frame_as_the_server_does() -> None:
    assert floor.PAYLOAD == MAX_PAYLOAD
    overhead = floor.OVERHEAD
    assert floor.frame_datagrams(100) == [100 + overhead]
    assert floor.frame_datagrams(MAX_PAYLOAD) == [MAX_PAYLOAD + overhead]
    whole = [MAX_PAYLOAD + overhead]
    assert floor.frame_datagrams(2 * MAX_PAYLOAD + 7) == whole * 2 + [7 + overhead]


def shown_frames(
    anchor: float, rtp0: int, seconds: float, delay: float, shown_after: float
) -> list[list[float]]:
    """What the page collects of a 30 fps camera whose flash lights source seconds'
    first three frames: [rtp, shown at, received at, brightness] per frame."""
    frames = []
    for n in range(round(seconds * 30)):
        source = 0.5 + n / 30  # the stream starts mid-second, as a viewer joins
        lit = (source % 1.0) < 0.1 - 1e-9
        received = anchor + source + delay
        rtp = (rtp0 + round(n * 3000)) % 2**32
        frames.append([rtp, received + shown_after, received, 235.0 if lit else 40.0])
    return frames


def test_webrtc_frames_are_placed_on_the_capture_clock_by_their_flashes() -> None:
    anchor = 1_800_000_000.25
    frames = shown_frames(anchor, 2**32 - 30_000, 5.0, delay=0.12, shown_after=0.08)
    derived = derive(frames, anchor)
    assert derived.error is None and derived.flashes == 5
    assert derived.origin_spread == pytest.approx(0.0, abs=1e-6)
    assert derived.latencies == pytest.approx([0.2] * len(frames), abs=1e-6)
    assert derived.to_browser == pytest.approx([0.12] * len(frames), abs=1e-6)
    assert derived.in_browser == pytest.approx([0.08] * len(frames), abs=1e-6)
    no_flash = [[rtp, shown, got, 40.0] for rtp, shown, got, _ in frames]
    assert derive(no_flash, anchor).error == "no flash found in 150 frames shown"


def test_rtp_timestamps_unwrap_across_32_bits() -> None:
    assert unwrap([2**32 - 3000, 0, 3000]).tolist() == pytest.approx(
        [0, 3000 / 90000, 6000 / 90000]
    )
    assert unwrap([6000, 3000]).tolist() == pytest.approx([0, -3000 / 90000])
