"""Replaying a recorded run through the reducer, and telling its decisions to a person.

:func:`replay` rebuilds the engine's state of one trace segment (see
:mod:`.trace`) tick by tick, without I/O, and checks that every tick gives
exactly the commands that were recorded. :func:`describe_tick` and
:func:`describe_commands` are the one-line summaries ``mediaflow trace`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mediaflow.engine.reduce import reduce
from mediaflow.engine.state import EngineState
from mediaflow.engine.ticks import (
    BacklogBehindTick,
    BacklogSampledTick,
    ClaimDueTick,
    ClaimedTick,
    CommitDueTick,
    CommittedTick,
    ControlTick,
    ItemsArrivedTick,
    LeasedTick,
    LeaseDueTick,
    NodeFinishedTick,
    Tick,
)
from mediaflow.engine.trace import Json, Segment, encode_command
from mediaflow.queue.contract import StreamKey, WorkItem


@dataclass(frozen=True)
class Mismatch:
    """The first tick whose replayed commands differ from the recorded ones."""

    index: int  # 0-based tick number within the segment
    tick: Tick
    recorded: list[Json]
    replayed: list[Json]


@dataclass(frozen=True)
class Replayed:
    """A segment replayed: the state it rebuilt, how many ticks and commands it
    reproduced, and the first mismatch if any."""

    state: EngineState
    ticks: int
    commands: int
    mismatch: Mismatch | None

    @property
    def exact(self) -> bool:
        return self.mismatch is None


def replay(segment: Segment) -> Replayed:
    """Reduce every tick of ``segment`` from its initial state; stop at the first
    tick whose commands differ from those recorded."""
    state = segment.start
    commands = 0
    for index, line in enumerate(segment.lines):
        state, produced = reduce(state, line.tick, line.now)
        replayed = [_normal(encode_command(c)) for c in produced]
        if replayed != line.commands:
            return Replayed(
                state, index, commands, Mismatch(index, line.tick, line.commands, replayed)
            )
        commands += len(produced)
    return Replayed(state, len(segment.lines), commands, None)


def _normal(raw: Json) -> Json:
    # What the recorded line holds after its JSON round trip (tuples as lists).
    decoded: Json = json.loads(json.dumps(raw))
    return decoded


# -- for people ------------------------------------------------------------------------


def _items(items: Iterable[WorkItem]) -> str:
    """``asr 4-9, rec 2`` (seq ranges per node; redeliveries marked ``*``)."""
    by_node: dict[str, list[str]] = {}
    for item in items:
        mark = "*" if item.deliveries > 1 else ""
        by_node.setdefault(item.stream.node, []).append(f"{item.seq}{mark}")
    parts = []
    for node, seqs in by_node.items():
        shown = f"{seqs[0]}-{seqs[-1]}" if len(seqs) > 2 else ",".join(seqs)
        parts.append(f"{node} {shown}")
    return ", ".join(parts) or "nothing"


def describe_tick(tick: Tick) -> str:
    match tick:
        case ClaimedTick(items=items) | CommittedTick(items=items) | ItemsArrivedTick(items=items):
            return f"{tick.type} {_items(items)}"
        case CommitDueTick(counts=counts):
            return "commit_due " + ", ".join(f"{s.node} +{n}" for s, n in counts.items())
        case NodeFinishedTick(stream=stream, done=done, error=error):
            failed = f", then failed: {error}" if error else ""
            return f"node_finished {stream.node} done {done}{failed}"
        case BacklogBehindTick(streams=streams):
            return "backlog_behind " + ", ".join(sorted(s.node for s in streams))
        case BacklogSampledTick(per_flow=per_flow):
            return "backlog_sampled " + ", ".join(f"{f} {n}" for f, n in per_flow.items())
        case ControlTick(flow=flow):
            return f"{tick.type} {flow}"
        case ClaimDueTick(poll=poll):
            return "claim_due (poll)" if poll else "claim_due"
        case LeaseDueTick(mine=mine, others=others, rank=rank, members=members):
            return (
                f"lease_due member {rank + 1} of {members}, "
                f"holds {_nodes(mine)}, others hold {_nodes(others)}"
            )
        case LeasedTick(mine=mine, taken_over=taken_over):
            taken = f", took over {_nodes(taken_over)}" if taken_over else ""
            return f"leased {_nodes(mine)}{taken}"
        case _:
            return tick.type


def _nodes(streams: Iterable[StreamKey]) -> str:
    return ",".join(sorted(s.node for s in streams)) or "none"


def describe_commands(commands: list[Json]) -> str:
    """The decisions of one tick, e.g. ``start asr 4-9 · ack 6 · claim asr 16``."""
    parts = [_describe_command(c) for c in commands if c["type"] != "wake_claimer"]
    return " · ".join(parts)


def _describe_command(c: Json) -> str:
    kind = c["type"]
    if kind == "start_node":
        ids: list[Any] = c["items"]
        first = f" (attempt {c['attempt']})" if c["attempt"] > 1 else ""
        commit = ", acks first" if c.get("commit_first") else ""
        return f"start {c['stream'][1]} x{len(ids)}{first}{commit}"
    if kind == "ack":
        return f"ack {len(c['ids'])}"
    if kind in ("claim", "journal"):
        field = "wants" if kind == "claim" else "claims"
        wanted = ", ".join(f"{node} {n}" for _flow, node, n in c[field]) or "none"
        return f"{kind} {wanted}"
    if kind == "lease":
        parts = [
            f"{verb} {','.join(node for _flow, node in c[verb])}"
            for verb in ("hold", "acquire", "release")
            if c[verb]
        ]
        return "lease " + ("; ".join(parts) or "nothing")
    if kind == "dead_letter":
        return f"dead-letter {c['id']}: {c['reason']}"
    if kind == "release":
        return f"release {len(c['ids'])}" + (" (started)" if c["started"] else "")
    if kind == "recall":
        return f"recall {c['stream'][1]}"
    if kind == "wake_at":
        return f"wake at {c['at']:.3f}"
    if kind == "publish":
        return f"event {c['event']}"
    return str(kind)
