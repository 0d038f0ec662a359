"""Reading a live HLS stream as a player does: playlists, blocking reloads, every part.

:func:`parse_playlist` reads a media playlist: mediaflow's parts
(``#EXT-X-PART``, dated by their segment's ``#EXT-X-PROGRAM-DATE-TIME`` plus the
parts before them), or ffmpeg's segments (a ``#EXT-X-PROGRAM-DATE-TIME`` and an
``#EXTINF`` apply to the next URI, in either order). :func:`watch` is one viewer: it
starts at the newest part that begins with a keyframe (as the wall does), fetches the
init segment and then every part in order, asking for the next with ``?after=SEQ``;
each reload that had to wait for its part gives the *listing lag*: when the answer
came minus the capture time of the part's end (its capture time plus its duration).
A viewer may record what it read (the init segment, then each part, in one file,
with each part's times in a JSON sidecar) for :mod:`bench.live.sync`.

Run as ``python -m bench.live.hls --url BASE --viewers N --seconds S [--record FILE]``
(``BASE`` is ``http://host:port/live/{flow}/{node}``), it watches with N viewers at
once and prints one result line (:func:`bench._lib.common.emit_result`): the benchmark
runs its viewers in a process of their own so that their CPU is not the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench._lib.common import emit_result
from bench._lib.hls import parse_pdt

PART_TAG = "#EXT-X-PART:"
RETRY_S = 0.25
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ListedPart:
    """One part as a playlist lists it; ``pdt`` is epoch seconds (None: not given)."""

    uri: str
    seq: int
    pdt: float | None
    duration: float
    independent: bool

    @property
    def end(self) -> float | None:
        """The capture time of the part's end, by the playlist."""
        return None if self.pdt is None else self.pdt + self.duration


@dataclass(frozen=True)
class Playlist:
    init: str | None
    parts: list[ListedPart]


def _sequence_number(uri: str) -> int | None:
    numbers = re.findall(r"\d+", uri.rsplit("/", 1)[-1].split(".")[0])
    return int(numbers[-1]) if numbers else None


def parse_playlist(text: str) -> Playlist:
    """The parts of a media playlist, in order: its ``#EXT-X-PART`` lines if it has any,
    else its segments. A part's sequence number is the last run of digits in its URI's
    file name before the extension. Pure."""
    by_parts = PART_TAG in text
    init: str | None = None
    pdt: float | None = None
    duration = 0.0
    parts: list[ListedPart] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#EXT-X-MAP:"):
            init = _uri(line)
        elif line.startswith("#EXT-X-PROGRAM-DATE-TIME:"):
            pdt = parse_pdt(line.partition(":")[2])
        elif by_parts:
            part = _listed_part(line, pdt)
            if part is not None:
                parts.append(part)
                pdt = None if pdt is None else pdt + part.duration
        elif line.startswith("#EXTINF:"):
            duration = float(line.partition(":")[2].split(",")[0])
        elif line and not line.startswith("#"):
            seq = _sequence_number(line)
            if seq is not None:
                parts.append(ListedPart(line, seq, pdt, duration, False))
            pdt, duration = None, 0.0
    return Playlist(init, parts)


def _uri(line: str) -> str | None:
    found = re.search(r'URI="([^"]+)"', line)
    return found.group(1) if found else None


def _listed_part(line: str, pdt: float | None) -> ListedPart | None:
    """An ``#EXT-X-PART`` line as a part starting at ``pdt``; None for any other."""
    if not line.startswith(PART_TAG):
        return None
    uri = _uri(line)
    found = re.search(r"DURATION=([\d.]+)", line)
    seq = None if uri is None else _sequence_number(uri)
    if uri is None or seq is None or found is None:
        return None
    return ListedPart(uri, seq, pdt, float(found.group(1)), "INDEPENDENT=YES" in line)


def newest_start(playlist: Playlist) -> int | None:
    """The newest part a player can start at (a keyframe part; any part if the playlist
    does not mark them), or None for an empty playlist."""
    starts = [part.seq for part in playlist.parts if part.independent]
    if starts:
        return starts[-1]
    return playlist.parts[0].seq if playlist.parts else None


def fragment_times(data: bytes) -> dict[int, int]:
    """``{track_ID: baseMediaDecodeTime}`` of each ``traf`` in a ``moof`` + ``mdat``
    (ISO/IEC 14496-12 §8.8.12: ``tfdt`` version 1 is 64-bit). Pure; raises
    ``ValueError`` on a part without a ``moof``."""
    times: dict[int, int] = {}
    for kind, start, end in _boxes(data, 0, len(data)):
        if kind != b"moof":
            continue
        for traf_kind, traf_start, traf_end in _boxes(data, start + 8, end):
            if traf_kind != b"traf":
                continue
            track = decode_time = None
            for box, at, _ in _boxes(data, traf_start + 8, traf_end):
                if box == b"tfhd":
                    (track,) = struct.unpack_from(">I", data, at + 12)
                elif box == b"tfdt":
                    fmt = ">Q" if data[at + 8] == 1 else ">I"
                    (decode_time,) = struct.unpack_from(fmt, data, at + 12)
            if track is not None and decode_time is not None:
                times[track] = decode_time
        return times
    raise ValueError("no moof in this part")


def _boxes(data: bytes, start: int, end: int) -> list[tuple[bytes, int, int]]:
    found = []
    while start + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, start)
        if size < 8:
            break
        found.append((kind, start, start + size))
        start += size
    return found


