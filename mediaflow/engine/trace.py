"""Recording a run's decisions: every tick, its time and the commands it gave.

``MEDIAFLOW_TRACE=FILE`` (off by default; ``EngineSettings.trace_path``) makes
each runner append to FILE, as JSON lines, one *segment* per runner: a header
line with the reducer's initial state, then one line per tick. :mod:`.replay`
feeds a segment's ticks through :func:`~.reduce.reduce` again, without I/O, and
checks it gives the same commands, so a run (a crashed one too: each process
that resumed it writes its own segment) can be rebuilt and read decision by
decision (``mediaflow trace``).

Lines are written as they happen (line-buffered), so a process killed
mid-run leaves every tick it reduced but the one being written; a partial last
line is ignored on reading. Items in ticks are written whole (the reducer's
state holds them); commands name items by entry id.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, assert_never

from mediaflow.engine.commands import (
    AckCommand,
    ClaimCommand,
    Command,
    DeadLetterCommand,
    JournalCommand,
    LeaseCommand,
    PublishEventCommand,
    RecallCommand,
    ReleaseCommand,
    StartNodeCommand,
    WakeAtCommand,
    WakeClaimerCommand,
)
from mediaflow.engine.state import EngineState, Limits, NodeState
from mediaflow.engine.ticks import (
    CONTROL_ACTIONS,
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    ClaimFailedTick,
    CommitDueTick,
    CommitFailedTick,
    CommittedTick,
    ControlTick,
    HaltTick,
    ItemsArrivedTick,
    LeasedTick,
    LeaseDueTick,
    NodeFinishedTick,
    ReshapeTick,
    StopTick,
    Tick,
    TimerTick,
)
from mediaflow.queue.contract import StreamKey, WorkItem

FORMAT: Final = "mediaflow-trace"
VERSION: Final = 1

Json = dict[str, Any]
_dumps = json.JSONEncoder(separators=(",", ":")).encode


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the line."""


# -- encoding --------------------------------------------------------------------------


def _stream(key: StreamKey) -> list[str]:
    return [key.flow, key.node]


def _streams(keys: Iterable[StreamKey]) -> list[list[str]]:
    return sorted(_stream(s) for s in keys)


def _counts(counts: Mapping[StreamKey, int] | Mapping[StreamKey, float]) -> list[list[Any]]:
    return [[key.flow, key.node, n] for key, n in counts.items()]


def _item(item: WorkItem) -> Json:
    return {
        "id": item.entry_id,
        "stream": _stream(item.stream),
        "kind": item.kind,
        "payload": dict(item.payload),
        "seq": item.seq,
        "deliveries": item.deliveries,
        "enqueued_at": item.enqueued_at,
    }


def encode_tick(tick: Tick) -> Json:
    match tick:
        case ClaimedTick(items=items) | CommittedTick(items=items) | ItemsArrivedTick(items=items):
            return {"type": tick.type, "items": [_item(i) for i in items]}
        case CommitDueTick(counts=counts):
            return {"type": tick.type, "counts": _counts(counts)}
        case BacklogBehindTick(streams=streams) | HaltTick(streams=streams):
            return {"type": tick.type, "streams": _streams(streams)}
        case ReshapeTick(streams=streams, sources=sources, ordered=ordered, rebuilt=rebuilt):
            return {
                "type": tick.type,
                "streams": [_stream(s) for s in streams],
                "sources": _streams(sources),
                "ordered": _streams(ordered),
                "rebuilt": _streams(rebuilt),
                "rates": _counts(tick.rates),
            }
        case NodeFinishedTick(stream=stream, entry_id=entry_id, done=done, error=error):
            out = {"type": tick.type, "stream": _stream(stream), "id": entry_id, "done": done}
            return out if error is None else {**out, "error": error}
        case BacklogSampledTick(per_flow=per_flow):
            return {"type": tick.type, "per_flow": dict(per_flow)}
        case ControlTick(flow=flow):
            return {"type": tick.type, "flow": flow}
        case ClaimDueTick(poll=poll):
            return {"type": tick.type, "poll": poll}
        case LeaseDueTick(mine=mine, others=others, rank=rank, members=members):
            out = {"type": tick.type, "mine": _streams(mine), "others": _streams(others)}
            return {**out, "rank": rank, "members": members}
        case LeasedTick(mine=mine, taken_over=taken_over):
            return {"type": tick.type, "mine": _streams(mine), "taken_over": _streams(taken_over)}
        case ClaimFailedTick() | CommitFailedTick() | TimerTick() | StopTick():
            return {"type": tick.type}
        case _:
            assert_never(tick)


