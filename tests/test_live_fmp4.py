"""Live fMP4: what PyAV's x264 and AAC encoders produce, written by mediaflow.live, read back
by FFmpeg (ffprobe, ffmpeg, PyAV) and by Chromium's Media Source Extensions.

The pure core reads like tables (Annex B splitting, SPS sizes, box fields, data offsets);
the rest is a live session: an init segment, then fragments of 0.5 s made one at a time,
the first starting with a keyframe and every other one without, concatenated into a file.
ffprobe/ffmpeg are Debian's (``apt-get install ffmpeg``); without them those tests skip,
which fails the run in CI (``tests/ci_skips.py``).
"""

from __future__ import annotations

import base64
import itertools
import struct
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import av
import pytest

from mediaflow.live import (
    MuxError,
    Sample,
    TrackRun,
    avc_decoder_config,
    fragment,
    init_segment,
)
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from playwright.async_api import Page

from tests.live_helpers import (  # noqa: F401 - fixtures among them
    AAC_FRAME,
    AUDIO_RATE,
    FPS,
    FRAGMENT_S,
    HEIGHT,
    SECONDS,
    START_S,
    WIDTH,
    Session,
    boxes,
    child,
    children,
    ffprobe,
    read_fragment,
    run_tool,
    session_fixture,
    tone_fixture,
    tool,
    video_fixture,
    write,
)

# -- boxes -----------------------------------------------------------------------------------

KEY, NON_KEY = 0x02000000, 0x01010000  # sample_depends_on 2 / 1 + sample_is_non_sync_sample


def test_init_segment_has_ftyp_moov_a_trak_per_track_and_mvex(session: Session) -> None:
    data = session.init
    ftyp, moov = boxes(data)
    assert ftyp[0] == b"ftyp" and data[8:12] == b"iso6"
    brands = {data[at : at + 4] for at in range(16, ftyp[2], 4)}
    assert {b"iso6", b"cmfc", b"mp41", b"avc1"} <= brands
    assert children(data, moov) == [b"mvhd", b"trak", b"trak", b"mvex"]
    trex = boxes(data, child(data, moov, "mvex")[1] + 8, child(data, moov, "mvex")[2])
    assert [struct.unpack_from(">I", data, found[1] + 12)[0] for found in trex] == [1, 2]
    stbl = child(data, moov, "trak/mdia/minf/stbl")
    assert children(data, stbl) == [b"stsd", b"stts", b"stsc", b"stsz", b"stco"]
    avcc = child(data, stbl, "stsd/avc1/avcC")
    video = session.video_track
    assert data[avcc[1] + 8 : avcc[2]] == avc_decoder_config(video.sps, video.pps)
    assert session.video_track.codec == f"avc1.6400{video.sps[0][3]:02x}"  # High, its level
    assert session.audio_track.codec == "mp4a.40.2"  # AAC-LC
    only_video = init_segment(session.video_track, None)
    assert children(only_video, boxes(only_video)[1]) == [b"mvhd", b"trak", b"mvex"]


def test_every_fragment_carries_its_samples_where_its_truns_point(session: Session) -> None:
    for number, (data, runs) in enumerate(zip(session.fragments, session.runs, strict=True), 1):
        sequence, read = read_fragment(data)
        assert sequence == number
        assert [run.track_id for run in read] == [1, 2]
        for got, made in zip(read, runs, strict=True):
            assert (got.tfhd_flags, got.tfdt_version) == (0x020000, 1)  # default-base-is-moof
            assert (got.trun_version, got.trun_flags) == (0, 0x000701)  # no composition offsets
            assert got.samples == [sample.data for sample in made.samples]
            assert got.durations == [sample.duration for sample in made.samples]
        video, audio = read
        assert video.base_decode_time == (START_S + (number - 1) * FRAGMENT_S) * 90000
        assert video.flags == [KEY if number % 2 else NON_KEY] + [NON_KEY] * (len(video.flags) - 1)
        assert audio.flags == [KEY] * len(audio.flags)  # every AAC frame decodes alone


