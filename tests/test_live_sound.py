"""A microphone's live sound: real AAC through PyAV, cut into 1024-sample slots.

The pure core reads like tables (:class:`SampleClock`, ``check_sound``); the encoder's
frames are decoded back by FFmpeg's AAC decoder; :class:`LiveSound` runs as a
microphone drives it, chunk by chunk on the event loop, with a small recording sink
as its consumer; a :class:`LiveFeed` with sound is fed real x264 frames and its parts
are read back by PyAV. Last, the flow and connector checks of ``live_audio``.
"""

from __future__ import annotations

import asyncio
import io
import math
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest

from connectors.camera import CameraConnector
from mediaflow.flows import FlowError, load_flow
from mediaflow.live import AudioTrack, VideoTrack
from mediaflow.live.audio import AacEncoder, Pcm, SampleClock, check_sound, silent_stream
from mediaflow.live.hub import FrameTap, LiveHub
from mediaflow.live.parts import AAC_FRAME_SAMPLES, AudioFrame, VideoFrame
from mediaflow.live.sound import QUEUE_CHUNKS, LiveSound
from tests.http_support import wait_until
from tests.live_helpers import FPS, EncodedVideo, encode_video

RATE = 16000
CHUNK = RATE // 10  # 100 ms, as the microphone connector emits
SLOT = AAC_FRAME_SAMPLES
T0 = 1_796_000_000.0  # capture clock (epoch seconds) of the first sample
Signal = npt.NDArray[np.float32]


def tone(seconds: float, rate: int = RATE, channels: int = 1) -> Pcm:
    """440 Hz on the left (or only) channel, 1000 Hz on the right, at 0.3 of full scale."""
    t = np.arange(round(seconds * rate)) / rate
    waves = [0.3 * np.sin(2 * np.pi * hz * t) for hz in (440, 1000)[:channels]]
    return (np.stack(waves, axis=1) * 32767).astype(np.int16)


def decode(asc: bytes, frames: list[bytes]) -> Signal:
    """Raw AAC frames through FFmpeg's decoder: ``(channels, samples)`` floats."""
    decoder = av.CodecContext.create("aac", "r")
    decoder.extradata = asc
    planes = [f.to_ndarray() for data in frames for f in decoder.decode(av.Packet(data))]
    return np.concatenate(planes, axis=1)


