"""The GC bench's runs: per size, build the store, then alternate our sweep and the peer.

:func:`bench_size` populates one master store, and ``--runs`` times gives our sweep
(a dry run, then the sweep, each in a child: :func:`sweep_in_child`) and the peer
(:func:`peer_find`, ``find -delete`` by age alone) each a fresh copy, alternating
which goes first; the results gather in a :class:`SizeResult`. :func:`choose_base`
picks where the stores go. Kept apart from the fixture (``bench.gc.store``), the
child (``bench.gc.child``) and the report (``bench.gc.report``): this is the
sequencing and the parent-side measurements only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._lib.common import MIB, ChildRun, Json, notable_stderr, run_child
from bench.gc.store import check_left, copy_tree, files_left, populate, remove_tree

MODULE = "bench.gc"  # the children run through its main (``--child``)
PEER_AGE_MIN = 60  # find -mmin +60: everything here is days old
# Per artifact on tmpfs: a 4 KiB page, the inode and dentry, its rows (a rough upper bound).
TMPFS_BYTES_PER_ARTIFACT = 4096 + 1024 + 400
FAN_OUT_DIRS = 256 + 256 * 256


def progress(message: str) -> None:
    print(f"[bench.gc] {message}", file=sys.stderr, flush=True)


# -- the peer ------------------------------------------------------------------------------


def peer_find(data_dir: Path) -> Json:
    """``find -type f -mmin +60 -delete`` (wall and CPU time), then the age-only DELETE
    of the rows. (Not find's peak RSS: after vfork+exec it starts at the parent's.)"""
    cmd = ["find", str(data_dir / "artifacts"), "-type", "f", "-mmin", f"+{PEER_AGE_MIN}"]
    started = time.perf_counter()
    proc = subprocess.Popen([*cmd, "-delete"])
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"find exited with {proc.returncode}")
    conn = sqlite3.connect(data_dir / "store.sqlite3", isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")  # as the store's own connections
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        deleted = conn.execute(
            "DELETE FROM artifacts WHERE created_at < ?", (time.time() - PEER_AGE_MIN * 60,)
        ).rowcount
        conn.execute("COMMIT")
        rows_s = time.perf_counter() - started
    finally:
        conn.close()
    return {
        "seconds": seconds,
        "rows_s": rows_s,
        "rows_deleted": deleted,
        "cpu_user_s": usage.ru_utime,
        "cpu_sys_s": usage.ru_stime,
        "files_left": len(files_left(data_dir / "artifacts")),
    }


# -- the parent ----------------------------------------------------------------------------


@dataclass
class SizeResult:
    n: int
    referenced: int
    population: Json = field(default_factory=dict)
    copies_s: list[float] = field(default_factory=list)
    sweeps: list[Json] = field(default_factory=list)
    dry_runs: list[Json] = field(default_factory=list)
    peers: list[Json] = field(default_factory=list)
    checks: list[Json] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    profile: Json | None = None

    def to_json(self) -> Json:
        return {k: v for k, v in self.__dict__.items()}


def choose_base(requested: str | None, sizes: Sequence[int]) -> tuple[Path, list[str]]:
    """A fresh directory for the stores: ``--dir``, else /dev/shm when it has room for a
    master copy and a working copy of the largest size, else the temp dir."""
    notes: list[str] = []
    need = 2 * max(sizes) * TMPFS_BYTES_PER_ARTIFACT
    if requested:
        parent = Path(requested)
    else:
        parent = Path(tempfile.gettempdir())
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            room = min(shutil.disk_usage(shm).free, _mem_available())
            # tmpfs also caps inodes (by default half the RAM in pages): a file and a folder each.
            inodes = os.statvfs(shm).f_favail
            need_inodes = 2 * (max(sizes) + FAN_OUT_DIRS)
            if room > need * 1.2 and inodes > need_inodes * 1.1:
                parent = shm
            else:
                notes.append(
                    f"/dev/shm has {room / 2**30:.1f} GiB and {inodes:,} inodes free, of the"
                    f" {need / 2**30:.1f} GiB and {need_inodes:,} needed: using {parent}"
                    " (a disk: slower unlinks)"
                )
    parent.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="mf-bench-gc-", dir=parent))
    return base, notes


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def sweep_in_child(data_dir: Path, args: argparse.Namespace, **extra: Any) -> ChildRun:
    child_args = {"data_dir": str(data_dir), "timeout_s": args.timeout, **extra}
    run = run_child(MODULE, "sweep", child_args, hard_timeout_s=args.timeout + 60)
    if run.error:
        for line in notable_stderr(run.stderr):
            print(f"    {line}", file=sys.stderr)
    return run


def bench_size(n: int, args: argparse.Namespace, base: Path) -> SizeResult:
    master = base / f"store-{n}"
    progress(f"N={n:,}: populating {master} ...")
    started = time.perf_counter()
    refs, timings = populate(master, n, args.referenced, args.seed)
    timings["total_s"] = time.perf_counter() - started
    result = SizeResult(n, len(refs), timings)
    referenced = {r.digest for r in refs}
    del refs
    progress(
        f"N={n:,}: populated in {timings['total_s']:.1f} s (files and rows"
        f" {timings['files_and_rows_s']:.1f} s, queue {timings['queue_s']:.1f} s)"
    )
    try:
        for run in range(args.runs):
            order = ("ours", "peer") if run % 2 == 0 else ("peer", "ours")
            for who in order:
                work = base / f"work-{n}"
                result.copies_s.append(copy_tree(master, work))
                try:
                    if who == "ours":
                        _ours(work, args, result, referenced, run)
                    else:
                        progress(f"N={n:,} run {run + 1}/{args.runs}: find -delete ...")
                        peer = peer_find(work)
                        result.peers.append(peer)
                        progress(
                            f"N={n:,} run {run + 1}: find {peer['seconds']:.2f} s"
                            f" + rows {peer['rows_s']:.2f} s, {peer['files_left']} files left"
                        )
                finally:
                    remove_tree(work)
        if args.profile and n == max(args.sizes):
            work = base / f"work-{n}"
            copy_tree(master, work)
            try:
                progress(f"N={n:,}: cProfile'd sweep ...")
                out = args.profile_out or str(base.parent / f"bench-gc-{n}.prof")
                prof = sweep_in_child(work, args, dry_run=False, profile_out=out, top=args.top)
                result.profile = prof.result
            finally:
                remove_tree(work)
    finally:
        remove_tree(master)
    return result


def _ours(
    work: Path, args: argparse.Namespace, result: SizeResult, referenced: set[str], run: int
) -> None:
    n = result.n
    label = f"N={n:,} run {run + 1}/{args.runs}"
    progress(f"{label}: dry run ...")
    dry = sweep_in_child(work, args, dry_run=True)
    if dry.result is not None and not dry.error:
        result.dry_runs.append(dry.result)
    else:
        result.errors.append(f"dry run: {dry.error}")
    progress(f"{label}: sweep ...")
    swept = sweep_in_child(work, args, dry_run=False)
    if swept.result is None or swept.error:
        result.errors.append(f"sweep: {swept.error}")
        return
    result.sweeps.append(swept.result)
    check = check_left(work, referenced)
    check["deleted"] = swept.result["report"]["deleted"]
    check["ok"] = check["ok"] and check["deleted"] == n - len(referenced)
    result.checks.append(check)
    progress(
        f"{label}: sweep {swept.result['seconds']:.2f} s,"
        f" RSS +{swept.result['rss_delta'] / MIB:.1f} MiB, left {check['files']:,} files"
        f" {check['rows']:,} rows ({'ok' if check['ok'] else 'WRONG'})"
    )
