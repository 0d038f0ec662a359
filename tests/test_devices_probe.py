"""``devices.probe_source`` and ``mediaflow devices --probe``: the pure measurements as
tables, then real media (lavfi, small files made with PyAV here) and real refusals
(a closed port, a silent listener, an HTTP server answering 401)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from devices import DeviceNotFound, SourceProbe, probe_source
from devices.probe import (
    Keyframe,
    keyframe_interval,
    measured_bitrate,
    measured_rate,
    stop_reason,
)
from mediaflow import cli

SECRET = "s3cret"
FPS = 15
GOP = 15  # frames: a keyframe every second at FPS

# -- the pure core -----------------------------------------------------------------------

KEYFRAME_CASES: list[tuple[str, list[Keyframe], list[float], float | None, tuple[object, ...]]] = [
    # (case, keyframes (ordinal, pts), every packet's pts, fps, (seconds, frames, at_least))
    ("regular", [(0, 0.0), (30, 1.0), (60, 2.0)], [i / 30 for i in range(61)], 30.0,
     (1.0, 30, None)),
    ("median of uneven gaps", [(0, 0.0), (30, 1.0), (90, 3.0), (120, 4.0)],
     [i / 30 for i in range(121)], 30.0, (1.0, 30, None)),
    ("RTSP's first packet without pts", [(0, None), (30, 1.0), (60, 2.0)],
     [i / 30 for i in range(1, 61)], 30.0, (1.0, 30, None)),
    ("no gap timed: frames and fps", [(0, None), (30, None)], [], 30.0, (1.0, 30, None)),
    ("no gap timed, no fps", [(0, None), (30, None)], [], None, (None, 30, None)),
    ("B-frames: frames from seconds", [(0, 0.0), (13, 1.0), (28, 2.0)],
     [i / 15 for i in range(31)], 15.0, (1.0, 15, None)),
    ("one keyframe, first", [(0, 0.0)], [i / 15 for i in range(31)], 15.0, (None, None, 2.0)),
    ("one keyframe, midway", [(10, 1.0)], [0.5, 1.0, 1.5, 3.0], 15.0, (None, None, 2.0)),
    ("no keyframe", [], [0.5, 1.0, 2.5], 15.0, (None, None, 2.0)),
    ("nothing seen", [], [], None, (None, None, None)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("keyframes", "times", "fps", "expected"),
    [c[1:] for c in KEYFRAME_CASES],
    ids=[c[0] for c in KEYFRAME_CASES],
)
def test_keyframe_interval(
    keyframes: list[Keyframe], times: list[float], fps: float | None, expected: tuple[object, ...]
) -> None:
    assert keyframe_interval(keyframes, times, fps) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("times", "expected"),
    [([], None), ([1.0], None), ([1.0, 1.0], None), ([0.0, 0.1, 0.2, 0.3], 10.0),
     ([0.3, 0.1, 0.0, 0.2, 0.2], 10.0)],
)  # fmt: skip
def test_measured_rate(times: list[float], expected: float | None) -> None:
    assert measured_rate(times) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("size", "packets", "times", "expected"),
    [
        (1000, 10, [i / 10 for i in range(10)], 8000),  # 10 packets of 0.1 s: 1 s
        (1100, 11, [i / 10 for i in range(1, 11)], 8000),  # one more, without pts
        (1000, 1, [0.0], None),
        (1000, 2, [0.5, 0.5], None),
    ],
)
def test_measured_bitrate(size: int, packets: int, times: list[float], expected: int) -> None:
    assert measured_bitrate(size, packets, times) == expected


STOP_CASES = [
    # (case, live, wall_s, media_s, keyframes per video stream, reason)
    ("listening", False, 0.1, 1.0, [2], None),
    ("three keyframes", False, 0.1, 2.0, [3], "keyframes"),
    ("every video stream", False, 0.1, 2.0, [3, 1], None),
    ("file: media time", False, 0.1, 5.0, [1], "time"),
    ("live: media time does not count", True, 1.0, 5.0, [1], None),
    ("live: the clock", True, 5.0, 5.0, [1], "time"),
    ("sound only", False, 0.1, 5.0, [], "time"),
]


@pytest.mark.parametrize(
    ("live", "wall_s", "media_s", "keyframes", "reason"),
    [c[1:] for c in STOP_CASES],
    ids=[c[0] for c in STOP_CASES],
)
def test_stop_reason(
    live: bool, wall_s: float, media_s: float, keyframes: list[int], reason: str | None
) -> None:
    found = stop_reason(
        live=live, wall_s=wall_s, media_s=media_s, listen_s=5.0, keyframes=keyframes
    )
    assert found == reason


# -- real media --------------------------------------------------------------------------


def make_clip(
    path: Path, *, video: str = "libx264", audio: str | None = None, gop: int = GOP
) -> Path:
    """Three seconds of 160x120 at FPS, a keyframe every ``gop`` frames, and ``audio``
    (silence, mono) when given."""
    options = {
        "libx264": {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"},
        "libx265": {"x265-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:log-level=none"},
    }[video]
    with (
        av.open(str(path), "w") as out,
        av.open("testsrc2=size=160x120:rate=15", format="lavfi") as src,
    ):
        stream = out.add_stream(video, rate=FPS, options=options)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        sound = out.add_stream(audio, rate=8000, layout="mono") if audio else None
        for index, frame in enumerate(src.decode(video=0)):
            if index == 3 * FPS:
                break
            frame.pict_type = av.video.frame.PictureType.NONE  # lavfi marks each one I
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
        if sound is not None:
            fmt = sound.codec_context.format
            samples = sound.codec_context.frame_size or 800
            for index in range(3 * 8000 // samples):
                chunk = av.AudioFrame.from_ndarray(
                    np.zeros((1, samples), dtype=np.float32 if fmt.name == "fltp" else np.int16),
                    format=fmt.name,
                    layout="mono",
                )
                chunk.sample_rate, chunk.pts = 8000, index * samples
                out.mux(sound.encode(chunk))
            out.mux(sound.encode(None))
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    place = tmp_path_factory.mktemp("clips")
    return {
        "h264": make_clip(place / "h264.mp4"),
        "h264+aac": make_clip(place / "h264-aac.mp4", audio="aac"),
        "h265": make_clip(place / "h265.mp4", video="libx265"),
        "h264+mulaw": make_clip(place / "h264-mulaw.mov", audio="pcm_mulaw"),
        "long gop": make_clip(place / "long-gop.mp4", gop=300),
    }


@pytest.mark.parametrize(
    ("clip", "codec", "profile"),
    [("h264", "h264", "High"), ("h265", "hevc", "Main")],
)
def test_a_file_says_its_codec_size_rate_and_keyframe_interval(
    clips: dict[str, Path], clip: str, codec: str, profile: str
) -> None:
    found = probe_source(str(clips[clip]))
    assert (found.kind, found.live, found.stopped, found.audio) == ("file", False, "keyframes", ())
    assert found.duration_s == pytest.approx(3.0)
    (video,) = found.video
    assert (video.codec, video.profile, video.width, video.height) == (codec, profile, 160, 120)
    assert (video.fps, video.fps_measured) == (15.0, False)
    assert (video.keyframe_interval_s, video.keyframe_interval_frames) == (1.0, 15)
    assert video.keyframe_at_least_s is None
    assert video.plan == "copy"  # H.264 and H.265 packets are kept as they are
    assert video.bitrate is not None and 10_000 < video.bitrate < 1_000_000


@pytest.mark.parametrize(
    ("clip", "codec", "rate", "plan"),
    [("h264+aac", "aac", 8000, "copy"), ("h264+mulaw", "pcm_mulaw", 8000, "aac")],
)
def test_sound_is_copied_when_aac_and_encoded_once_otherwise(
    clips: dict[str, Path], clip: str, codec: str, rate: int, plan: str
) -> None:
    found = probe_source(f"file:{clips[clip]}")
    (audio,) = found.audio
    assert (audio.codec, audio.sample_rate, audio.channels, audio.layout) == (
        codec, rate, 1, "mono",
    )  # fmt: skip
    assert audio.plan == plan
    assert found.video[0].plan == "copy"


def test_a_long_gop_says_the_interval_is_longer_than_what_was_heard(
    clips: dict[str, Path],
) -> None:
    found = probe_source(str(clips["long gop"]), listen_s=1.0)
    (video,) = found.video
    assert found.stopped == "time"
    assert video.keyframe_interval_s is None and video.keyframe_interval_frames is None
    assert video.keyframe_at_least_s is not None and video.keyframe_at_least_s >= 0.9


def test_virtual_sources_are_encoded() -> None:
    (video,) = probe_source("lavfi:testsrc2=size=320x240:rate=15").video
    assert (video.width, video.height, video.fps) == (320, 240, 15.0)
    assert (video.keyframe_interval_frames, video.plan) == (1, "h264")  # raw: each a keyframe
    tone = probe_source("lavfi:sine=frequency=440:sample_rate=16000", listen_s=1.0)
    assert tone.video == ()
    (audio,) = tone.audio
    assert (audio.codec, audio.sample_rate, audio.plan) == ("pcm_s16le", 16000, "aac")
    assert audio.bitrate == pytest.approx(256_000, rel=0.05)


def test_to_json_is_plain_data(clips: dict[str, Path]) -> None:
    found = probe_source(str(clips["h264+aac"]))
    data = found.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["video"][0]["keyframe_interval_frames"] == 15
    assert data["audio"][0]["plan"] == "copy"
    assert isinstance(found, SourceProbe)


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    for spec in (str(tmp_path / "gone.mp4"), f"file:{tmp_path / 'gone.mp4'}"):
        with pytest.raises(DeviceNotFound, match="no such file"):
            probe_source(spec)


def test_a_source_without_sound_or_picture_is_refused(tmp_path: Path) -> None:
    subtitles = tmp_path / "words.srt"
    subtitles.write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n\n")
    with pytest.raises(ValueError, match="neither audio nor video"):
        probe_source(str(subtitles))
    with pytest.raises(ValueError, match="listen_s"):
        probe_source("lavfi:testsrc2", listen_s=0)


# -- refusals: the password never shows ------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


class _Refuses(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="camera"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[int]:
    """An HTTP server that answers every request 401 Unauthorized."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def test_refused_credentials_say_so_without_the_password(refusing_server: int) -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:{refusing_server}/video"
    with pytest.raises(DeviceNotFound) as caught:
        probe_source(url, timeout_s=2.0)
    message = str(caught.value)
    assert "refused the credentials" in message and "401" in message
    assert f"http://admin@127.0.0.1:{refusing_server}/video" in message
    assert SECRET not in message and caught.value.__context__ is None


