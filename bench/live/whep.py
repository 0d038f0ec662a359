"""WHEP viewers for the CPU windows: aiortc receiving the camera, counting, not decoding.

Each viewer does what a browser's network side does and stops short of its decoder:
it offers to receive video and sound (``recvonly``, its host candidates gathered
first, as the wall's ``whep.js`` does), POSTs the offer to ``/whep/{flow}/{node}``,
and then aiortc receives every RTP packet, decrypts it (SRTP), reassembles frames
in its jitter buffer and sends its receiver reports, NACKs and PLIs as usual. The
frames it would decode go to :class:`CountingDecoder` instead, which counts them and
their bytes: the server's cost of a viewer is all there, and ten decoders of 720p30
H.264 would take this 2-core machine from the server being measured. A viewer ends
its session with ``DELETE`` on its ``Location``.

Run as ``python -m bench.live.whep --url BASE --viewers N --seconds S`` (``BASE`` is
``http://host:port/whep/{flow}/{node}``); it prints one result line
(:func:`bench._lib.common.emit_result`) with each viewer's counts. Imports aiortc
(the ``webrtc`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from bench._lib.common import emit_result

START_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 10.0
SDP = {"Content-Type": "application/sdp"}


@dataclass
class Counts:
    """Frames handed to the (counting) decoders of one kind, and their bytes."""

    frames: int = 0
    bytes: int = 0


COUNTS: dict[str, Counts] = {"video": Counts(), "audio": Counts()}


class CountingDecoder:
    """Stands in for aiortc's decoders: counts each encoded frame, decodes nothing."""

    def __init__(self, kind: str) -> None:
        self.counts = COUNTS[kind]

    def decode(self, encoded_frame: Any) -> list[Any]:
        self.counts.frames += 1
        self.counts.bytes += len(encoded_frame.data)
        return []


def count_instead_of_decoding() -> None:
    """Make every receiver of this process count instead of decode (module doc).
    aiortc's decoder thread looks ``get_decoder`` up in its module each time."""
    from aiortc import rtcrtpreceiver

    def get_decoder(codec: Any) -> CountingDecoder:
        return CountingDecoder(codec.mimeType.split("/")[0].lower())

    setattr(rtcrtpreceiver, "get_decoder", get_decoder)  # noqa: B010 - a module hook


@dataclass
class ViewerResult:
    connected_s: float | None = None  # from the offer to the connection
    state: str = ""  # the peer connection's, at the end
    errors: list[str] = field(default_factory=list)


async def watch(client: aiohttp.ClientSession, url: str, seconds: float) -> ViewerResult:
    """One viewer of ``url`` for ``seconds`` (module doc); errors go in the result."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    result = ViewerResult()
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    location: str | None = None
    started = time.monotonic()
    try:
        await pc.setLocalDescription(await pc.createOffer())
        async with client.post(url, data=pc.localDescription.sdp, headers=SDP) as resp:
            body = await resp.text()
            if resp.status != 201:
                raise RuntimeError(f"offer answered {resp.status}: {body[:200]}")
            location = resp.headers.get("Location")
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        while pc.connectionState != "connected":
            if pc.connectionState in ("failed", "closed"):
                raise RuntimeError(f"connection {pc.connectionState}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"not connected within {START_TIMEOUT_S:g} s")
            await asyncio.sleep(0.05)
        result.connected_s = time.monotonic() - started
        await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
    except (OSError, RuntimeError, ValueError, aiohttp.ClientError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        result.state = pc.connectionState
        if location is not None:
            end = url.split("/whep/")[0] + location
            try:
                async with client.delete(end) as resp:
                    await resp.read()
            except (OSError, aiohttp.ClientError) as exc:
                result.errors.append(f"DELETE: {type(exc).__name__}: {exc}")
        await pc.close()
    return result


async def watch_many(url: str, viewers: int, seconds: float) -> list[ViewerResult]:
    """``viewers`` viewers at once, staggered by 50 ms."""
    count_instead_of_decoding()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def one(index: int) -> ViewerResult:
        await asyncio.sleep(0.05 * index)
        return await watch(client, url, seconds - 0.05 * index)

    async with aiohttp.ClientSession(timeout=timeout) as client:
        return list(await asyncio.gather(*(one(i) for i in range(viewers))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live.whep", description=__doc__)
    p.add_argument("--url", required=True, help="http://host:port/whep/{flow}/{node}")
    p.add_argument("--viewers", type=int, default=1)
    p.add_argument("--seconds", type=float, required=True)
    args = p.parse_args(argv)
    result: dict[str, Any]
    try:
        viewers = asyncio.run(watch_many(args.url, args.viewers, args.seconds))
        result = {
            "viewers": [asdict(v) for v in viewers],
            "counts": {kind: asdict(c) for kind, c in COUNTS.items()},
        }
    except (OSError, RuntimeError, ImportError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
