"""What a chaos run is judged by, read after the run from what it left behind.

* **The source's word**: the microphone's latest committed value on the queue
  (``WorkQueue.latest``) says how many chunks it emitted in all (its ``seq`` + 1),
  and the flow's dead letters say what was given up on.
* **The consumer's word**: the lines of :class:`bench.chaos.nodes.ChunkLog`, one per
  delivery. Every seq the source emitted must be there (none lost); every delivery
  of one seq must carry the same bytes; a seq seen again must be marked
  (``deliveries > 1`` and ``ctx.redelivery``); first deliveries come in seq order;
  the PCM of the first deliveries, in seq order, must equal the WAV's PCM (the last
  chunk padded with silence), except where a chunk is marked ``discontinuity``.
* **The recorder's word**: every clip it kept (``run_artifact`` rows of kind
  ``recording`` in ``store.sqlite3``) must decode with PyAV from start to end,
  video and audio, and last more than 0 s.

Blocking (file reads, decoding); :func:`source_facts` needs a running Redis for a
Redis queue.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import sqlite3
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av

from mediaflow.queue import open_queue
from mediaflow.store import ArtifactStore

Json = dict[str, Any]


@dataclass(frozen=True)
class Delivery:
    seq: int
    deliveries: int
    redelivery: bool
    pid: int
    at_ns: int
    pts: float
    discontinuity: bool
    digest: str
    pcm: bytes


def read_deliveries(log_dir: Path) -> tuple[list[Delivery], int]:
    """Every whole line of every ``*.log`` in ``log_dir``, in the order they were
    written (one monotonic clock for the machine), and how many torn lines (a
    process killed mid-write) were skipped."""
    out: list[Delivery] = []
    torn = 0
    for path in sorted(log_dir.glob("*.log")):
        for raw in path.read_bytes().split(b"\n"):
            if not raw:
                continue
            parts = raw.decode(errors="replace").split(" ")
            try:
                seq, deliveries, redelivery, pid, at_ns, pts, disc, digest, pcm = parts
                out.append(
                    Delivery(
                        int(seq), int(deliveries), redelivery == "1", int(pid), int(at_ns),
                        float(pts), disc == "1", digest, base64.b64decode(pcm, validate=True),
                    )
                )  # fmt: skip
            except ValueError:
                torn += 1
    out.sort(key=lambda d: d.at_ns)
    return out, torn


@dataclass
class DeliveryReport:
    """The consumer's side (module doc); ``ok`` when nothing is wrong."""

    emitted: int  # chunks the source emitted: its committed latest seq + 1
    expected: int  # chunks the WAV makes
    lines: int
    torn_lines: int
    delivered: int  # distinct seqs the consumer got
    lost: int
    lost_seqs: list[int]
    unknown: int  # seqs beyond what the source says it emitted
    redelivered: int  # lines with deliveries > 1
    repeats: int  # seqs logged more than once
    unmarked_duplicates: int  # a repeat without the mark, or a mark that disagrees
    max_deliveries: int
    out_of_order: int  # first deliveries not in seq order
    differing_bytes: int  # seqs whose deliveries carried different bytes
    discontinuities: int
    bytes_equal: bool
    bytes_compared: int
    first_differing_seq: int | None
    dead_letters: int
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.emitted == self.expected
            and self.unknown == 0
            and self.unmarked_duplicates == 0
            and self.out_of_order == 0
            and self.differing_bytes == 0
            and self.bytes_equal
            and self.dead_letters == 0
        )


def expected_pcm(wav_pcm: bytes, chunk_bytes: int) -> bytes:
    """The WAV's PCM as the microphone chunks it: the last chunk padded with silence."""
    short = -len(wav_pcm) % chunk_bytes
    return wav_pcm + b"\0" * short