def encode_command(command: Command) -> Json:
    match command:
        case StartNodeCommand(stream=stream, items=items, attempt=attempt, commit_first=first):
            out = {"type": command.type, "stream": _stream(stream), "attempt": attempt}
            out["items"] = [item.entry_id for item in items]
            return {**out, "commit_first": True} if first else out
        case RecallCommand(stream=stream):
            return {"type": command.type, "stream": _stream(stream)}
        case AckCommand(entry_ids=ids):
            return {"type": command.type, "ids": list(ids)}
        case DeadLetterCommand(item=item, reason=reason):
            return {"type": command.type, "id": item.entry_id, "reason": reason}
        case ReleaseCommand(entry_ids=ids, started=started):
            return {"type": command.type, "ids": list(ids), "started": started}
        case WakeAtCommand(at=at):
            return {"type": command.type, "at": at}
        case WakeClaimerCommand():
            return {"type": command.type}
        case ClaimCommand(wants=wants):
            return {"type": command.type, "wants": _counts(wants)}
        case JournalCommand(claims=claims):
            return {"type": command.type, "claims": _counts(claims)}
        case LeaseCommand(hold=hold, acquire=acquire, release=release):
            out = {"type": command.type, "hold": _streams(hold), "acquire": _streams(acquire)}
            return {**out, "release": _streams(release)}
        case PublishEventCommand(event_type=event_type, data=data):
            return {"type": command.type, "event": event_type, "data": dict(data)}
        case _:
            assert_never(command)


