"""``mediaflow gc``: sweep a data directory now; and the periodic sweep of the commands
that run flows or serve (``run``, ``serve``, ``demo``).

``mediaflow gc [--dry-run] [--json] [--forget-flow NAME] [--data DIR]`` runs
:func:`~mediaflow.gc.sweep_artifacts` once on the data directory with the queue
``MEDIAFLOW_QUEUE`` names, shows a progress line on stderr during a long sweep
(a terminal, or ``-v``), then prints what it deleted (or would delete) on stdout.
``--forget-flow NAME`` first drops a flow that will not run again: its latest
values, dead letters and ended run records, so the sweep can take its artifacts.

:func:`start_periodic` starts a :class:`~mediaflow.gc.Sweeper` next to a session or
a server, with its own queue handle (a sweep's long read never shares a
connection with the engine's writes).

Exit codes: 0 done, 1 another sweep holds the directory or a backend failed
(one line), 2 a bad setting (``ARTIFACT_MAX_BYTES=banana``) or argument.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from mediaflow.cli.args import add_data_option
from mediaflow.cli.loop import run_command
from mediaflow.cli.progress import ProgressLine, is_terminal
from mediaflow.config import ConfigError, default_data_dir, sqlite_sync
from mediaflow.gc import (
    GcSettings,
    SweepBusy,
    SweepProgress,
    SweepReport,
    format_bytes,
    sweep_artifacts,
)
from mediaflow.gc.forget import FlowNotForgettable, forget_flow
from mediaflow.gc.periodic import RetentionHandle
from mediaflow.queue import (
    QueueError,
    open_queue,
    queue_target,
)
from mediaflow.store import ArtifactStore

log = logging.getLogger("mediaflow.gc")

COMMAND = "gc"
PROGRESS_EVERY_S = 1.0


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``gc`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="sweep the artifact store now: delete what nothing references",
        description="Delete the artifacts nothing needs any more (no kept recording, "
        "hold, live message or run in flight references them, and they are older than "
        "ARTIFACT_GC_GRACE_S), evict under ARTIFACT_MAX_BYTES, and trim old dead letters "
        "and run records. Safe while flows run and servers serve.",
        parents=list(parents),
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted; delete nothing"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the sweep's report as JSON on stdout"
    )
    parser.add_argument(
        "--forget-flow",
        metavar="NAME",
        help="first drop flow NAME's latest values, dead letters and ended run records "
        "(refused while it runs or has items waiting), so its artifacts can go",
    )
    add_data_option(parser)


def run(args: argparse.Namespace) -> int:
    """Sweep once; returns the exit code. Blocks for the sweep."""
    if args.dry_run and args.forget_flow is not None:
        # Forgetting deletes records at once; a dry run promises to change nothing.
        print("mediaflow: --forget-flow cannot be combined with --dry-run", file=sys.stderr)
        return 2
    try:
        return run_command(lambda: _gc(args))
    except KeyboardInterrupt:
        return 130


async def _gc(args: argparse.Namespace) -> int:
    data_dir: Path = args.data or default_data_dir()
    queue_url = os.environ.get("MEDIAFLOW_QUEUE")
    try:
        queue_target(queue_url, data_dir)
        settings = GcSettings.from_env()
        sync = sqlite_sync()
    except (ConfigError, QueueError) as exc:  # QueueError: MEDIAFLOW_QUEUE, _SQLITE_SYNC
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    if not data_dir.is_dir():
        # Not created here: a mistyped --data would otherwise "succeed" on nothing.
        print(f"mediaflow: no data directory at {data_dir}", file=sys.stderr)
        return 1
    queue: RetentionHandle | None = None
    store: ArtifactStore | None = None
    forgot: dict[str, int] | None = None
    try:
        queue = open_queue(queue_url, data_dir, sqlite_sync=sync)
        store = ArtifactStore(data_dir)
        if args.forget_flow is not None:
            forgot = await forget_flow(
                data_dir, queue, args.forget_flow, lease_s=settings.lease_ms / 1000
            )
        enabled = not args.quiet and (args.verbose > 0 or is_terminal(sys.stderr))
        progress = sweep_progress(sys.stderr, enabled=enabled, every_s=PROGRESS_EVERY_S)
        try:
            report = await sweep_artifacts(
                data_dir,
                queue,
                store=store,
                settings=settings,
                dry_run=args.dry_run,
                progress=progress,
                events=_log_sweep_event,
            )
        finally:
            progress.finish()
    except SweepBusy:
        if forgot is not None:  # done all the same; the other sweep or the next one collects
            print(describe_forgotten(args.forget_flow, forgot))
        print(f"mediaflow: another sweep is running on {data_dir}", file=sys.stderr)
        return 1
    except FlowNotForgettable as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 1
    except (QueueError, OSError, sqlite3.Error) as exc:
        print(f"mediaflow: gc failed on {data_dir}: {exc}", file=sys.stderr)
        return 1
    finally:
        if queue is not None:
            await queue.close()
        if store is not None:
            store.close()
    _print_outcome(args, report, forgot)
    return 0


def _print_outcome(
    args: argparse.Namespace, report: SweepReport, forgot: Mapping[str, int] | None
) -> None:
    if args.json:
        out = report.to_json()
        if forgot is not None:
            out = {**out, "forgot_flow": {"flow": args.forget_flow, **forgot}}
        print(json.dumps(out, indent=2, default=str))
        return
    if forgot is not None:
        print(describe_forgotten(args.forget_flow, forgot))
    print(describe_report(report))


# -- forgetting a flow ---------------------------------------------------------------


def describe_forgotten(flow: str, dropped: Mapping[str, int]) -> str:
    parts = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in dropped.items())
    return f"forgot flow {flow!r}: {parts or 'nothing was recorded'}"


# -- what the command prints ---------------------------------------------------------


def describe_report(report: SweepReport) -> str:
    """The summary ``mediaflow gc`` prints: a headline, then one line per fact."""
    dry = report.dry_run
    gone = report.deleted + report.evicted
    lines = [
        f"{'would delete' if dry else 'deleted'} {_artifacts(gone)}, "
        f"{'freeing' if dry else 'freed'} {format_bytes(report.freed_bytes)}, "
        f"in {report.duration_s:.2f} s ({report.examined:,} examined, "
        f"{report.live_digests:,} referenced by live messages)"
    ]
    facts = [
        (report.deleted, f"nothing referenced them: {report.deleted:,}"),
        (report.evicted, f"evicted under the cap: {report.evicted:,} "
                         f"({format_bytes(report.evicted_bytes)})"),
        (report.keeps_expired, f"expired keeps: {report.keeps_expired:,}"),
        (report.temp_removed, f"temp files: {report.temp_removed:,}"),
        (report.orphans_adopted, f"stray files adopted: {report.orphans_adopted:,}"),
        (report.skipped_sending, f"left while being sent: {report.skipped_sending:,}"),
        (report.dead_letters_trimmed, f"dead letters trimmed: {report.dead_letters_trimmed:,}"),
        (report.runs_pruned, f"run records pruned: {report.runs_pruned:,}"),
    ]  # fmt: skip
    lines += [f"  {text}" for count, text in facts if count]
    cap = f" (cap {format_bytes(report.max_bytes)})" if report.max_bytes is not None else ""
    lines.append(
        f"  stored: {_artifacts(report.stored_count)}, {format_bytes(report.stored_bytes)}{cap}"
    )
    if report.over_cap:
        lines.append("  still over the cap: what is left is held by live references")
    if report.pinned_by:
        lines.append(
            "  held back by runs in flight (what they saved since is spared): "
            + ", ".join(report.pinned_by)
        )
    return "\n".join(lines)


def _artifacts(count: int) -> str:
    return f"{count:,} artifact{'' if count == 1 else 's'}"


def _log_sweep_event(event_type: str, data: Mapping[str, Any]) -> None:
    """``sweep_artifacts``' event callback in ``mediaflow gc``: eviction per artifact at
    debug (the summary counts them), the cap warning always."""
    level = logging.WARNING if event_type == "store_over_cap" else logging.DEBUG
    log.log(level, "%s", describe_event(event_type, data))


def describe_event(event_type: str, data: Mapping[str, Any]) -> str:
    """One readable line for a sweep's ``artifact_evicted`` or ``store_over_cap``."""
    if event_type == "store_over_cap":
        return (
            f"store over cap: {format_bytes(data.get('stored_bytes', 0))} of "
            f"{format_bytes(data.get('max_bytes', 0))}, "
            f"{format_bytes(data.get('live_bytes', 0))} held by live references"
        )
    if event_type == "artifact_evicted":
        return (
            f"evicted {data.get('digest')} ({format_bytes(data.get('bytes', 0))}, "
            f"{data.get('why')})"
        )
    return event_type


def sweep_progress(
    stream: TextIO,
    *,
    enabled: bool,
    every_s: float = PROGRESS_EVERY_S,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressLine[SweepProgress]:
    """``sweep_artifacts``' progress callback (:class:`~.progress.ProgressLine`)."""
    return ProgressLine(
        stream,
        lambda progress: f"mediaflow gc: {describe_progress(progress)}",
        enabled=enabled,
        every_s=every_s,
        clock=clock,
    )


PHASES = {
    "live": "reading live references",
    "strays": "looking for stray files",
    "collect": "collecting",
    "cap": "evicting under the cap",
}


def describe_progress(progress: SweepProgress) -> str:
    """``collecting: 120,000 done, 1.2 GB freed``."""
    return (
        f"{PHASES.get(progress.phase, progress.phase)}: {progress.done:,} done, "
        f"{format_bytes(progress.freed_bytes)} freed so far"
    )
