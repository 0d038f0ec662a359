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

A tick is written from its dataclass fields, in their order, each by its type
hint (:func:`_codec_of`), so a new tick needs nothing here; a field of a type
no trace holds yet fails at import, not in a run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import abc
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import (
    IO,
    Any,
    Final,
    Literal,
    TypeAlias,
    assert_never,
    get_args,
    get_origin,
    get_type_hints,
)

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
from mediaflow.engine.state import EngineState, Limits, StreamState
from mediaflow.engine.ticks import Tick
from mediaflow.node import RetryPolicy
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


def _policies(policies: Mapping[StreamKey, RetryPolicy]) -> list[list[Any]]:
    return [
        [key.flow, key.node, p.max_attempts, p.retry_base_s, p.retry_max_s]
        for key, p in policies.items()
    ]


def _decode_policies(raw: list[list[Any]]) -> dict[StreamKey, RetryPolicy]:
    return {StreamKey(f, n): RetryPolicy(a, b, m) for f, n, a, b, m in raw}


def _ordered_streams(keys: Iterable[StreamKey]) -> list[list[str]]:
    return [_stream(s) for s in keys]


def _items(items: Iterable[WorkItem]) -> list[Json]:
    return [_item(i) for i in items]


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
    """``{"type": ..., field: value, ...}``, fields in their order (a None left out,
    and a field marked ``{"trace": "omit_default"}`` while it holds its default)."""
    codec = _TICK_CODECS[type(tick)]
    out: Json = {"type": tick.type}
    for name, attr, encode, _ in codec.fields:
        value = getattr(tick, attr)
        if value is None or (attr in codec.omitted and value == codec.omitted[attr]):
            continue
        out[name] = encode(value)
    return out


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
        "retries": _policies({s: n.retry for s, n in state.nodes.items() if n.retry}),
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
    codec = _TICKS_BY_TYPE.get(kind)
    if codec is None:
        raise TraceError(f"unknown tick type {kind!r}")
    args: dict[str, Any] = {} if codec.type_field is None else {codec.type_field: kind}
    for name, attr, _, decode in codec.fields:
        if name in raw:
            args[attr] = decode(raw[name])
        elif attr not in codec.optional:
            raise KeyError(name)
    return codec.cls(**args)


# -- each tick's codec, from its fields and their type hints ------------------------------

_Encode: TypeAlias = Callable[[Any], Any]
_Decode: TypeAlias = Callable[[Any], Any]


def _codec_of(hint: Any) -> tuple[_Encode, _Decode]:
    """How a tick field of type ``hint`` is written and read back. Raises
    ``TypeError`` (at import) for a type a trace cannot hold yet."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is StreamKey:
        return _stream, _key
    if origin is frozenset and args == (StreamKey,):
        return _streams, _keys
    if origin is tuple and args == (StreamKey, ...):
        return _ordered_streams, lambda raw: tuple(map(_key, raw))
    if origin is tuple and args == (WorkItem, ...):
        return _items, lambda raw: tuple(map(_decode_item, raw))
    if origin is abc.Mapping and args == (StreamKey, RetryPolicy):
        return _policies, _decode_policies
    if origin is abc.Mapping and args[0] is StreamKey:
        return _counts, lambda raw: {StreamKey(f, n): c for f, n, c in raw}
    if origin is abc.Mapping and args[0] is str:
        return dict, dict
    if hint is bool:
        return bool, bool
    if hint in (int, float, str) or origin is Literal or hint == str | None:
        return _same, _same
    raise TypeError(f"a trace cannot hold a tick field of type {hint!r}")


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _TickCodec:
    cls: Callable[..., Tick]
    # (name in the trace, attribute, encode, decode); the tick's type is not a field
    fields: tuple[tuple[str, str, _Encode, _Decode], ...]
    optional: frozenset[str]  # attributes with a default
    # Attributes left out while they hold this default: fields added after traces
    # were first written, so a trace that does not use them reads as it always did.
    omitted: Mapping[str, Any]
    types: tuple[str, ...]  # the names of the tick in a trace
    type_field: str | None  # the attribute its type is (ControlTick's action), if any


def _tick_codec(cls: type[Tick]) -> _TickCodec:
    hints = get_type_hints(cls)
    fields: list[tuple[str, str, _Encode, _Decode]] = []
    optional: set[str] = set()
    omitted: dict[str, Any] = {}
    types: tuple[str, ...] = ()
    type_field: str | None = None
    for f in dataclasses.fields(cls):
        name = f.metadata.get("trace", f.name)
        if name == "omit_default":
            name = f.name
            factory = f.default_factory
            omitted[f.name] = f.default if factory is dataclasses.MISSING else factory()
        if name == "type":  # the tick's type: a literal, or a field holding one
            types = get_args(hints[f.name])
            type_field = None if f.name == "type" else f.name
            continue
        fields.append((name, f.name, *_codec_of(hints[f.name])))
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            optional.add(f.name)
    return _TickCodec(cls, tuple(fields), frozenset(optional), omitted, types, type_field)


_TICK_CODECS: Final = {cls: _tick_codec(cls) for cls in get_args(Tick)}
_TICKS_BY_TYPE: Final = {name: c for c in _TICK_CODECS.values() for name in c.types}


def decode_start(raw: Json) -> EngineState:
    if raw.get("format") != FORMAT:
        raise TraceError("not a mediaflow trace header")
    if raw.get("version") != VERSION:
        raise TraceError(f"trace version {raw.get('version')!r}; this mediaflow reads {VERSION}")
    limits = Limits(**raw["limits"])
    careful = _keys(raw["careful"])
    # "ordered" and "rates" are absent in traces written before leases and max_rate.
    ordered = _keys(raw.get("ordered", ()))
    rates = {StreamKey(f, n): t for f, n, t in raw.get("rates", ())}
    retries = _decode_policies(raw.get("retries", ()))  # absent before node retry policies
    nodes = {
        key: StreamState(
            is_source=bool(src),
            careful=key in careful,
            ordered=key in ordered,
            interval=rates.get(key),
            retry=retries.get(key),
        )
        for key, src in ((StreamKey(f, n), src) for f, n, src in raw["nodes"])
    }
    return EngineState(limits=limits, nodes=nodes)


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
