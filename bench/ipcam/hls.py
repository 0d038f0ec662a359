"""A low-latency HLS client for the IP camera bench: every camera followed part by part.

:func:`parse_parts` reads mediaflow's media playlist (pure): each ``#EXT-X-PART`` with
its media sequence number (``#EXT-X-MEDIA-SEQUENCE`` counts the segments, one per
``#EXT-X-PROGRAM-DATE-TIME``), its index in its segment and its capture time (the
segment's ``PROGRAM-DATE-TIME`` plus the parts before it).

:func:`follow` is one player of one camera, as an LL-HLS player follows the live edge
(RFC 8216bis 6.2.5.2): it joins after the newest part listed, then asks for the next
part with a blocking reload, ``?_HLS_msn=M&_HLS_part=N`` (the part after the last it
has; mediaflow also answers once the next segment has begun when N was past the end
of segment M), fetches each new part as soon as the answer lists it, and notes for
each part its **latency**: when the part finished downloading minus the capture time
of its last frame (the part's capture time + its duration - one frame). That is what a
player could show at the earliest, minus when the camera saw it; the capture clock is
the camera's own timestamps placed on this machine's wall clock by mediaflow
(:class:`devices.packet_input.CaptureClock`), so the RTSP hop on loopback is not in it.

Run as ``python -m bench.ipcam.hls --base http://host:port/live/FLOW --nodes
cam0,cam1 --seconds S --frame-s 0.0333`` it follows every node at once, in this
process (the bench runs it apart from the server it measures), and prints one result
line (:func:`bench._lib.common.emit_result`): ``{"cameras": {node: stats}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from bench._lib.common import emit_result
from bench._lib.hls import parse_pdt

START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
RETRY_S = 0.25


@dataclass(frozen=True)
class Part:
    """One ``#EXT-X-PART`` as listed: ``capture_s`` is its first frame's capture time
    (epoch seconds; None if its segment has no ``PROGRAM-DATE-TIME``)."""

    uri: str
    seq: int  # the last number in its URI's file name: mediaflow numbers parts in one run
    msn: int  # media sequence number of its segment
    index: int  # its place in that segment, from 0
    capture_s: float | None
    duration: float
    independent: bool

    def last_frame_s(self, frame_s: float) -> float | None:
        """The capture time of its last frame (``frame_s``: one frame's duration)."""
        return None if self.capture_s is None else self.capture_s + self.duration - frame_s


def parse_parts(text: str) -> tuple[str | None, list[Part]]:
    """(the init segment's URI, the parts in order) of a media playlist. Pure; lines
    it does not know are ignored, a part whose URI holds no number is left out."""
    init: str | None = None
    msn, index = 0, 0
    segment_open = False
    capture: float | None = None
    parts: list[Part] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#EXT-X-MEDIA-SEQUENCE:"):
            msn = int(line.partition(":")[2])
        elif line.startswith("#EXT-X-MAP:"):
            init = _attribute(line, "URI")
        elif line.startswith("#EXT-X-PROGRAM-DATE-TIME:"):
            if segment_open:  # a new segment begins
                msn, index = msn + 1, 0
            capture = parse_pdt(line.partition(":")[2])
            segment_open = True
        elif line.startswith("#EXT-X-PART:"):
            uri, duration = _attribute(line, "URI"), _attribute(line, "DURATION")
            numbers = re.findall(r"\d+", (uri or "").rsplit("/", 1)[-1].split(".")[0])
            if uri is None or duration is None or not numbers:
                continue
            seconds = float(duration)
            independent = "INDEPENDENT=YES" in line
            parts.append(Part(uri, int(numbers[-1]), msn, index, capture, seconds, independent))
            capture = None if capture is None else capture + seconds
            index += 1
    return init, parts


def _attribute(line: str, name: str) -> str | None:
    found = re.search(rf'{name}=("([^"]*)"|[^,]*)', line)
    if found is None:
        return None
    return found.group(2) if found.group(2) is not None else found.group(1)


@dataclass
class FollowStats:
    """What one player saw; ``latencies`` in seconds, one per part fetched."""

    parts: int = 0
    bytes: int = 0
    holes: int = 0  # parts listed before this player could fetch them (gaps in seq)
    reloads: int = 0
    empty_reloads: int = 0  # a blocking reload that answered with nothing new
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with session.get(url) as resp:
        return resp.status, await resp.read()


async def _joined(session: aiohttp.ClientSession, url: str) -> tuple[str, list[Part]]:
    """The first playlist with an init segment and a part. Raises ``TimeoutError``."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        status, body = await _get(session, url)
        if status == 200:
            init, parts = parse_parts(body.decode())
            if init and parts:
                return init, parts
        await asyncio.sleep(RETRY_S)
    raise TimeoutError(f"no live playlist at {url} within {START_TIMEOUT_S:.0f} s")


async def follow(
    session: aiohttp.ClientSession, base: str, seconds: float, frame_s: float
) -> FollowStats:
    """Follow ``{base}.m3u8`` for ``seconds`` (module doc). HTTP errors are counted in
    the stats; a stream that never starts raises ``TimeoutError``, a failed connection
    ``aiohttp.ClientError``."""
    stats = FollowStats()
    folder = base.rsplit("/", 1)[0] + "/"
    init_uri, listed = await _joined(session, f"{base}.m3u8")
    status, _ = await _get(session, folder + init_uri)
    if status != 200:
        stats.errors.append(f"init segment: HTTP {status}")
    last = listed[-1]
    next_seq = last.seq + 1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        query = f"?_HLS_msn={last.msn}&_HLS_part={last.index + 1}"
        status, body = await _get(session, f"{base}.m3u8{query}")
        stats.reloads += 1
        if status != 200:
            stats.errors.append(f"reload: HTTP {status}")
            await asyncio.sleep(RETRY_S)
            continue
        fresh = [part for part in parse_parts(body.decode())[1] if part.seq >= next_seq]
        stats.empty_reloads += not fresh
        for part in fresh:
            status, data = await _get(session, folder + part.uri)
            done = time.time()
            if status != 200:
                stats.errors.append(f"part {part.seq}: HTTP {status}")
                continue
            stats.holes += part.seq - next_seq
            stats.parts += 1
            stats.bytes += len(data)
            captured = part.last_frame_s(frame_s)
            if captured is not None:
                stats.latencies.append(done - captured)
            next_seq = part.seq + 1
        last = fresh[-1] if fresh else last
    return stats


async def follow_all(
    base: str, nodes: list[str], seconds: float, frame_s: float
) -> dict[str, FollowStats | str]:
    """One player per node at once; a player that failed is its error's text."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        done = await asyncio.gather(
            *(follow(session, f"{base}/{node}", seconds, frame_s) for node in nodes),
            return_exceptions=True,
        )
    out: dict[str, FollowStats | str] = {}
    for node, result in zip(nodes, done, strict=True):
        if isinstance(result, FollowStats):
            out[node] = result
        elif isinstance(result, (OSError, TimeoutError, aiohttp.ClientError)):
            out[node] = f"{type(result).__name__}: {result}"
        else:
            raise result
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ipcam.hls", description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port/live/{flow}")
    p.add_argument("--nodes", required=True, help="camera node ids, comma-separated")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--frame-s", type=float, default=1 / 30, help="one frame's duration")
    args = p.parse_args(argv)
    nodes = [node for node in args.nodes.split(",") if node]
    followed = asyncio.run(follow_all(args.base, nodes, args.seconds, args.frame_s))
    body: dict[str, Any] = {
        node: asdict(stats) if isinstance(stats, FollowStats) else {"error": stats}
        for node, stats in followed.items()
    }
    emit_result({"cameras": body})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