def test_a_silent_server_times_out_without_the_password(silent_port: int) -> None:
    with pytest.raises(DeviceNotFound) as caught:
        probe_source(f"rtsp://admin:{SECRET}@127.0.0.1:{silent_port}/cam", timeout_s=0.5)
    assert "no answer within 0.5 s" in str(caught.value)
    assert SECRET not in str(caught.value)


# -- the command -------------------------------------------------------------------------


def test_the_command_prints_each_stream_and_its_plan(
    clips: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["devices", "--probe", str(clips["h264+mulaw"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(clips["h264+mulaw"])
    assert lines[1].startswith(
        "  video  h264 (High)  160x120  15 fps  keyframe every 1.00 s (15 frames)  ~"
    )
    assert lines[1].endswith("kbit/s  -> copied as it is")
    assert lines[2] == "  audio  pcm_mulaw  8000 Hz mono  ~64 kbit/s  -> encoded to AAC once"
    assert len(lines) == 3


def test_the_command_prints_json(
    clips: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["devices", "--probe", str(clips["h265"]), "--json", "--listen", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == str(clips["h265"])
    assert [(v["codec"], v["plan"]) for v in data["video"]] == [("hevc", "copy")]
    assert data["audio"] == []


def test_the_command_says_a_long_gop_is_long(
    clips: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["devices", "--probe", str(clips["long gop"]), "--listen", "1"]) == 0
    assert "keyframes more than " in capsys.readouterr().out


def test_a_missing_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["devices", "--probe", str(tmp_path / "gone.mp4")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("mediaflow: ") and err.count("\n") == 1
    assert "gone.mp4" in err and "no such file" in err


def test_an_unreachable_url_exits_2_and_never_shows_the_password(
    capfd: pytest.CaptureFixture[str],
) -> None:
    port = free_port()
    url = f"rtsp://admin:{SECRET}@127.0.0.1:{port}/cam"
    assert cli.main(["devices", "--probe", url, "--timeout", "1", "--transport", "udp"]) == 2
    out, err = capfd.readouterr()  # FFmpeg's own writes to fd 2 included
    assert SECRET not in out + err
    assert f"rtsp://admin@127.0.0.1:{port}/cam" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_probe_options_need_probe(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["devices", "--listen", "2"]) == 2
    assert "--listen goes with --probe" in capsys.readouterr().err