def test_fragment_lays_out_samples_in_the_order_of_its_runs() -> None:
    video = [
        Sample(b"\x00\x00\x00\x02\x65\x88", 3000, True),
        Sample(b"\x00\x00\x00\x01\x41", 3000, False),
    ]
    audio = [Sample(b"\x21\x10\x05", 1024, True), Sample(b"\x21\x10", 1024, True)]
    runs = [TrackRun(1, 9000, video), TrackRun(2, 1 << 40, audio)]
    sequence, read = read_fragment(fragment(7, runs))
    assert sequence == 7
    assert [(run.track_id, run.base_decode_time, run.flags) for run in read] == [
        (1, 9000, [KEY, NON_KEY]),
        (2, 1 << 40, [KEY, KEY]),  # tfdt version 1: past 32 bits
    ]
    assert [run.samples for run in read] == [[s.data for s in video], [s.data for s in audio]]
    _, swapped = read_fragment(fragment(7, runs[::-1]))
    assert swapped == read[::-1]


@pytest.mark.parametrize(
    ("offsets", "version", "with_offsets"),
    [((0, 0), 0, False), ((3000, 0), 0, True), ((3000, -3000), 1, True)],
    ids=["none", "positive", "negative"],
)
def test_composition_offsets_are_written_when_any_is_set(
    offsets: tuple[int, int], version: int, with_offsets: bool
) -> None:
    video = [
        Sample(b"\x00\x00\x00\x01\x65", 3000, keyframe=True, composition_offset=offsets[0]),
        Sample(b"\x00\x00\x00\x01\x41", 3000, keyframe=False, composition_offset=offsets[1]),
    ]
    _, (read,) = read_fragment(fragment(1, [TrackRun(1, 0, video)]))
    assert (read.trun_version, bool(read.trun_flags & 0x800)) == (version, with_offsets)
    assert read.composition_offsets == (list(offsets) if with_offsets else [])
    assert read.samples == [sample.data for sample in video]


@pytest.mark.parametrize(
    ("sequence", "runs"),
    [
        (1, []),
        (1, [TrackRun(1, 0, [])]),
        (1, [TrackRun(1, 0, [Sample(b"x", 1, True)]), TrackRun(1, 1, [Sample(b"y", 1, True)])]),
        (1, [TrackRun(1, -1, [Sample(b"x", 1, True)])]),
        (1, [TrackRun(1, 0, [Sample(b"x", -1, True)])]),
        (1, [TrackRun(1, 0, [Sample(b"x", 1, True, composition_offset=1 << 31)])]),
        (1 << 32, [TrackRun(1, 0, [Sample(b"x", 1, True)])]),
    ],
    ids=[
        "no runs",
        "no samples",
        "a track twice",
        "negative time",
        "negative duration",
        "offset too big",
        "sequence too big",
    ],
)
def test_fragment_refuses_what_boxes_cannot_carry(sequence: int, runs: list[TrackRun]) -> None:
    with pytest.raises(MuxError):
        fragment(sequence, runs)


# -- the session, read by FFmpeg --------------------------------------------------------------


def test_ffprobe_reads_one_h264_and_one_aac_stream(session: Session, tmp_path: Path) -> None:
    path = write(tmp_path / "live.mp4", session.init, *session.fragments)
    probed = ffprobe(path)
    by_type = {stream["codec_type"]: stream for stream in probed["streams"]}
    assert len(probed["streams"]) == 2
    assert by_type["video"]["codec_name"] == "h264"
    assert (by_type["video"]["width"], by_type["video"]["height"]) == (WIDTH, HEIGHT)
    assert by_type["audio"]["codec_name"] == "aac" and by_type["audio"]["profile"] == "LC"
    assert (by_type["audio"]["sample_rate"], by_type["audio"]["channels"]) == ("16000", 1)
    assert float(probed["format"]["start_time"]) == pytest.approx(START_S, abs=0.01)
    # FFmpeg counts a fragmented track's duration from its timeline's zero, not from the
    # first tfdt (there is no edit list to say otherwise): it is where the track ends.
    assert int(by_type["video"]["duration_ts"]) == (START_S + SECONDS) * 90000
    end_of_audio = START_S * AUDIO_RATE + session.audio_frames * AAC_FRAME
    assert int(by_type["audio"]["duration_ts"]) == end_of_audio
    assert float(probed["format"]["duration"]) == pytest.approx(START_S + SECONDS, abs=0.1)


def test_ffmpeg_decodes_the_whole_session_without_an_error(
    session: Session, tmp_path: Path
) -> None:
    path = write(tmp_path / "live.mp4", session.init, *session.fragments)
    done = run_tool(tool("ffmpeg"), "-v", "error", "-i", str(path), "-f", "null", "-")
    assert (done.returncode, done.stderr) == (0, "")


