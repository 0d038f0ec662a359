"""The pure parts of copying a camera's packets: tables in, decisions out."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import av
import av.error
import pytest

from connectors._copy_jobs import Interleaver, PacketJob
from connectors._copy_pictures import PictureChoice, PictureChooser
from connectors._timeline import Epoch
from devices import CapturedPacket, CredentialsRefused, DeviceNotFound
from devices.capture_clock import BurstHold, CaptureClock
from devices.packet_input import _Timing
from devices.redact import public_url, scrub
from devices.stream_reading import StreamError, clean_error, unreachable
from mediaflow.live.h264 import (
    BitstreamError,
    avcc_config_to_annexb,
    avcc_sample,
    is_annexb,
    split_annexb,
)

EPOCH = Epoch(0, 0.0, None)
SECRET_URL = "rtsp://admin:s3cr%40t@127.0.0.1:8554/cam"


def packet(media: str, time_s: float, keyframe: bool = False) -> CapturedPacket:
    ticks = round(time_s * 90000)
    return CapturedPacket(
        media,
        b"",
        ticks,
        ticks,
        Fraction(1, 90000),
        time_s,
        time_s,
        0.0,
        keyframe,
        time_s,  # type: ignore[arg-type]
    )


def job(media: str, time_s: float, keyframe: bool = False) -> PacketJob:
    return PacketJob(packet(media, time_s, keyframe), time_s, EPOCH, None)  # type: ignore[arg-type]


def times(jobs: list[PacketJob]) -> list[tuple[str, float]]:
    return [(j.packet.media[0], j.packet.pts_s) for j in jobs]


def test_interleaver_lets_each_packet_out_once_the_other_medium_has_passed_it() -> None:
    mixer = Interleaver(with_sound=True)
    assert mixer.push(job("video", 0.0, True)) == []  # no sound yet: it may still come earlier
    assert times(mixer.push(job("audio", 0.02))) == [("v", 0.0)]
    assert times(mixer.push(job("audio", 0.04))) == []
    # A picture at 0.04 and sound at 0.04: the picture first (sound at a keyframe's
    # time plays in the segment the keyframe starts).
    assert times(mixer.push(job("video", 0.04))) == [("a", 0.02), ("v", 0.04), ("a", 0.04)]
    assert times(mixer.push(job("video", 0.08))) == []
    assert times(mixer.flush()) == [("v", 0.08)]


def test_interleaver_does_not_wait_for_a_medium_that_stalled() -> None:
    mixer = Interleaver(with_sound=True, max_wait_s=1.0)
    mixer.push(job("audio", 0.0))
    assert times(mixer.push(job("video", 0.5, True))) == [("a", 0.0)]
    assert times(mixer.push(job("video", 1.4))) == []
    assert times(mixer.push(job("video", 1.6))) == [("v", 0.5)]  # sound 1.1 s behind


def test_interleaver_without_sound_passes_video_through() -> None:
    mixer = Interleaver(with_sound=False)
    assert times(mixer.push(job("video", 0.0, True))) == [("v", 0.0)]
    assert mixer.push(job("audio", 0.0)) == []


def chosen(
    fps: float, frames: int, rate: int, gop: int, *, first_group: bool = False
) -> list[tuple[int, PictureChoice]]:
    """The frames a chooser decodes for ``fps`` JPEGs of a ``rate`` source whose
    keyframes come every ``gop`` frames."""
    chooser = PictureChooser(fps, 1 / rate, first_group=first_group)
    out = []
    for index in range(frames):
        choice = chooser.choose(index / rate, index % gop == 0)
        if choice is not None:
            out.append((index, choice))
    return out


def test_a_period_as_long_as_a_group_decodes_only_keyframes_each_alone() -> None:
    decisions = chosen(fps=1, frames=60, rate=15, gop=15)
    assert [index for index, _ in decisions] == [0, 15, 30, 45]
    assert all(choice == PictureChoice(emit=True, alone=True) for _, choice in decisions)


def test_a_shorter_period_decodes_up_to_the_last_picture_due_in_each_group() -> None:
    decisions = chosen(fps=2, frames=45, rate=15, gop=15)
    decoded = [index for index, _ in decisions]
    emitted = [index for index, choice in decisions if choice.emit]
    # Half a frame early counts (camera clocks jitter): 7/15 s is the picture at 0.5 s.
    # The first group's length is not known: its keyframe alone.
    assert emitted == [0, 15, 22, 30, 37]
    assert decoded == [0, *range(15, 23), *range(30, 38)]  # 23-29 are skipped


def test_a_files_first_group_is_decoded_through() -> None:
    decisions = chosen(fps=2, frames=30, rate=15, gop=15, first_group=True)
    assert [index for index, _ in decisions][:15] == list(range(15))
    assert [index for index, choice in decisions if choice.emit] == [0, 7, 15, 22]


def test_a_keyframe_that_is_not_due_is_skipped_when_no_picture_falls_in_its_group() -> None:
    decisions = chosen(fps=0.5, frames=75, rate=15, gop=15)
    assert [(i, c.alone) for i, c in decisions if i >= 15] == [(30, True), (60, True)]


def test_a_broken_group_waits_for_the_next_keyframe() -> None:
    chooser = PictureChooser(4, 1 / 15)
    assert chooser.choose(0.0, True) is not None
    chooser.broken()
    assert chooser.choose(1 / 15, False) is None
    assert chooser.choose(1.0, True) is not None


def test_capture_clock_follows_the_earliest_arrivals_and_never_goes_back() -> None:
    clock = CaptureClock(max_lag_s=1.0, window=3)
    # A burst: two seconds of media arrive at once when the client connects.
    assert clock.captured_at(0.0, 100.0) == 100.0
    assert clock.captured_at(2.0, 100.0) == 100.0  # older than it says: the anchor moves back
    assert clock.captured_at(2.1, 100.2) == pytest.approx(100.1)
    # Late by network jitter: placed by its own timestamp, not when it arrived.
    assert clock.captured_at(2.2, 100.5) == pytest.approx(100.2)


def test_a_burst_is_held_until_a_read_waits_then_timed_by_its_end() -> None:
    """Two seconds a camera sent while it was being opened come out of FFmpeg's buffer
    at once: placed by the anchor their last packet sets, they keep their spacing."""
    clock, hold = CaptureClock(), BurstHold[float](buffered_read_s=0.002)
    released: list[float] = []
    arrivals = [(media / 10, 100.0, 0.00001) for media in range(21)]  # 0-2 s, all at 100
    arrivals.append((2.1, 100.1, 0.09))  # the first read that waited: the network's pace
    for media, arrived, read_s in arrivals:
        clock.observe(media, arrived)
        released += [clock.time_of(m) for m in hold.take(media, read_s)]
    assert released == pytest.approx([98.0 + m / 10 for m in range(22)])
    assert hold.take(2.2, 0.0) == [2.2]  # settled: nothing is held any more
    assert BurstHold[int](enabled=False).take(1, 0.0) == [1]


def test_capture_clock_moves_forward_for_a_slow_source_clock() -> None:
    clock = CaptureClock(max_lag_s=1.0, window=3)
    clock.captured_at(0.0, 10.0)
    for media, arrived in ((1.0, 12.5), (2.0, 13.5), (3.0, 14.5)):
        clock.captured_at(media, arrived)
    assert clock.captured_at(4.0, 15.5) == pytest.approx(15.5)


def demuxed(pts: int | None, duration: int = 6000) -> av.Packet[Any]:
    made = av.Packet(b"x")
    made.pts, made.dts, made.duration = pts, pts, duration
    return made


def test_a_first_packet_without_a_timestamp_is_dated_from_the_next() -> None:
    timing = _Timing()
    assert timing.take(demuxed(None)) == []
    dated = timing.take(demuxed(5999))
    assert [(pts, dts) for _, pts, dts in dated] == [(-1, -1), (5999, 5999)]
    assert [(p, d) for _, p, d in timing.take(demuxed(None))] == [(11999, 11999)]


@pytest.mark.parametrize(
    ("url", "public"),
    [
        (SECRET_URL, "rtsp://admin@127.0.0.1:8554/cam"),
        ("rtsp://:pw@cam/x", "rtsp://cam/x"),
        ("rtsp://admin@cam/x", "rtsp://admin@cam/x"),
        ("rtsp://127.0.0.1/x", "rtsp://127.0.0.1/x"),
        ("/dev/video0", "/dev/video0"),
        ("file:a:b@c.mp4", "file:a:b@c.mp4"),
    ],
)
def test_public_url_drops_the_password_only(url: str, public: str) -> None:
    assert public_url(url) == public


def test_scrub_hides_the_password_however_it_is_quoted() -> None:
    text = f"failed: '{SECRET_URL}' (user admin, password s3cr@t, s3cr%40t)"
    clean = scrub(text, SECRET_URL)
    assert "s3cr" not in clean
    assert "rtsp://admin@127.0.0.1:8554/cam" in clean


def test_ffmpeg_errors_are_retold_without_the_credentials() -> None:
    error = av.error.HTTPUnauthorizedError(-825242872, "Server returned 401", SECRET_URL)
    cleaned = clean_error(error, SECRET_URL)
    assert isinstance(cleaned, StreamError) and "s3cr" not in str(cleaned)
    assert str(cleaned).startswith("HTTPUnauthorizedError")
    plain = OSError("connection refused")
    assert clean_error(plain, "rtsp://127.0.0.1/x") is plain
    refused = unreachable(SECRET_URL, error)
    assert isinstance(refused, CredentialsRefused) and "s3cr" not in str(refused)
    assert "rtsp://admin@127.0.0.1:8554/cam refused the credentials" in str(refused)
    missing = unreachable(SECRET_URL, av.error.ConnectionRefusedError(111, "refused", SECRET_URL))
    assert type(missing) is DeviceNotFound and "s3cr" not in str(missing)


def test_avcc_samples_and_records_become_annex_b() -> None:
    sps, pps, idr = b"\x67\x64\x00\x1f\xac", b"\x68\xee\x3c\x80", b"\x65\x88\x84\x00\x10"
    record = bytes([1, 0x64, 0, 0x1F, 0xFF, 0xE1]) + len(sps).to_bytes(2, "big") + sps
    record += bytes([1]) + len(pps).to_bytes(2, "big") + pps
    annexb, length_size = avcc_config_to_annexb(record)
    assert length_size == 4 and split_annexb(annexb) == [sps, pps]
    sample = len(idr).to_bytes(4, "big") + idr + len(sps).to_bytes(4, "big") + sps
    assert avcc_sample(sample) == len(idr).to_bytes(4, "big") + idr  # no parameter sets
    short = len(idr).to_bytes(2, "big") + idr
    assert avcc_sample(short, length_size=2) == len(idr).to_bytes(4, "big") + idr
    plain = len(idr).to_bytes(4, "big") + idr
    assert avcc_sample(plain) is plain  # nothing to change: not copied
    assert is_annexb(annexb) and not is_annexb(sample)
    with pytest.raises(BitstreamError):
        avcc_sample(sample[:-1])
    with pytest.raises(BitstreamError):
        avcc_config_to_annexb(record[:9])
