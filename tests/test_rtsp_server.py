"""GStreamer's RTSP server as a stand-in camera (tests/rtsp_server.py): PyAV reads each
kind of mount over TCP and UDP, a mount with credentials refuses a client without them,
and a killed, restarted or stalled server looks to PyAV like such a camera.

What PyAV raises, as seen here (PyAV 17, FFmpeg's RTSP demuxer):

- no or wrong credentials: ``av.error.HTTPUnauthorizedError`` at ``av.open``, "Server
  returned 401 Unauthorized (authorization failed)", at once (no timeout involved);
- a stalled server (SIGSTOP): ``av.error.ExitError`` "Immediate exit requested" once a
  read has waited the read timeout (FFmpeg's interrupt callback), after the packets
  already buffered; an ``av.open`` meanwhile fails with ``av.error.InvalidDataError``
  once the open timeout has passed;
- a killed server (SIGKILL), over TCP and UDP alike (FFmpeg watches the RTSP
  connection in both): no error; the demuxer ends at once as at the end of the stream.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import av
import av.error
import psutil
import pytest

from tests.rtsp_server import (
    Mount,
    RtspServer,
    RtspServerFactory,
    RtspStartError,
    launch,
    rtsp_media,
)

OPEN_TIMEOUT_S = 5.0


def open_rtsp(url: str, transport: str = "tcp", *, read_timeout_s: float = 5.0) -> Any:
    """``av.open`` as the project's camera input does (``rtsp_transport``, a timeout),
    without FFmpeg's frame-rate probe (``fpsprobesize=0``), which makes every open
    take 1.9 s at 15 fps: the server is under test here, not the probe."""
    options = {"rtsp_transport": transport, "fpsprobesize": "0"}
    return av.open(url, options=options, timeout=(OPEN_TIMEOUT_S, read_timeout_s))


def read_to_keyframe(container: Any, limit: int = 300) -> list[tuple[str, bool]]:
    """(stream type, keyframe flag) of the packets from the start up to and including
    the first video keyframe. Over RTSP the first video packet may have no pts; only
    its keyframe flag counts here. (No packets are returned: PyAV segfaults when a
    packet's ``stream`` is read after its container is closed.)"""
    seen: list[tuple[str, bool]] = []
    for packet in container.demux():
        if packet.size == 0:  # a demuxer's flush packet
            continue
        seen.append((packet.stream.type, packet.is_keyframe))
        if seen[-1] == ("video", True):
            return seen
        if len(seen) == limit:
            break
    raise AssertionError(f"no video keyframe in the first {len(seen)} packets")


def gone(pid: int) -> bool:
    """Exited and reaped (ids are not reused this fast)."""
    return not psutil.pid_exists(pid)


# -- each kind of camera -------------------------------------------------------------


@pytest.mark.parametrize(
    ("video", "audio", "transport", "codecs", "audio_rate"),
    [
        ("h264", "aac", "tcp", ["h264", "aac"], 48_000),
        ("h264", "aac", "udp", ["h264", "aac"], 48_000),
        ("h264", "pcmu", "udp", ["h264", "pcm_mulaw"], 8_000),
        ("h265", "aac", "tcp", ["hevc", "aac"], 48_000),
        ("h265", None, "udp", ["hevc"], None),
    ],
)
def test_pyav_reads_each_kind_of_mount(
    rtsp_server: RtspServerFactory,
    video: Any,
    audio: Any,
    transport: str,
    codecs: list[str],
    audio_rate: int | None,
) -> None:
    server = rtsp_server(Mount(media=rtsp_media(video), video=video, audio=audio))

    with open_rtsp(server.url(), transport) as container:
        assert [stream.codec_context.name for stream in container.streams] == codecs
        picture = container.streams.video[0].codec_context
        assert (picture.width, picture.height) == (320, 240)
        if audio_rate is not None:
            sound = container.streams.audio[0].codec_context
            assert (sound.sample_rate, sound.channels) == (audio_rate, 1)
        seen = read_to_keyframe(container)

    assert seen[-1] == ("video", True)


def test_credentials_are_required_where_set(rtsp_server: RtspServerFactory) -> None:
    user, password = "cam user", "p@ss:w/rd"  # percent-encoded in the URL
    media = rtsp_media("h264")
    server = rtsp_server(
        Mount(path="/secure", media=media, user=user, password=password),
        Mount(path="/open", media=media, audio=None),
    )

    for refused in (server.url("/secure"), server.url("/secure", user=user, password="wrong")):
        with pytest.raises(av.error.HTTPUnauthorizedError, match="401 Unauthorized"):
            open_rtsp(refused)
    with open_rtsp(server.url("/secure", user=user, password=password)) as container:
        assert [stream.codec_context.name for stream in container.streams] == ["h264", "aac"]
        read_to_keyframe(container)
    with open_rtsp(server.url("/open"), "udp") as container:  # other mounts stay open
        assert [stream.codec_context.name for stream in container.streams] == ["h264"]


def test_a_file_path_with_quotes_and_spaces(rtsp_server: RtspServerFactory, tmp_path: Path) -> None:
    odd = tmp_path / 'a "camera" dir' / "it's here.mp4"
    odd.parent.mkdir()
    shutil.copyfile(rtsp_media("h264"), odd)
    server = rtsp_server(Mount(media=odd))

    with open_rtsp(server.url()) as container:
        read_to_keyframe(container)


# -- failures a camera has ---------------------------------------------------------------


def test_restart_after_kill_serves_again_on_the_same_port(
    rtsp_server: RtspServerFactory,
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264")))
    port, pid = server.port, server.pid
    assert pid is not None
    with open_rtsp(server.url()) as container:
        read_to_keyframe(container)
        server.kill()  # the camera loses power mid-stream
        assert gone(pid) and not server.running
        # The client sees the RTSP connection close: the packets it holds, then the end.
        assert sum(1 for _ in container.demux()) < 500

    smaller = rtsp_media("h264", size=(160, 120), seconds=10.0)
    server.restart([Mount(media=smaller)])  # binds the port again at once

    assert server.port == port and server.running
    with open_rtsp(server.url()) as container:
        assert container.streams.video[0].codec_context.width == 160
        read_to_keyframe(container)


def test_pause_stalls_reads_until_resume(rtsp_server: RtspServerFactory) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264")))
    with open_rtsp(server.url(), read_timeout_s=1.0) as container:
        read_to_keyframe(container)
        server.pause()  # the camera hangs with its connections open
        assert server.paused and server.running
        started = time.monotonic()
        with pytest.raises(av.error.ExitError, match="Immediate exit requested"):
            for _ in container.demux():  # what FFmpeg buffered, then the read timeout
                pass
        assert time.monotonic() - started < 10.0

    server.resume()

    with open_rtsp(server.url()) as container:
        read_to_keyframe(container)


def test_stop_ends_a_paused_server_cleanly(rtsp_server: RtspServerFactory) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264")))
    pid = server.pid
    assert pid is not None
    server.pause()
    started = time.monotonic()

    server.stop(timeout_s=3.0)  # continued, so SIGTERM ends it: no SIGKILL needed

    assert time.monotonic() - started < 3.0
    assert gone(pid) and not server.running and server.pid is None
    server.stop()  # stopping a stopped server does nothing


def test_a_taken_port_fails_the_start_with_the_servers_stderr(
    rtsp_server: RtspServerFactory,
) -> None:
    mount = Mount(media=rtsp_media("h264"))
    server = rtsp_server(mount)

    with pytest.raises(RtspStartError, match="Address already in use"):
        launch([mount], port=server.port)


# -- pure parts ------------------------------------------------------------------------


def test_url_percent_encodes_credentials() -> None:
    server = RtspServer([Mount(media=Path("/m.mp4"))], port=8554)

    assert server.url() == "rtsp://127.0.0.1:8554/cam"
    assert server.url("/b", user="a b", password="p@ss:w/rd") == (
        "rtsp://a%20b:p%40ss%3Aw%2Frd@127.0.0.1:8554/b"
    )
    with pytest.raises(ValueError, match="needs a user"):
        server.url(password="x")


@pytest.mark.parametrize(
    ("video", "audio", "pieces"),
    [
        ("h264", "aac", ["h264parse config-interval=-1 ! rtph264pay name=pay0", "rtpmp4gpay"]),
        ("h265", "pcmu", ["h265parse config-interval=-1 ! rtph265pay name=pay0", "mulawenc"]),
        ("h264", None, ["rtph264pay name=pay0"]),
    ],
)
def test_launch_lines(video: Any, audio: Any, pieces: list[str]) -> None:
    line = Mount(media=Path('/tmp/a "b".mp4'), video=video, audio=audio).launch_line()

    assert line.startswith('( filesrc location="/tmp/a \\"b\\".mp4" ! qtdemux name=d ')
    assert line.endswith(" )")
    assert all(piece in line for piece in pieces)
    assert ("pay1" in line) == (audio is not None)


def test_mounts_are_checked() -> None:
    media = Path("/m.mp4")
    with pytest.raises(ValueError, match="both a user and a password"):
        Mount(media=media, user="only")
    with pytest.raises(ValueError, match="start with '/'"):
        Mount(path="cam", media=media)
    with pytest.raises(ValueError, match="share a path"):
        RtspServer([Mount(media=media), Mount(media=media)])