def encode_start(state: EngineState, run_id: str) -> Json:
    """The header of a segment: the reducer's initial state (which holds nothing)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": run_id,
        "pid": os.getpid(),
        "wall": time.time(),
        "limits": {name: getattr(state.limits, name) for name in Limits.__dataclass_fields__},
        "nodes": [[s.flow, s.node, n.is_source] for s, n in state.nodes.items()],
        "careful": _streams(state.careful),
        "ordered": _streams(state.ordered),
        "rates": _counts(state.rates),
    }


# -- decoding --------------------------------------------------------------------------


def _key(raw: list[str]) -> StreamKey:
    return StreamKey(raw[0], raw[1])


def _keys(raw: list[list[str]]) -> frozenset[StreamKey]:
    return frozenset(_key(s) for s in raw)


def _decode_item(raw: Json) -> WorkItem:
    return WorkItem(
        raw["id"],
        _key(raw["stream"]),
        raw["kind"],
        raw["payload"],
        raw["seq"],
        raw["deliveries"],
        raw["enqueued_at"],
    )


def decode_tick(raw: Json) -> Tick:
    kind = raw["type"]
    items = tuple(_decode_item(i) for i in raw.get("items", ()))
    counts = {StreamKey(f, n): c for f, n, c in raw.get("counts", ())}
    simple: dict[str, Tick] = {
        "claim_failed": ClaimFailedTick(),
        "commit_failed": CommitFailedTick(),
        "timer": TimerTick(),
        "stop": StopTick(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "claimed":
        return ClaimedTick(items)
    if kind == "committed":
        return CommittedTick(items)
    if kind == "items_arrived":
        return ItemsArrivedTick(items)
    if kind == "commit_due":
        return CommitDueTick(counts)
    if kind == "claim_due":
        return ClaimDueTick(bool(raw["poll"]))
    if kind == "backlog_behind":
        return BacklogBehindTick(_keys(raw["streams"]))
    if kind == "lease_due":
        return LeaseDueTick(_keys(raw["mine"]), _keys(raw["others"]), raw["rank"], raw["members"])
    if kind == "leased":
        return LeasedTick(_keys(raw["mine"]), _keys(raw["taken_over"]))
    if kind == "node_finished":
        return NodeFinishedTick(_key(raw["stream"]), raw["id"], raw["done"], raw.get("error"))
    if kind == "backlog_sampled":
        return BacklogSampledTick(dict(raw["per_flow"]))
    if kind in CONTROL_ACTIONS:
        return ControlTick(raw["flow"], kind)
    if kind == "halt":
        return HaltTick(_keys(raw["streams"]))
    if kind == "reshape":
        return ReshapeTick(
            tuple(_key(s) for s in raw["streams"]),
            _keys(raw["sources"]),
            _keys(raw["ordered"]),
            _keys(raw["rebuilt"]),
            {StreamKey(f, n): t for f, n, t in raw["rates"]},
        )
    raise TraceError(f"unknown tick type {kind!r}")


def decode_start(raw: Json) -> EngineState:
    if raw.get("format") != FORMAT:
        raise TraceError("not a mediaflow trace header")
    if raw.get("version") != VERSION:
        raise TraceError(f"trace version {raw.get('version')!r}; this mediaflow reads {VERSION}")
    limits = Limits(**raw["limits"])
    nodes = {StreamKey(f, n): NodeState(is_source=bool(src)) for f, n, src in raw["nodes"]}
    careful = _keys(raw["careful"])
    # "ordered" and "rates" are absent in traces written before leases and max_rate.
    ordered = _keys(raw.get("ordered", ()))
    rates = {StreamKey(f, n): t for f, n, t in raw.get("rates", ())}
    return EngineState(limits=limits, nodes=nodes, careful=careful, ordered=ordered, rates=rates)


@dataclass(frozen=True)
class TraceLine:
    """One reduced tick as recorded: monotonic ``now``, the tick, its commands."""

    now: float
    tick: Tick
    commands: list[Json]


@dataclass(frozen=True)
class Segment:
    """One runner's part of a trace file."""

    header: Json
    start: EngineState
    lines: list[TraceLine]
    truncated: bool  # the last line was cut short (the process was killed)


def read_segments(path: Path) -> Iterator[Segment]:
    """The segments of a trace file, in order. Raises :class:`TraceError` for a
    line that is neither JSON nor a tick (a cut-off last line is tolerated)."""
    header: Json | None = None
    lines: list[TraceLine] = []
    truncated = False
    with open(path, encoding="utf-8") as fh:
        text = fh.read().split("\n")
    if text and text[-1] == "":
        text.pop()
    for number, line in enumerate(text, 1):
        try:
            raw = json.loads(line)
        except ValueError:
            if number == len(text):
                truncated = True
                break
            raise TraceError(f"{path}:{number}: not a JSON line") from None
        if "format" in raw:
            if header is not None:
                yield Segment(header, decode_start(header), lines, False)
            header, lines = raw, []
            continue
        if header is None:
            raise TraceError(f"{path}:{number}: a tick before any header")
        try:
            lines.append(TraceLine(raw["t"], decode_tick(raw["tick"]), raw["commands"]))
        except (KeyError, TypeError, IndexError) as exc:
            raise TraceError(f"{path}:{number}: malformed tick ({exc!r})") from None
    if header is not None:
        yield Segment(header, decode_start(header), lines, truncated)


# -- writing ---------------------------------------------------------------------------


class TraceWriter:
    """Appends one runner's segment to a trace file. Not thread-safe (the loop only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def start(self, state: EngineState, run_id: str) -> None:
        """Open the file (appending) and write the segment's header. Raises OSError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._fh.write(_dumps(encode_start(state, run_id)) + "\n")

    def record(self, tick: Tick, now: float, commands: list[Command]) -> None:
        if self._fh is None:
            return
        line = {
            "t": now,
            "tick": encode_tick(tick),
            "commands": [encode_command(c) for c in commands],
        }
        self._fh.write(_dumps(line) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