@dataclass
class ViewerStats:
    """What one viewer saw; ``lags`` are listing lags in seconds (module doc)."""

    parts: int = 0
    bytes: int = 0
    holes: int = 0  # parts that left the window before this viewer fetched them
    reloads: int = 0
    lags: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RecordedPart:
    """A part in a recording: where it starts in the file and its times."""

    seq: int
    offset: int
    pdt: float | None
    duration: float
    decode_times: dict[int, int]  # track_ID -> tfdt


class Recording:
    """The init segment, then every part read, in one file; ``parts`` describe them.
    ``started`` is the wall clock before the viewer's first request: a feed with
    sound encodes it only from when it is read, so parts captured before then (a
    player starts up to a GOP back) carry silence."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.time()
        self.parts: list[RecordedPart] = []
        self._out = path.open("wb")
        self._written = 0

    def add(self, data: bytes, part: ListedPart | None = None) -> None:
        if part is not None:
            times = fragment_times(data)
            self.parts.append(RecordedPart(part.seq, self._written, part.pdt, part.duration, times))
        self._out.write(data)
        self._written += len(data)

    def close(self) -> None:
        self._out.close()
        sidecar = {"started": self.started, "parts": [asdict(part) for part in self.parts]}
        self.path.with_suffix(".json").write_text(json.dumps(sidecar))


def read_sidecar(path: Path) -> tuple[float, list[RecordedPart]]:
    """(``started``, the parts) of a recording at ``path`` (its ``.json`` sidecar)."""
    body = json.loads(path.with_suffix(".json").read_text())
    return body["started"], [
        RecordedPart(
            p["seq"],
            p["offset"],
            p["pdt"],
            p["duration"],
            {int(k): int(v) for k, v in p["decode_times"].items()},
        )
        for p in body["parts"]
    ]


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with session.get(url) as resp:
        return resp.status, await resp.read()


async def _first_playlist(session: aiohttp.ClientSession, url: str) -> Playlist:
    """The playlist once a player could start (503 until then). Raises ``TimeoutError``."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        status, body = await _get(session, url)
        if status == 200:
            listed = parse_playlist(body.decode())
            if listed.parts and listed.init:
                return listed
        await asyncio.sleep(RETRY_S)
    raise TimeoutError(f"no playable live playlist at {url} within {START_TIMEOUT_S:.0f} s")


async def watch(
    session: aiohttp.ClientSession, base: str, seconds: float, record: Recording | None = None
) -> ViewerStats:
    """One viewer of ``{base}.m3u8`` for ``seconds`` (module doc). HTTP errors are
    counted in the stats; a stream that never starts raises ``TimeoutError``, a failed
    init segment ``RuntimeError``, a connection that fails ``aiohttp.ClientError``."""
    stats = ViewerStats()
    folder = base.rsplit("/", 1)[0] + "/"
    deadline = time.monotonic() + seconds
    listed = await _first_playlist(session, f"{base}.m3u8")
    assert listed.init is not None
    status, init = await _get(session, folder + listed.init)
    if status != 200:
        raise RuntimeError(f"init segment: HTTP {status}")
    if record is not None:
        record.add(init)
    next_seq = newest_start(listed) or 0
    while time.monotonic() < deadline:
        for part in listed.parts:
            if part.seq < next_seq:
                continue
            status, data = await _get(session, folder + part.uri)
            if status != 200:
                stats.errors.append(f"part {part.seq}: HTTP {status}")
                continue
            stats.holes += part.seq - next_seq
            stats.parts += 1
            stats.bytes += len(data)
            if record is not None:
                record.add(data, part)
            next_seq = part.seq + 1
        asked = time.time()
        status, body = await _get(session, f"{base}.m3u8?after={next_seq - 1}")
        answered = time.time()
        stats.reloads += 1
        if status != 200:
            stats.errors.append(f"reload: HTTP {status}")
            await asyncio.sleep(RETRY_S)
            continue
        listed = parse_playlist(body.decode())
        newest = listed.parts[-1] if listed.parts else None
        # A part that could not have been listed when asked: the answer waited for it.
        if newest is not None and newest.seq >= next_seq and newest.end is not None:
            stats.lags += [answered - newest.end] if asked < newest.end else []
    return stats


async def watch_many(
    base: str, viewers: int, seconds: float, record: Path | None = None
) -> list[ViewerStats]:
    """``viewers`` viewers at once (the first records, if asked), staggered by 50 ms."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    recording = Recording(record) if record is not None else None

    async def one(index: int) -> ViewerStats:
        await asyncio.sleep(0.05 * index)
        own = recording if index == 0 else None
        return await watch(session, base, seconds - 0.05 * index, own)

    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            return list(await asyncio.gather(*(one(i) for i in range(viewers))))
    finally:
        if recording is not None:
            recording.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live.hls", description=__doc__)
    p.add_argument("--url", required=True, help="http://host:port/live/{flow}/{node}")
    p.add_argument("--viewers", type=int, default=1)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--record", type=Path, help="the first viewer records here")
    args = p.parse_args(argv)
    result: dict[str, Any]
    try:
        stats = asyncio.run(watch_many(args.url, args.viewers, args.seconds, args.record))
        result = {"viewers": [asdict(s) for s in stats]}
    except (OSError, TimeoutError, RuntimeError, aiohttp.ClientError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