def dominant_hz(signal: Signal, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    return float(np.argmax(spectrum)) * rate / len(signal)


def rms(signal: npt.NDArray[np.floating]) -> float:
    return float(np.sqrt(np.mean(np.square(signal, dtype=np.float64))))


def packets_for(samples: int, rate: int = RATE, channels: int = 1) -> int:
    """How many frames a new encoder has given back after ``samples`` (its lookahead
    holds some back): what ``LiveSound.encoded`` reaches once the worker is done."""
    return len(AacEncoder(rate, channels).encode(np.zeros((samples, channels), np.int16)))


# -- the pure core -------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "channels"), [(RATE, 1), (48000, 2)])
def test_the_encoder_gives_back_the_tone_on_the_slot_grid(rate: int, channels: int) -> None:
    pcm, first = tone(1.0, rate, channels), 3 * SLOT
    encoder = AacEncoder(rate, channels, first_sample=first)
    frames: list[tuple[int, bytes]] = []
    for at in range(0, len(pcm), rate // 10):  # 100 ms chunks
        frames += encoder.encode(pcm[at : at + rate // 10])
    starts = [sample for sample, _ in frames]
    # The priming frame is the slot before the first sample; then one frame a slot.
    assert starts == list(range(first - SLOT, first - SLOT + SLOT * len(frames), SLOT))
    assert len(frames) >= len(pcm) // SLOT - 1  # all but the encoder's lookahead
    assert encoder.track == AudioTrack(rate, channels, encoder.asc)
    assert encoder.track.codec == "mp4a.40.2"
    played = decode(encoder.asc, [data for _, data in frames])[:, SLOT:]  # past the priming
    for channel, hz in enumerate((440, 1000)[:channels]):
        given = pcm[: played.shape[1], channel] / 32768
        # Sample for sample once settled: the priming frame is exactly one slot long.
        assert rms((played[channel] - given)[SLOT:]) < 0.1 * rms(given)
        assert dominant_hz(played[channel], rate) == pytest.approx(hz, abs=2 * rate / len(given))
        assert rms(played[channel]) == pytest.approx(rms(given), rel=0.05)


@pytest.mark.parametrize(("rate", "channels"), [(RATE, 1), (48000, 2)])
def test_the_silent_frame_is_small_steady_and_silent(rate: int, channels: int) -> None:
    track, silence = silent_stream(rate, channels)
    assert len(silence) <= 16 and silent_stream(rate, channels) == (track, silence)
    # What any encoder of this sound settles on for silence, not one frame by chance.
    encoder = AacEncoder(rate, channels)
    assert track == encoder.track
    settled = [data for _, data in encoder.encode(np.zeros((8 * SLOT, channels), np.int16))]
    assert settled[2:] == [silence] * (len(settled) - 2)
    played = decode(track.asc, [silence] * 3)
    assert played.shape == (channels, 3 * SLOT) and not played.any()


def test_check_sound_refuses_what_aac_cannot_carry_as_it_is() -> None:
    check_sound(RATE, 1)
    check_sound(48000, 2)
    for rate, channels, refusal in [(7000, 1, "got 7000"), (RATE, 3, "got 3 channels")]:
        with pytest.raises(ValueError, match=refusal):
            check_sound(rate, channels)


def test_the_sample_clock_follows_each_chunk_anchor() -> None:
    clock = SampleClock(RATE)
    with pytest.raises(ValueError, match="no chunk"):
        clock.time_of(0)
    assert clock.take(CHUNK, 100.0) == 0
    assert clock.take(CHUNK, 100.12) == CHUNK  # the device ran 20 ms slow: follow it
    assert clock.samples == 2 * CHUNK
    table = [(-CHUNK, 99.9), (0, 100.0), (800, 100.05), (CHUNK - 1, 100.0 + (CHUNK - 1) / RATE)]
    table += [(CHUNK, 100.12), (2400, 100.17), (4000, 100.27)]
    for sample, at in table:
        assert clock.time_of(sample) == pytest.approx(at, abs=1e-9), sample


def test_the_sample_clock_keeps_only_the_newest_anchors() -> None:
    clock = SampleClock(RATE, keep=2)
    for index, at in enumerate([100.0, 100.3, 100.4]):
        clock.take(CHUNK, at)
        assert clock.time_of(index * CHUNK) == at
    assert clock.time_of(0) == pytest.approx(100.2)  # its own anchor is gone: extrapolated


# -- LiveSound, driven as a microphone drives it --------------------------------------------


@dataclass
class Recorder:
    """A sink that keeps what the sound hands it: a consumer, as a live feed is."""

    watched: bool = False
    tracks: list[AudioTrack | None] = field(default_factory=list)
    frames: list[AudioFrame] = field(default_factory=list)

    def set_sound(self, track: AudioTrack | None) -> None:
        self.tracks.append(track)

    def add_audio(self, frame: AudioFrame) -> None:
        self.frames.append(frame)

    def samples(self) -> list[int]:
        """The stream sample each frame starts at, from its capture time."""
        return [round((frame.time_s - T0) * RATE) for frame in self.frames]


def take(sound: LiveSound, pcm: Pcm, start: int = 0, rate: int = RATE, chunk: int = CHUNK) -> None:
    """``pcm`` as a microphone emits it from sample ``start``, each chunk with its time."""
    for at in range(0, len(pcm), chunk):
        sound.take(pcm[at : at + chunk], rate, pcm.shape[1], T0 + (start + at) / rate)


@pytest.fixture(name="sound")
async def sound_fixture() -> AsyncIterator[LiveSound]:
    sound = LiveSound("test/mic")
    yield sound
    await sound.close()


async def test_an_unwatched_sound_is_silent_slots_on_the_capture_clock(sound: LiveSound) -> None:
    sink = Recorder()
    sound.subscribe(sink)
    assert sink.tracks == []  # no format before the first chunk
    take(sound, tone(1.0))
    await wait_until(lambda: len(sink.frames) == RATE // SLOT)
    track, silence = silent_stream(RATE, 1)
    assert sink.tracks == [track]
    assert [frame.data for frame in sink.frames] == [silence] * (RATE // SLOT)
    expected = [T0 + index * SLOT / RATE for index in range(RATE // SLOT)]
    assert [frame.time_s for frame in sink.frames] == pytest.approx(expected, abs=1e-6)
    assert sound.encoded == 0


async def test_watching_switches_encoding_on_and_off_without_a_hole(sound: LiveSound) -> None:
    sink = Recorder()
    sound.subscribe(sink)
    pcm = tone(3.0)
    take(sound, pcm[:RATE])
    await wait_until(lambda: len(sink.frames) == RATE // SLOT)
    sink.watched = True
    take(sound, pcm[RATE : 2 * RATE], start=RATE)
    # The encoder starts at the slot the silence stopped at, with the samples it held.
    await wait_until(lambda: sound.encoded == packets_for(2 * RATE - RATE // SLOT * SLOT))
    on = len(sink.frames)
    sink.watched = False
    take(sound, pcm[2 * RATE :], start=2 * RATE)
    await wait_until(lambda: sink.samples()[-1] >= len(pcm) - 2 * SLOT)
    # Every slot once, in order: the priming frame and what the encoder still held when
    # nobody watched any more are not handed out, nor left as a hole.
    assert sink.samples() == list(range(0, len(pcm) // SLOT * SLOT, SLOT))
    assert np.diff([frame.time_s for frame in sink.frames]) == pytest.approx(SLOT / RATE, abs=1e-6)
    track, silence = silent_stream(RATE, 1)
    played = [frame.data for frame in sink.frames]
    encoded = played[RATE // SLOT : on]  # all but the priming frame
    assert len(encoded) == sound.encoded - 1 and silence not in encoded
    assert {*played[: RATE // SLOT], *played[on:]} == {silence}
    heard = decode(track.asc, encoded)[0, 2 * SLOT :]
    assert dominant_hz(heard, RATE) == pytest.approx(440, abs=2 * RATE / len(heard))


async def test_a_sound_aac_cannot_carry_says_none_once(sound: LiveSound) -> None:
    sink = Recorder(watched=True)
    sound.subscribe(sink)
    take(sound, tone(0.5, 7000), rate=7000, chunk=700)
    await asyncio.sleep(0.05)
    assert sink.tracks == [None] and sink.frames == []
    assert sound.error is not None and "got 7000" in sound.error
    late = Recorder()
    sound.subscribe(late)
    assert late.tracks == [None]


async def test_chunks_the_worker_cannot_take_are_dropped_then_sound_goes_on(
    sound: LiveSound,
) -> None:
    sink, small, lost = Recorder(), 160, 20  # 10 ms chunks: the queue fills fast
    sound.subscribe(sink)
    pcm = tone((QUEUE_CHUNKS + lost + 64) * small / RATE)
    kept, resumed = QUEUE_CHUNKS * small, (QUEUE_CHUNKS + lost) * small
    # No await between chunks: the worker cannot run, as when encoding falls behind.
    take(sound, pcm[:resumed], chunk=small)
    assert sound.dropped == lost
    await wait_until(lambda: len(sink.frames) == kept // SLOT)
    take(sound, pcm[resumed:], start=resumed, chunk=small)
    last = (len(pcm) // SLOT - 1) * SLOT
    await wait_until(lambda: sink.samples()[-1] == last)
    after = resumed // SLOT * SLOT  # the slot the first chunk after the hole falls in
    assert after > kept  # a hole of whole slots, then the grid again
    assert sink.samples() == [*range(0, kept, SLOT), *range(after, last + 1, SLOT)]


async def test_close_stops_the_worker_and_its_thread(sound: LiveSound) -> None:
    def workers() -> int:
        names = [getattr(t.get_coro(), "__qualname__", "") for t in asyncio.all_tasks()]
        return names.count("LiveSound.run")

    def threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("live sound test/")]

    sound.subscribe(Recorder(watched=True))
    take(sound, tone(0.5))
    await wait_until(lambda: sound.encoded > 0)
    assert workers() == 1 and threads()
    await sound.close()
    assert workers() == 0
    await wait_until(lambda: not threads())


# -- a live feed that carries the sound ------------------------------------------------------


@pytest.fixture(scope="module", name="video")
def video_fixture() -> EncodedVideo:
    return encode_video(160, 96, 2 * FPS)


def tap_frames(tap: FrameTap, video: EncodedVideo, frames: range) -> None:
    for index in frames:
        frame = VideoFrame(video.packets[index], T0 + index / FPS, video.keyframes[index])
        tap(video.extradata, frame)


async def test_a_feed_with_sound_waits_for_it_and_its_parts_carry_aac(video: EncodedVideo) -> None:
    hub = LiveHub()
    tap = hub.open_feed("desk", "cam", sound_from="mic").tap
    feed, sound = hub.feed("desk", "cam"), hub.sound("desk", "mic")
    assert feed is not None and sound.sinks == [feed]
    try:
        feed.touch()  # a player reads it: the sound is encoded
        tap_frames(tap, video, range(5))
        await wait_until(lambda: feed.frames == 5)
        assert feed.init is None  # the picture's format is known, the sound's not yet
        pcm = tone(2.0)
        take(sound, pcm)
        assert feed.codec == f"{VideoTrack.from_annexb(video.extradata).codec},mp4a.40.2"
        await wait_until(lambda: sound.encoded == packets_for(len(pcm)))
        tap_frames(tap, video, range(5, len(video.packets)))
        await wait_until(lambda: feed.frames == len(video.packets))
        parts = feed.parts
        assert feed.ready and feed.init is not None and len(parts) == 3
        with av.open(io.BytesIO(feed.init + b"".join(p.data for p in parts))) as container:
            assert len(container.streams.video) == 1
            (stream,) = container.streams.audio
            assert (stream.codec_context.name, stream.sample_rate) == ("aac", RATE)
            packets = [p for p in container.demux(stream) if p.size]
            heard = np.concatenate([f.to_ndarray()[0] for p in packets for f in p.decode()])
        end_s = parts[-1].start_s + parts[-1].duration_s
        assert len(packets) == math.ceil(end_s * RATE / SLOT)  # every slot before the end
        assert dominant_hz(heard[2 * SLOT :], RATE) == pytest.approx(440, abs=10)
        hub.drop("desk", "cam", tap)
        assert sound.sinks == [] and hub.feed("desk", "cam") is None
    finally:
        await sound.close()


async def test_a_feed_whose_sound_cannot_be_live_goes_on_video_only(video: EncodedVideo) -> None:
    hub = LiveHub()
    tap = hub.open_feed("yard", "cam", sound_from="mic").tap
    feed, sound = hub.feed("yard", "cam"), hub.sound("yard", "mic")
    assert feed is not None
    try:
        take(sound, tone(0.2, 7000), rate=7000, chunk=700)
        tap_frames(tap, video, range(FPS + 1))
        await wait_until(lambda: feed.ready)
        assert feed.init is not None
        assert feed.codec == VideoTrack.from_annexb(video.extradata).codec
        with av.open(io.BytesIO(feed.init + b"".join(p.data for p in feed.parts))) as container:
            assert (len(container.streams.video), len(container.streams.audio)) == (1, 0)
    finally:
        await sound.close()


# -- live_audio in a flow -------------------------------------------------------------------

FLOW = """
[flow]
name = "live"

[[node]]
id = "cam"
connector = "camera"
device = "lavfi:testsrc2=size=160x96:rate=15"
live_audio = "{source}"

[[node]]
id = "mic"
connector = "microphone"
"""


@pytest.mark.parametrize("source", ["mic", "cam", "nobody"])
def test_live_audio_names_a_node_with_sound(tmp_path: Path, source: str) -> None:
    path = tmp_path / "live.toml"
    path.write_text(FLOW.format(source=source))
    if source == "mic":
        assert list(load_flow(path).nodes) == ["cam", "mic"]
        return
    with pytest.raises(FlowError) as caught:
        load_flow(path)
    problem = f"live_audio = {source!r} is not a node with an 'audio' output"
    assert str(caught.value) == f"{path}: node 'cam': {problem} (those with sound: mic)"
    assert caught.value.node == "cam"


def test_live_audio_needs_h264() -> None:
    device = "lavfi:testsrc2"
    CameraConnector(device=device, codec="h264", live_audio="mic")
    with pytest.raises(ValueError, match=r"^live_audio needs codec = 'h264'.*'vp8'"):
        CameraConnector(device=device, codec="vp8", live_audio="mic")


async def test_an_encoder_error_leaves_the_sound_silent_not_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sound = LiveSound("desk/mic")
    sink = Recorder(watched=True)
    sound.subscribe(sink)
    stereo = np.zeros((1600, 2), dtype=np.int16)  # said to be mono: the encoder refuses it
    for index in range(10):
        sound.take(stereo, RATE, 1, T0 + index * 0.1)
    await wait_until(lambda: len(sink.frames) >= 14)
    await sound.close()
    assert sound.encoding_failed and sound.encoded == 0
    assert {frame.data for frame in sink.frames} == {silent_stream(RATE, 1)[1]}
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == [
        "live sound of desk/mic: encoding failed, silence from now"
    ]