def check_deliveries(
    log_dir: Path, wav_pcm: bytes, chunk_bytes: int, emitted: int, dead_letters: int
) -> DeliveryReport:
    """Judge the consumer's log against the WAV and the source's count (module doc)."""
    rows, torn = read_deliveries(log_dir)
    by_seq: dict[int, list[Delivery]] = defaultdict(list)
    for row in rows:
        by_seq[row.seq].append(row)
    lost = sorted(set(range(emitted)) - set(by_seq))
    unknown = sum(1 for seq in by_seq if not 0 <= seq < emitted)
    repeats = [row for seen in by_seq.values() for row in seen[1:]]
    unmarked = [row for row in repeats if not (row.redelivery and row.deliveries > 1)]
    # The mark and the count must agree on every line, first deliveries included.
    unmarked += [row for row in rows if row.redelivery != (row.deliveries > 1)]
    firsts = [seen[0] for seen in by_seq.values()]
    first_order = [row.seq for row in sorted(firsts, key=lambda r: r.at_ns)]
    out_of_order = sum(1 for a, b in itertools.pairwise(first_order) if b < a)
    differing = sum(1 for seen in by_seq.values() if len({r.digest for r in seen}) > 1)
    want = expected_pcm(wav_pcm, chunk_bytes)
    got = b"".join(by_seq[seq][0].pcm for seq in sorted(by_seq))
    first_diff = None
    if got != want:
        first_diff = next(
            (
                seq
                for seq in range(emitted)
                if seq not in by_seq
                or by_seq[seq][0].pcm != want[seq * chunk_bytes : (seq + 1) * chunk_bytes]
            ),
            emitted,
        )
    notes = []
    if emitted != len(want) // chunk_bytes:
        made = len(want) // chunk_bytes
        notes.append(f"the source emitted {emitted} chunks, the WAV makes {made}")
    return DeliveryReport(
        emitted=emitted,
        expected=len(want) // chunk_bytes,
        lines=len(rows),
        torn_lines=torn,
        delivered=len(by_seq),
        lost=len(lost),
        lost_seqs=lost[:20],
        unknown=unknown,
        redelivered=sum(1 for row in rows if row.deliveries > 1),
        repeats=sum(1 for seen in by_seq.values() if len(seen) > 1),
        unmarked_duplicates=len(set(unmarked)),
        max_deliveries=max((row.deliveries for row in rows), default=0),
        out_of_order=out_of_order,
        differing_bytes=differing,
        discontinuities=sum(1 for row in firsts if row.discontinuity),
        bytes_equal=got == want,
        bytes_compared=len(got),
        first_differing_seq=first_diff,
        dead_letters=dead_letters,
        notes=notes,
    )


# -- the source's word -------------------------------------------------------------


@dataclass(frozen=True)
class SourceFacts:
    latest_seq: dict[str, int]  # "node.port" -> seq of its latest committed value
    dead_letters: list[Json]


def source_facts(queue_url: str | None, data_dir: Path, flow: str) -> SourceFacts:
    """The flow's latest committed seq per port and its dead letters, from the queue."""

    async def read() -> SourceFacts:
        queue = open_queue(queue_url, data_dir)
        try:
            latest = await queue.latest(flow)
            dead = await queue.dead_letters(flow, limit=1000)
        finally:
            await queue.close()
        seqs: dict[str, int] = {}
        for (node, port), value in latest.items():
            ref = value.get("$ref") if isinstance(value, dict) else None
            meta = getattr(value, "meta", None) or (ref or {}).get("meta", {})
            if isinstance(meta.get("seq"), int):
                seqs[f"{node}.{port}"] = meta["seq"]
        letters = [
            {"node": d.node, "seq": d.item.seq, "deliveries": d.deliveries, "reason": d.reason}
            for d in dead
        ]
        return SourceFacts(seqs, letters)

    return asyncio.run(read())


# -- the recorder's word ------------------------------------------------------------


@dataclass
class ClipReport:
    kept: int = 0
    playable: int = 0
    with_audio: int = 0
    seconds: float = 0.0
    frames: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kept > 0 and self.playable == self.kept


def kept_clips(data_dir: Path) -> list[str]:
    """Digests of the recordings kept in ``data_dir``'s store, oldest first."""
    with sqlite3.connect(f"file:{data_dir / 'store.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT digest FROM run_artifact WHERE kind = 'recording' ORDER BY created_at"
        ).fetchall()
    return [digest for (digest,) in rows]


def decode_clip(path: Path) -> tuple[float, int, bool]:
    """Decode every packet of ``path``; (seconds, video frames, has audio). Raises
    FFmpeg's errors for a clip that does not play."""
    with av.open(str(path)) as container:
        if not container.streams.video:
            raise ValueError("no video stream")
        has_audio = bool(container.streams.audio)
        frames, last_end = 0, 0.0
        for frame in container.decode(*container.streams.video, *container.streams.audio):
            if isinstance(frame, av.VideoFrame):
                frames += 1
            if isinstance(frame, av.VideoFrame | av.AudioFrame) and frame.time is not None:
                last_end = max(last_end, float(frame.time))
        seconds = container.duration / av.time_base if container.duration else last_end
    if frames == 0 or seconds <= 0:
        raise ValueError(f"{frames} video frames, {seconds:.3f} s")
    return seconds, frames, has_audio


def check_clips(data_dir: Path) -> ClipReport:
    report = ClipReport()
    store = ArtifactStore(data_dir)
    for digest in kept_clips(data_dir):
        report.kept += 1
        try:
            seconds, frames, has_audio = decode_clip(store.local_path(digest))
        except (av.FFmpegError, OSError, ValueError) as exc:
            report.failures.append(f"{digest[:19]}: {exc}")
            continue
        report.playable += 1
        report.with_audio += int(has_audio)
        report.seconds += seconds
        report.frames += frames
    return report


def as_json(report: DeliveryReport | ClipReport) -> Json:
    return {**asdict(report), "ok": report.ok}