def decoded_times(path: Path) -> tuple[list[Fraction], list[tuple[Fraction, int]]]:
    """PyAV's decode: video frame times, and (time, samples) of each audio frame, in seconds."""
    with av.open(str(path)) as container:
        video, audio = container.streams.video[0], container.streams.audio[0]
        frames: list[Fraction] = []
        sound: list[tuple[Fraction, int]] = []
        for frame in container.decode(video, audio):
            assert isinstance(frame, av.AudioFrame | av.VideoFrame), frame
            assert frame.pts is not None and frame.time_base is not None
            if isinstance(frame, av.AudioFrame):
                sound.append((frame.pts * frame.time_base, frame.samples))
            else:
                assert (frame.width, frame.height) == (WIDTH, HEIGHT)
                frames.append(frame.pts * frame.time_base)
    return frames, sound


def test_pyav_decodes_every_frame_continuously_from_the_first_tfdt(
    session: Session, tmp_path: Path
) -> None:
    path = write(tmp_path / "live.mp4", session.init, *session.fragments)
    frames, sound = decoded_times(path)
    assert frames == [START_S + Fraction(n, FPS) for n in range(SECONDS * FPS)]
    assert sound[0][0] == START_S
    for (time, samples), (following, _) in itertools.pairwise(sound):
        assert following == time + Fraction(samples, AUDIO_RATE)  # no gap at fragment edges
    assert sum(samples for _, samples in sound) == session.audio_frames * AAC_FRAME


def test_a_player_joining_at_a_later_keyframe_fragment_starts_there(
    session: Session, tmp_path: Path
) -> None:
    # An HLS client or an MSE page joining live: the one init segment, then the stream
    # from the fragment at 1 s (a keyframe); the fragments' tfdt place it in time.
    path = write(tmp_path / "joined.mp4", session.init, *session.fragments[2:])
    frames, sound = decoded_times(path)
    assert frames == [START_S + 1 + Fraction(n, FPS) for n in range(FPS)]
    assert abs(sound[0][0] - (START_S + 1)) < Fraction(AAC_FRAME, AUDIO_RATE)
    done = run_tool(tool("ffmpeg"), "-v", "error", "-i", str(path), "-f", "null", "-")
    assert (done.returncode, done.stderr) == (0, "")


# -- the session, played by Chromium through Media Source Extensions --------------------------

MSE_PLAY = """
async ({mime, parts, playSeconds}) => {
  if (!MediaSource.isTypeSupported(mime)) return {unsupported: mime};
  const source = new MediaSource();
  const video = document.createElement("video");
  video.muted = true;
  video.src = URL.createObjectURL(source);
  document.body.append(video);
  await new Promise((resolve) => source.addEventListener("sourceopen", resolve, {once: true}));
  const buffer = source.addSourceBuffer(mime);
  for (const part of parts) {
    buffer.appendBuffer(Uint8Array.from(atob(part), (c) => c.charCodeAt(0)));
    await new Promise((resolve, reject) => {
      buffer.addEventListener("updateend", resolve, {once: true});
      buffer.addEventListener("error", () => reject(new Error("append failed")), {once: true});
    });
  }
  const ranges = [];
  for (let i = 0; i < buffer.buffered.length; i++) {
    ranges.push([buffer.buffered.start(i), buffer.buffered.end(i)]);
  }
  video.currentTime = ranges[0][0];
  await video.play();
  const until = ranges[0][0] + playSeconds;
  await new Promise((resolve, reject) => {
    video.addEventListener("error", () => reject(new Error(video.error.message)));
    const check = () => (video.currentTime >= until ? resolve() : setTimeout(check, 20));
    check();
  });
  return {ranges, width: video.videoWidth, height: video.videoHeight,
          frames: video.getVideoPlaybackQuality().totalVideoFrames,
          error: video.error && video.error.message};
}
"""


async def test_chromium_media_source_buffers_and_plays_the_session(
    session: Session, page: Page
) -> None:
    mime = f'video/mp4; codecs="{session.video_track.codec}, {session.audio_track.codec}"'
    parts = [base64.b64encode(part).decode() for part in (session.init, *session.fragments)]
    result = await page.evaluate(MSE_PLAY, {"mime": mime, "parts": parts, "playSeconds": 0.5})
    assert "unsupported" not in result, f"this Chromium cannot play {mime}"
    assert result["error"] is None and page_errors(page) == []
    ((start, end),) = result["ranges"]  # one range: the fragments join without a gap
    assert start == pytest.approx(START_S, abs=0.05)
    assert end == pytest.approx(START_S + SECONDS, abs=0.1)
    assert (result["width"], result["height"]) == (WIDTH, HEIGHT)
    assert result["frames"] > 0
