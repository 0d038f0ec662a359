"""``mediaflow trace FILE``: a recorded run's decisions, replayed and checked.

A run records its ticks when ``MEDIAFLOW_TRACE=FILE`` is set (see
:mod:`mediaflow.engine.trace`). This command reads every segment of FILE (one
per process that ran or resumed the run), prints each tick with the decisions
it led to, one line each, and replays the segment through the reducer to check
that it gives exactly the recorded commands. Exit codes: 0 every segment
replays exactly, 1 a replay differs (the first difference is printed), 2 FILE
cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from mediaflow.engine.replay import describe_commands, describe_tick, replay
from mediaflow.engine.ticks import Tick
from mediaflow.engine.trace import Segment, TraceError, encode_tick, read_segments

COMMAND = "trace"


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``trace`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="print a recorded run's decisions (MEDIAFLOW_TRACE) and check its replay",
        description="Print the ticks a run recorded with MEDIAFLOW_TRACE=FILE and the "
        "decisions each led to, and replay them through the scheduler to check that "
        "it decides exactly the same.",
        parents=list(parents),
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the trace file")
    parser.add_argument(
        "--node", help="only ticks and decisions about this node (the replay checks all)"
    )
    parser.add_argument(
        "--limit", type=int, default=None, metavar="N", help="print at most N ticks per segment"
    )
    parser.add_argument(
        "--check", action="store_true", help="only replay and report, one line per segment"
    )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    try:
        segments = list(read_segments(args.file))
    except (OSError, TraceError) as exc:
        print(f"mediaflow trace: {exc}", file=sys.stderr)
        return 2
    if not segments:
        print(f"mediaflow trace: {args.file} holds no trace", file=sys.stderr)
        return 2
    exact = True
    try:
        for number, segment in enumerate(segments, 1):
            if not args.check:
                _print_segment(stream, number, segment, node=args.node, limit=args.limit)
            exact = _print_verdict(stream, number, segment) and exact
    except BrokenPipeError:  # `mediaflow trace FILE | head`: the reader has seen enough
        # Point stdout at /dev/null so the interpreter's final flush does not fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0 if exact else 1


def _print_segment(
    out: TextIO, number: int, segment: Segment, *, node: str | None, limit: int | None
) -> None:
    header = segment.header
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(header["wall"]))
    nodes = ", ".join(n + ("*" if source else "") for _flow, n, source in header["nodes"])
    flows = sorted({flow for flow, _n, _s in header["nodes"]})
    out.write(
        f"segment {number}: flow {', '.join(flows)}, run {header['run']}, pid {header['pid']}, "
        f"started {started}\n"
        f"  nodes {nodes} (* source); limits {_limits(header['limits'])}\n"
    )
    if header["careful"]:
        careful = ", ".join(n for _f, n in header["careful"])
        out.write(f"  resumed after a crash: {careful} drain one item at a time\n")
    first = segment.lines[0].now if segment.lines else 0.0
    shown = 0
    for line in segment.lines:
        if node is not None and not _mentions(line.tick, line.commands, node):
            continue
        if limit is not None and shown >= limit:
            out.write(f"  ... ({len(segment.lines)} ticks in all)\n")
            break
        decisions = describe_commands(line.commands)
        arrow = f"  ->  {decisions}" if decisions else ""
        out.write(f"  {line.now - first:9.4f}s  {describe_tick(line.tick)}{arrow}\n")
        shown += 1
    if segment.truncated:
        out.write("  (the last line was cut off: the process was killed while writing it)\n")


def _print_verdict(out: TextIO, number: int, segment: Segment) -> bool:
    result = replay(segment)
    if result.exact:
        out.write(
            f"segment {number}: replayed {result.ticks} ticks, all {result.commands} "
            "commands reproduced\n"
        )
        return True
    mismatch = result.mismatch
    assert mismatch is not None
    out.write(
        f"segment {number}: replay differs at tick {mismatch.index + 1} "
        f"({describe_tick(mismatch.tick)})\n"
        f"  recorded: {json.dumps(mismatch.recorded)}\n"
        f"  replayed: {json.dumps(mismatch.replayed)}\n"
    )
    return False


def _limits(limits: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in limits.items())


def _mentions(tick: Tick, commands: list[dict[str, Any]], node: str) -> bool:
    return node in _nodes_named(encode_tick(tick)) or any(
        node in _nodes_named(command) for command in commands
    )


def _nodes_named(raw: dict[str, Any]) -> set[str]:
    """The nodes an encoded tick or command is about (its streams and items)."""
    nodes: set[str] = set()
    if "stream" in raw:
        nodes.add(raw["stream"][1])
    for field in ("counts", "wants", "claims", "streams"):
        nodes.update(entry[1] for entry in raw.get(field, ()))
    for item in raw.get("items", ()):
        if isinstance(item, dict):
            nodes.add(item["stream"][1])
    return nodes
