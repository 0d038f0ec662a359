"""The WebRTC peer: what ten viewers cost GStreamer's ``webrtcbin``, a sender written in C.

The floor (:mod:`bench.live.floor`) says what no sender can go under; this says what
a native WebRTC stack pays for the same viewers on the same machine in the same run.
It encodes the camera's and the microphone's graphs once, with the live camera's
x264 settings and Opus at 48 kHz (:func:`make_peer_clip`, ffmpeg, before anything
is measured), and plays the file in real time through :mod:`bench.live.gst_send`
(Debian's ``/usr/bin/python3`` with PyGObject). Then:

1. its CPU with no viewer for ``seconds``;
2. ``viewers`` aiortc viewers, in this process, as :mod:`bench.live.whep`'s: each
   answers a ``webrtcbin``'s offer (``recvonly``), receives, decrypts and counts
   frames without decoding them; after ``settle_s``, its CPU for ``seconds``.

Its viewers' cost (2. less 1.) is a C sender's price of what mediaflow's viewers are
measured for, beside the flow (whose no-viewer CPU is the ratio's base in
:mod:`bench.live.judge`).

Run as ``python -m bench.live.gst_peer --viewers N --seconds S --settle S --workdir
DIR``; it prints one result line (:func:`bench._lib.common.emit_result`): the two
windows' cores, what the viewers received, and the errors met. Needs ffmpeg and the
Debian packages ``python3-gi gir1.2-gst-plugins-bad-1.0 gstreamer1.0-nice
gstreamer1.0-plugins-good gstreamer1.0-plugins-bad``, and aiortc (the ``webrtc``
extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench._lib.common import emit_result
from bench._lib.sample import tree_cpu
from bench.live.cpu import camera_x264
from bench.live.flow import LiveFlow
from bench.live.whep import COUNTS, START_TIMEOUT_S, count_instead_of_decoding

SYSTEM_PYTHON = "/usr/bin/python3"
SENDER = Path(__file__).with_name("gst_send.py")
OPUS_BITS = 32000  # mediaflow's Opus for WebRTC (mediaflow/live/opus.py)
ECDSA_AND_RSA = (
    b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES128-SHA:"
    b"ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-SHA"
)


def make_peer_clip(path: Path, flow: LiveFlow, seconds: float) -> Path:
    """``seconds`` of the camera's and microphone's graphs as H.264 (the live camera's
    x264 settings) and Opus (48 kHz mono, 20 ms packets) in Matroska, with ffmpeg
    (blocks). Raises ``FileNotFoundError`` without ffmpeg and
    ``subprocess.CalledProcessError`` if it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
        "-t", f"{seconds:g}", "-f", "lavfi", "-i", flow.camera_graph(),
        "-t", f"{seconds:g}", "-f", "lavfi", "-i", flow.microphone_graph(),
        "-map", "0:v", "-map", "1:a", *camera_x264(flow),
        "-c:a", "libopus", "-b:a", str(OPUS_BITS), "-ar", "48000", "-ac", "1",
        "-frame_duration", "20", "-y", str(path),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=seconds * 10 + 60)
    return path


def accept_rsa_servers() -> None:
    """Let this process's aiortc viewers take an RSA certificate from the DTLS server:
    ``webrtcbin`` makes one (GStreamer 1.22 has no other), and aiortc's client offers
    only ECDSA cipher suites. Its own certificate stays ECDSA; SRTP is negotiated apart
    (GStreamer 1.22 offers AES-CM with HMAC-SHA1, mediaflow's aiortc AES-GCM first)."""
    from aiortc.rtcdtlstransport import RTCCertificate

    make = RTCCertificate._create_ssl_context

    def with_rsa(self: Any, *args: Any, **kwargs: Any) -> Any:
        context = make(self, *args, **kwargs)
        context.set_cipher_list(ECDSA_AND_RSA)
        return context

    setattr(RTCCertificate, "_create_ssl_context", with_rsa)  # noqa: B010 - a bench hook


class Sender:
    """:mod:`bench.live.gst_send` as a child process, and its JSON lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ready = asyncio.get_running_loop().create_future()
        self.offers: dict[str, asyncio.Future[str]] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, clip: Path) -> Sender:
        proc = await asyncio.create_subprocess_exec(
            SYSTEM_PYTHON, str(SENDER), str(clip),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if message.get("ready") and not self.ready.done():
                self.ready.set_result(None)
            elif "offer" in message:
                self.offers.setdefault(message["offer"], asyncio.Future()).set_result(
                    message["sdp"]
                )
        error = b""
        if self.proc.stderr is not None:
            error = await self.proc.stderr.read()
        reason = error.decode(errors="replace").strip()[-300:] or "it exited"
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"the GStreamer sender: {reason}"))
        for offer in self.offers.values():
            if not offer.done():
                offer.set_exception(RuntimeError(f"the GStreamer sender: {reason}"))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    async def offer(self, viewer_id: str) -> str:
        self.send({"add": viewer_id})
        return await self.offers.setdefault(viewer_id, asyncio.Future())

    async def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.reader.cancel()


async def connect(sender: Sender, viewer_id: str) -> Any:
    """One aiortc viewer answering the sender's offer; connected, or raises
    ``RuntimeError``."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    offer = await asyncio.wait_for(sender.offer(viewer_id), START_TIMEOUT_S)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
    await pc.setLocalDescription(await pc.createAnswer())
    sender.send({"answer": viewer_id, "sdp": pc.localDescription.sdp})
    started = time.monotonic()
    while pc.connectionState != "connected":
        if pc.connectionState in ("failed", "closed"):
            await pc.close()
            raise RuntimeError(f"viewer {viewer_id}: connection {pc.connectionState}")
        if time.monotonic() - started > START_TIMEOUT_S:
            await pc.close()
            raise RuntimeError(f"viewer {viewer_id}: not connected in {START_TIMEOUT_S:g} s")
        await asyncio.sleep(0.05)
    return pc


async def window(pid: int, seconds: float) -> float:
    """The cores ``pid``'s tree used over the next ``seconds``."""
    start, cpu = time.monotonic(), tree_cpu(pid)
    await asyncio.sleep(seconds)
    return (tree_cpu(pid) - cpu) / (time.monotonic() - start)


async def measure(clip: Path, viewers: int, seconds: float, settle_s: float) -> dict[str, Any]:
    """The peer's two windows (module doc)."""
    count_instead_of_decoding()
    accept_rsa_servers()
    sender = await Sender.start(clip)
    result: dict[str, Any] = {"viewers": viewers}
    peers: list[Any] = []
    try:
        await asyncio.wait_for(sender.ready, 30)
        await asyncio.sleep(settle_s)
        result["idle_cores"] = await window(sender.proc.pid, seconds)
        for index in range(viewers):
            peers.append(await connect(sender, f"v{index}"))
        await asyncio.sleep(settle_s)
        result["viewers_cores"] = await window(sender.proc.pid, seconds)
        result["counts"] = {kind: asdict(c) for kind, c in COUNTS.items()}
    finally:
        for pc in peers:
            await pc.close()
        await sender.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live.gst_peer", description=__doc__)
    p.add_argument("--viewers", type=int, default=10)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--workdir", type=Path, required=True)
    args = p.parse_args(argv)
    result: dict[str, Any]
    try:
        length = 2 * (args.seconds + args.settle) + 10  # and the viewers' connecting
        clip = make_peer_clip(args.workdir / "peer.mkv", LiveFlow(), length)
        result = asyncio.run(measure(clip, args.viewers, args.seconds, args.settle))
    except (OSError, RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
