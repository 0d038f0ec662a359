"""A url stream whose server accepts and then says nothing: the open, or a read, gives
up after ``timeout_s`` (video and sound alike) instead of hanging a thread."""

from __future__ import annotations

import io
import math
import socket
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import av
import pytest

from connectors import UrlConnector
from connectors._video_request import VideoRequest
from connectors.url import StreamAudioRequest
from devices import NETWORK_TIMEOUT_S, AudioInput, DeviceNotFound, url_options, url_timeout
from devices.video_spec import parse_video_spec

# A regression hangs inside FFmpeg's C code, where pytest-timeout's default SIGALRM
# never gets a say; the thread method dumps the stacks and ends the run instead.
pytestmark = pytest.mark.timeout(30, method="thread")

TIMEOUT_S = 0.5
# An open is two steps (open the input, probe its streams), each allowed TIMEOUT_S;
# the rest is slack for a loaded machine.
GIVES_UP_WITHIN_S = 5.0
POLL_S = 0.05  # how often the server's accept loop checks that it should stop


class StallingServer:
    """A loopback TCP server that reads each request, sends ``reply`` (by default
    nothing), then holds the connection open and never sends another byte."""

    def __init__(self, reply: bytes = b"") -> None:
        self.reply = reply
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stalling server")
        self._thread.start()

    def url(self, scheme: str = "http", path: str = "/stream") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            self._held.append(conn)
            self.accepted += 1
            if self.reply:
                conn.recv(65536)  # the request, whatever it asks for
                conn.sendall(self.reply)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def silent_server() -> Iterator[StallingServer]:
    server = StallingServer()
    try:
        yield server
    finally:
        server.close()


def wav_then_stall(seconds: float, rate: int = 16000) -> bytes:
    """An HTTP answer promising a minute of silence and carrying only ``seconds`` of
    it: enough for FFmpeg to probe the stream without waiting, then nothing."""
    body = io.BytesIO()
    with wave.open(body, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(bytes(2 * rate * 60))
    whole = body.getvalue()
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nContent-Length: {len(whole)}\r\n\r\n"
    ).encode()
    return head + whole[: 44 + int(2 * rate * seconds)]


# -- the open gives up ---------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "rtsp"])
@pytest.mark.parametrize(
    "request_for",
    [
        pytest.param(lambda url: VideoRequest(url, timeout_s=TIMEOUT_S), id="video"),
        pytest.param(lambda url: StreamAudioRequest(url, timeout_s=TIMEOUT_S), id="audio"),
    ],
)
def test_silent_server_fails_the_open_after_timeout_s(
    silent_server: StallingServer, scheme: str, request_for: Any
) -> None:
    request = request_for(silent_server.url(scheme))
    started = time.monotonic()
    with pytest.raises(DeviceNotFound):
        request.open()
    elapsed = time.monotonic() - started
    assert silent_server.accepted >= 1  # it connected and waited: not a refusal
    assert TIMEOUT_S * 0.9 <= elapsed < GIVES_UP_WITHIN_S


@pytest.mark.parametrize("media", ["video", "audio"])
async def test_url_connector_setup_gives_up_on_a_silent_server(
    silent_server: StallingServer, media: str, tmp_path: Path
) -> None:
    connector = UrlConnector(silent_server.url(), media=media, timeout_s=TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(DeviceNotFound):
        await connector.setup(SimpleNamespace(more=SimpleNamespace(flow_dir=tmp_path)))  # type: ignore[arg-type]
    assert time.monotonic() - started < GIVES_UP_WITHIN_S
    assert silent_server.accepted >= 1


# -- a read gives up -----------------------------------------------------------------------


async def test_stream_that_stalls_mid_way_fails_the_read() -> None:
    server = StallingServer(reply=wav_then_stall(seconds=8))
    try:
        source: AudioInput = StreamAudioRequest(
            server.url(path="/radio.wav"), timeout_s=TIMEOUT_S
        ).open()
        chunks = 0
        started = time.monotonic()
        with pytest.raises(av.FFmpegError):
            async with source:
                async for _ in source:
                    chunks += 1
        assert time.monotonic() - started < GIVES_UP_WITHIN_S
        assert chunks > 0  # what arrived was delivered before the stall surfaced
    finally:
        server.close()


# -- the options ---------------------------------------------------------------------------


@pytest.mark.parametrize("timeout_s", [0, -1.0, math.nan])
def test_timeout_s_must_be_positive(timeout_s: float) -> None:
    url = "http://127.0.0.1:9/never-contacted"
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        UrlConnector(url, timeout_s=timeout_s)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        StreamAudioRequest(url, timeout_s=timeout_s).open()
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        VideoRequest(url, timeout_s=timeout_s).open()


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("rtsp://127.0.0.1:8554/cam", {"rtsp_transport": "tcp"}),
        ("rtsps://127.0.0.1:8322/cam", {"rtsp_transport": "tcp"}),
        ("http://127.0.0.1:8080/video.mjpg", {}),
        ("srt://127.0.0.1:9000", {}),
    ],
)
def test_video_and_sound_open_a_url_alike(url: str, options: dict[str, str]) -> None:
    assert url_options(url) == options
    assert url_timeout() == (NETWORK_TIMEOUT_S, NETWORK_TIMEOUT_S) == (10.0, 10.0)
    source = parse_video_spec(url, timeout_s=2.5)
    assert (source.options, source.timeout) == (options, url_timeout(2.5)) == (options, (2.5, 2.5))
    connector = UrlConnector(url, media="both", timeout_s=2.5)
    assert connector.video_request is not None and connector.audio_request is not None
    assert connector.video_request.timeout_s == 2.5
    assert isinstance(connector.audio_request, StreamAudioRequest)
    assert connector.audio_request.timeout_s == 2.5
