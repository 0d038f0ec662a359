"""Reference-aware GC against age-only deletion: sweep time and peak RSS by store size.

``python -m bench.gc [--sizes 100000,1000000] [--referenced 0.1] [--runs 3]``

For each size N the parent builds one store of N small artifacts (64-200 bytes
each, real sha256 digests, straight into the fan-out layout and bulk-inserted
into ``store.sqlite3`` with the store's own schema; every artifact created and
saved 15-30 days ago, so all are past any grace). A fraction (``--referenced``,
10 %) is referenced from the queue through :class:`SqliteQueue`'s real API, the
way the engine stores them (``{"value": {"$ref": {digest, media_type, size,
meta}}}``): ready, claimed (pending) and delayed emission items, dead letters
and latest values. Building it is not timed (its time is printed).

Then, ``--runs`` times, each on a fresh ``cp -a`` copy of that store:

1. **mediaflow**: ``sweep_artifacts(data_dir, queue, settings=GcSettings(grace_s=0))``
   in a fresh child process; it must delete exactly the unreferenced ones (the
   files and rows left are counted and compared with the referenced set). Before
   it, on the same copy, a dry run (which changes nothing). Peak RSS: the
   child's ``VmHWM`` after the sweep minus its RSS just before it (the high-water
   mark is reset first through ``/proc/self/clear_refs``; ``ru_maxrss`` cannot be
   used here: after a vfork+exec it starts at the parent's peak).
2. **The peer**: what Frigate or splitmuxsink do, delete by age alone:
   ``find DIR/artifacts -type f -mmin +60 -delete`` on its own fresh copy. It
   deletes everything, the referenced 10 % included: the ratio is the cost of
   knowing what is referenced. A second figure adds the age-only ``DELETE`` of
   the rows (``created_at < now``) that a store with an index also needs.

The table gives, per N, the sweep's median and range, its CPU seconds (system
time in brackets), the dry run, the peak RSS delta, the peer's times and the
ratios, then how time and RSS grow from the smallest N to the largest (targets:
time at most linear, RSS flat), and where the sweep's time went (its steps, and
inside collect the candidate pages and the delete batches). ``--quick``
runs 1,000 and 10,000 once. ``--profile`` adds one cProfile'd sweep of the
largest N (the sweep's worker-thread calls run inline there, so the profile
sees them), listing the hotspots.

The default ``--dir`` is under ``/dev/shm`` (tmpfs): disk noise out, so the
numbers are the sweep's own CPU and system-call cost. On a real disk unlinks
and the sweep's commits cost more, for the peer's unlinks too. It must hold two
copies of the largest store (~5.5 GB and 2.1M inodes for 1M artifacts), else the
temp dir is used. The machine's drift shows in the copies' time, also printed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import hashlib
import inspect
import json
import math
import os
import pstats
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import (
    MIB,
    REPO_ROOT,
    ChildRun,
    Json,
    Watchdog,
    emit_result,
    notable_stderr,
    rss_bytes,
    run_async,
    run_child,
    verdict,
)

MODULE = "bench.gc"
DAY_S = 86400.0
PEER_AGE_MIN = 60  # find -mmin +60: everything here is days old
ENQUEUE_BATCH = 1000
MEDIA_TYPES = ("image/jpeg", "audio/wav", "video/mp4", "application/json")
FILL = bytes(range(256))
# Per artifact on tmpfs: a 4 KiB page, the inode and dentry, its rows (a rough upper bound).
TMPFS_BYTES_PER_ARTIFACT = 4096 + 1024 + 400
FAN_OUT_DIRS = 256 + 256 * 256
# Targets: time exponent (log time ratio / log size ratio) and RSS growth, smallest to largest N.
LINEAR_EXPONENT = 1.1
FLAT_RSS = 16 * MIB


def progress(message: str) -> None:
    print(f"[bench.gc] {message}", file=sys.stderr, flush=True)


# -- the population ------------------------------------------------------------------


def payload(i: int) -> bytes:
    """Artifact ``i``'s bytes: distinct, 64-200 bytes."""
    head = b"mediaflow bench artifact %d\n" % i
    size = 64 + (i * 7919) % 137
    return head + FILL[: size - len(head)]


@dataclass(frozen=True)
class Ref:
    digest: str
    media_type: str
    size: int
    index: int

    def to_value(self) -> Json:
        ref = {"digest": self.digest, "media_type": self.media_type, "size": self.size}
        return {"$ref": {**ref, "meta": {"seq": self.index}}}


def populate(data_dir: Path, n: int, referenced: float, seed: int) -> tuple[list[Ref], Json]:
    """Build the store; return the referenced artifacts and how long each part took."""
    from mediaflow.store import ArtifactStore

    timings: Json = {}
    store = ArtifactStore(data_dir)
    store.total_bytes()  # opens the metadata: creates and migrates the schema
    store.close()
    (data_dir / "artifacts" / "tmp").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    chosen = set(rng.sample(range(n), round(n * referenced)))
    now = time.time()
    oldest = now - 30 * DAY_S
    step = 15 * DAY_S / max(n, 1)  # created 30 to 15 days ago, oldest first
    refs: list[Ref] = []
    started = time.perf_counter()
    conn = sqlite3.connect(data_dir / "store.sqlite3", isolation_level=None)
    try:
        # Populating only (the sweep opens the file as the store does): no syncs, a big cache.
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -256000")
        rows_s = 0.0
        for chunk in _chunks(range(n), 50_000):
            rows = list(_write_files(data_dir / "artifacts", chunk, oldest, step, chosen, refs))
            at = time.perf_counter()
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO artifacts (digest, size, media_type, created_at, saved_at)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute("COMMIT")
            rows_s += time.perf_counter() - at
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    timings["files_and_rows_s"] = time.perf_counter() - started
    timings["rows_s"] = rows_s
    started = time.perf_counter()
    timings["queue"] = run_async(fill_queue(data_dir, refs, rng))
    timings["queue_s"] = time.perf_counter() - started
    return refs, timings


def _chunks(values: range, size: int) -> Iterator[range]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _write_files(
    artifacts: Path, indices: range, oldest: float, step: float, chosen: set[int], refs: list[Ref]
) -> Iterator[tuple[str, int, str, float, float]]:
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in indices:
        data = payload(i)
        hex_digits = hashlib.sha256(data).hexdigest()
        folder = f"{artifacts}/{hex_digits[0:2]}/{hex_digits[2:4]}"
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        at = oldest + i * step
        fd = os.open(f"{folder}/{hex_digits}", flags, 0o444)  # read-only, as the store makes them
        try:
            os.write(fd, data)
            os.utime(fd, (at, at))
        finally:
            os.close(fd)
        digest = "sha256:" + hex_digits
        media_type = MEDIA_TYPES[i % len(MEDIA_TYPES)]
        if i in chosen:
            refs.append(Ref(digest, media_type, len(data), i))
        yield digest, len(data), media_type, at, at


async def fill_queue(data_dir: Path, refs: list[Ref], rng: random.Random) -> Json:
    """Reference ``refs`` from the queue: 1 % dead letters, 0.5 % latest values, 5 %
    delayed and 10 % claimed (pending) items, the rest ready items; 16 streams."""
    from mediaflow.queue.contract import NewItem, StreamKey
    from mediaflow.queue.sqlite import SqliteQueue

    shuffled = list(refs)
    rng.shuffle(shuffled)
    total = len(shuffled)
    n_dead, n_latest = max(1, total // 100), max(1, total // 200)
    n_delayed, n_pending = total // 20, total // 10
    dead = shuffled[:n_dead]
    latest = shuffled[n_dead : n_dead + n_latest]
    rest = shuffled[n_dead + n_latest :]
    delayed, pending, ready = (
        rest[:n_delayed],
        rest[n_delayed : n_delayed + n_pending],
        rest[n_delayed + n_pending :],
    )
    streams = [StreamKey(f"flow{f}", f"node{k}") for f in range(4) for k in range(4)]
    now = time.time()

    def item(ref: Ref, stream: StreamKey, delay_s: float = 0.0) -> NewItem:
        body = {"src": "camera", "port": "frame", "value": ref.to_value(), "at": now}
        return NewItem(stream, "emission", body, delay_s=delay_s)

    queue = SqliteQueue.in_dir(data_dir)
    try:
        for group, delay_s, claim_for in (
            (ready, 0.0, None),
            (delayed, DAY_S, None),
            (pending, 0.0, "bench-consumer"),
        ):
            for start in range(0, len(group), ENQUEUE_BATCH):
                batch = group[start : start + ENQUEUE_BATCH]
                items = [
                    item(r, streams[(start + j) % len(streams)], delay_s)
                    for j, r in enumerate(batch)
                ]
                await queue.enqueue(items, claim_for=claim_for)
        failing = StreamKey("flowdead", "sink")
        for start in range(0, len(dead), ENQUEUE_BATCH):
            await queue.enqueue([item(r, failing) for r in dead[start : start + ENQUEUE_BATCH]])
        dead_lettered = 0
        while dead_lettered < len(dead):
            claimed = await queue.claim("bench-failing", {failing: ENQUEUE_BATCH})
            if not claimed:
                raise RuntimeError(f"dead letters: claimed {dead_lettered} of {len(dead)}")
            for work in claimed:
                await queue.dead_letter(work, "bench: RuntimeError('always fails')")
            dead_lettered += len(claimed)
        for start in range(0, len(latest), ENQUEUE_BATCH):
            batch = latest[start : start + ENQUEUE_BATCH]
            await queue.put_latest(
                {("flow0", "camera", f"port{start + j}"): r.to_value() for j, r in enumerate(batch)}
            )
    finally:
        await queue.close()
    return {
        "ready": len(ready),
        "pending": len(pending),
        "delayed": len(delayed),
        "dead_letters": len(dead),
        "latest": len(latest),
    }


def copy_tree(src: Path, dst: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    return time.perf_counter() - started


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# -- checking what is left --------------------------------------------------------------


def files_left(artifacts: Path) -> set[str]:
    found: set[str] = set()
    for top in os.scandir(artifacts):
        if not top.is_dir() or len(top.name) != 2:
            continue
        for leaf in os.scandir(top.path):
            found.update("sha256:" + e.name for e in os.scandir(leaf.path) if len(e.name) == 64)
    return found


def rows_left(data_dir: Path) -> set[str]:
    conn = sqlite3.connect(data_dir / "store.sqlite3")
    try:
        return {digest for (digest,) in conn.execute("SELECT digest FROM artifacts")}
    finally:
        conn.close()


def check_left(data_dir: Path, referenced: set[str]) -> Json:
    """Exactly the referenced artifacts must be left, as files and as rows."""
    files = files_left(data_dir / "artifacts")
    rows = rows_left(data_dir)
    return {
        "files": len(files),
        "rows": len(rows),
        "referenced": len(referenced),
        "referenced_missing": len(referenced - files) + len(referenced - rows),
        "unreferenced_left": len(files - referenced) + len(rows - referenced),
        "ok": files == referenced and rows == referenced,
    }


# -- the child: one sweep -----------------------------------------------------------------


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise LookupError(field_name)


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _time_phases(phases: dict[str, float]) -> None:
    """Wrap the sweep's steps with timers (by name; a step that is renamed is just not timed)."""
    from mediaflow.gc import sweep as sweep_mod

    steps = getattr(sweep_mod, "_Sweep", None)
    names = ("_expire_keeps", "_read_live", "_clean_orphans", "_collect", "_enforce_cap")
    for name in (*names, "_trim_records", "_count"):
        method = getattr(steps, name, None)
        if method is not None:
            setattr(steps, name, _timed(method, name.strip("_"), phases))
    pins = getattr(sweep_mod, "read_pins", None)
    if pins is not None:
        sweep_mod.read_pins = _timed(pins, "read_pins", phases)
    # Inside collect (and cap): reading candidate pages, and deleting batches.
    from mediaflow.gc import gcdb

    delete = getattr(gcdb.GcDb, "delete", None)
    if delete is not None:
        gcdb.GcDb.delete = _timed(delete, "collect/delete batches", phases)  # type: ignore[method-assign]
    pages = getattr(gcdb.GcDb, "_pages", None)
    if pages is not None:
        gcdb.GcDb._pages = _timed_iter(pages, "collect/candidate pages", phases)  # type: ignore[method-assign]


def _timed_iter(
    func: Callable[..., Iterator[Any]], name: str, phases: dict[str, float]
) -> Callable[..., Iterator[Any]]:
    """Time each step of the iterator ``func`` returns (not what the caller does in between)."""

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        steps = func(*args, **kwargs)
        while True:
            started = time.perf_counter()
            try:
                value = next(steps)
            except StopIteration:
                return
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started
            yield value

    return timed


def _timed(func: Callable[..., Any], name: str, phases: dict[str, float]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - started

        return timed_async

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - started

    return timed


async def _inline_to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


def child_sweep(
    data_dir: str, dry_run: bool, timeout_s: float, profile_out: str | None = None, top: int = 25
) -> Json:
    from mediaflow.gc import GcSettings, sweep_artifacts
    from mediaflow.queue.sqlite import SqliteQueue

    data = Path(data_dir)
    settings = GcSettings(grace_s=0.0, interval_s=0.0)
    phases: dict[str, float] = {}
    _time_phases(phases)
    profiler = cProfile.Profile() if profile_out else None
    if profiler is not None:
        # The sweep's blocking steps run in worker threads, which cProfile does not see.
        asyncio.to_thread = _inline_to_thread
    measured: Json = {}

    async def sweep() -> Json:
        queue = SqliteQueue.in_dir(data)
        try:
            measured["rss_before"] = rss_bytes()
            cpu_before = resource.getrusage(resource.RUSAGE_SELF)
            measured["peak_reset"] = _reset_peak()
            measured["hwm_before"] = _status_kib("VmHWM") * 1024
            started = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            report = await sweep_artifacts(data, queue, settings=settings, dry_run=dry_run)
            if profiler is not None:
                profiler.disable()
            measured["seconds"] = time.perf_counter() - started
            cpu_after = resource.getrusage(resource.RUSAGE_SELF)
            measured["cpu_user_s"] = cpu_after.ru_utime - cpu_before.ru_utime
            measured["cpu_sys_s"] = cpu_after.ru_stime - cpu_before.ru_stime
            measured["hwm_after"] = _status_kib("VmHWM") * 1024
            return report.to_json()
        finally:
            await queue.close()

    with Watchdog(timeout_s, lambda: dict(measured, phases=phases)):
        report = run_async(sweep())
    result: Json = {
        **measured,
        "rss_delta": measured["hwm_after"] - measured["rss_before"],
        "phases": phases,
        "report": report,
    }
    if profiler is not None and profile_out:
        profiler.dump_stats(profile_out)
        result["hotspots"] = hotspots(profile_out, top)
        result["profile_path"] = profile_out
    return result


def hotspots(prof_path: str, top: int) -> Json:
    stats = pstats.Stats(prof_path)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = [
        {"where": _where(func), "calls": nc, "own_s": tt, "cum_s": ct}
        for func, (_cc, nc, tt, ct, _callers) in table.items()
    ]
    return {
        "total_s": stats.total_tt,  # type: ignore[attr-defined]
        "by_own": sorted(rows, key=lambda r: r["own_s"], reverse=True)[:top],
        "by_cum": sorted(
            (r for r in rows if r["where"].startswith("mediaflow/")),
            key=lambda r: r["cum_s"],
            reverse=True,
        )[:top],
    }


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    root = str(REPO_ROOT) + os.sep
    stdlib = os.path.dirname(os.__file__) + os.sep
    if filename.startswith(root):
        filename = filename[len(root) :]
    elif filename.startswith(stdlib):
        filename = "<stdlib>/" + filename[len(stdlib) :]
    return f"{filename}:{line}({name})"


def child_main(name: str, args: Json) -> int:
    """Run one measurement and print its result line; stdout carries nothing else."""
    children: dict[str, Callable[..., Json]] = {"sweep": child_sweep}
    try:
        result = children[name](**args)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    emit_result(result)
    return 0


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


# -- the report ------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarise(results: list[SizeResult]) -> Json:
    rows: list[Json] = []
    for r in results:
        sweep_s = [s["seconds"] for s in r.sweeps]
        peer_s = [p["seconds"] for p in r.peers]
        both_s = [p["seconds"] + p["rows_s"] for p in r.peers]
        phases: dict[str, float] = {}
        for name in {k for s in r.sweeps for k in s["phases"]}:
            phases[name] = _median([s["phases"].get(name, 0.0) for s in r.sweeps])
        rows.append(
            {
                "n": r.n,
                "referenced": r.referenced,
                "sweep_s": _median(sweep_s),
                "sweep_min_s": min(sweep_s, default=math.nan),
                "sweep_max_s": max(sweep_s, default=math.nan),
                "dry_s": _median([d["seconds"] for d in r.dry_runs]),
                "rss_delta": _median([s["rss_delta"] for s in r.sweeps]),
                "rss_before": _median([s["rss_before"] for s in r.sweeps]),
                "dry_rss_delta": _median([d["rss_delta"] for d in r.dry_runs]),
                "cpu_s": _median([s["cpu_user_s"] + s["cpu_sys_s"] for s in r.sweeps]),
                "cpu_sys_s": _median([s["cpu_sys_s"] for s in r.sweeps]),
                "peer_cpu_s": _median([p["cpu_user_s"] + p["cpu_sys_s"] for p in r.peers]),
                "peer_s": _median(peer_s),
                "peer_rows_s": _median(both_s),
                "peer_files_left": [p["files_left"] for p in r.peers],
                "ratio": _median(sweep_s) / _median(peer_s) if peer_s else math.nan,
                "ratio_rows": _median(sweep_s) / _median(both_s) if both_s else math.nan,
                "phases": phases,
                "checks_ok": bool(r.checks) and all(c["ok"] for c in r.checks),
                "checks": r.checks,
                "population_s": r.population.get("total_s"),
                "copy_s": _median(r.copies_s),
                "errors": r.errors,
            }
        )
    growth: Json | None = None
    if len(rows) >= 2:
        small, large = rows[0], rows[-1]
        size_ratio = large["n"] / small["n"]
        time_ratio = large["sweep_s"] / small["sweep_s"]
        exponent = math.log(time_ratio) / math.log(size_ratio) if time_ratio > 0 else math.nan
        rss_growth = large["rss_delta"] - small["rss_delta"]
        growth = {
            "from": small["n"],
            "to": large["n"],
            "size_ratio": size_ratio,
            "time_ratio": time_ratio,
            "exponent": exponent,
            "linear_ok": exponent <= LINEAR_EXPONENT,
            "rss_growth": rss_growth,
            "rss_ratio": large["rss_delta"] / small["rss_delta"] if small["rss_delta"] else None,
            "rss_ok": rss_growth <= FLAT_RSS,
        }
    return {"rows": rows, "growth": growth, "sizes": [r.to_json() for r in results]}


def render(summary: Json, notes: list[str]) -> str:
    header = (
        "N",
        "sweep s median (min-max)",
        "us/artifact",
        "CPU s (sys)",
        "dry run s",
        "peak RSS delta (before)",
        "find -delete s (CPU)",
        "find + rows s",
        "ours/find",
        "ours/(find+rows)",
        "left ok",
    )
    table = [header]
    for r in summary["rows"]:
        table.append(
            (
                f"{r['n']:,}",
                f"{r['sweep_s']:.2f} ({r['sweep_min_s']:.2f}-{r['sweep_max_s']:.2f})",
                f"{r['sweep_s'] / r['n'] * 1e6:.1f}",
                f"{r['cpu_s']:.2f} ({r['cpu_sys_s']:.2f})",
                f"{r['dry_s']:.2f}",
                f"{r['rss_delta'] / MIB:+.1f} MiB ({r['rss_before'] / MIB:.0f} MiB)",
                f"{r['peer_s']:.2f} ({r['peer_cpu_s']:.2f})",
                f"{r['peer_rows_s']:.2f}",
                f"{r['ratio']:.1f}x",
                f"{r['ratio_rows']:.1f}x",
                "yes" if r["checks_ok"] else "NO",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    growth = summary["growth"]
    if growth is not None:
        lines.append("")
        lines.append(
            f"growth {growth['from']:,} -> {growth['to']:,} (x{growth['size_ratio']:.0f} N):"
            f" sweep time x{growth['time_ratio']:.2f} (exponent {growth['exponent']:.2f},"
            f" target <= {LINEAR_EXPONENT}: {verdict(growth['linear_ok'])});"
            f" peak RSS delta {growth['rss_growth'] / MIB:+.1f} MiB"
            f" (target flat, < {FLAT_RSS / MIB:.0f} MiB: {verdict(growth['rss_ok'])})"
        )
    lines.append("")
    for r in summary["rows"]:
        phases = ", ".join(
            f"{name} {seconds:.2f}"
            for name, seconds in sorted(r["phases"].items(), key=lambda kv: -kv[1])
            if seconds >= 0.005
        )
        lines.append(f"N={r['n']:,} sweep phases (s, median): {phases}")
        lines.append(
            f"N={r['n']:,}: {r['referenced']:,} referenced; populated in"
            f" {r['population_s']:.1f} s (not timed), each copy {r['copy_s']:.1f} s;"
            f" dry run peak RSS delta {r['dry_rss_delta'] / MIB:+.1f} MiB;"
            f" find left {r['peer_files_left']} files (it takes the referenced ones too)"
        )
        for check in r["checks"]:
            if not check["ok"]:
                lines.append(f"  WRONG after the sweep: {check}")
        for error in r["errors"]:
            lines.append(f"  error: {error}")
    for size in summary["sizes"]:
        profile = size.get("profile")
        if profile and "hotspots" in profile:
            lines.append("")
            lines.append(render_profile(size["n"], profile))
    lines.extend(f"note: {n}" for n in notes)
    return "\n".join(lines)


def render_profile(n: int, profile: Json) -> str:
    spots = profile["hotspots"]
    out = [
        f"cProfile, one sweep of N={n:,} ({profile['seconds']:.1f} s under the profiler,"
        f" stats in {profile['profile_path']}); by own time:"
    ]
    for row in spots["by_own"]:
        own, cum, calls = row["own_s"], row["cum_s"], row["calls"]
        out.append(f"  {own:7.2f} s own {cum:7.2f} s cum {calls:>9}  {row['where']}")
    out.append("mediaflow functions by cumulative time:")
    for row in spots["by_cum"]:
        own, cum, calls = row["own_s"], row["cum_s"], row["calls"]
        out.append(f"  {cum:7.2f} s cum {own:7.2f} s own {calls:>9}  {row['where']}")
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gc", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100000,1000000", help="store sizes, comma-separated")
    p.add_argument("--referenced", type=float, default=0.1, help="fraction the queue references")
    p.add_argument("--runs", type=int, default=3, help="sweeps (and peer runs) per size")
    p.add_argument("--dir", help="where the stores go (default: /dev/shm, else the temp dir)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1,000 and 10,000, one run")
    p.add_argument("--seed", type=int, default=10)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per sweep child")
    p.add_argument("--profile", action="store_true", help="cProfile one sweep of the largest N")
    p.add_argument("--profile-out", help="where the profile's stats go")
    p.add_argument("--top", type=int, default=25, help="hotspots listed per ordering")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.runs = "1000,10000", 1
    try:
        args.sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s})
    except ValueError:
        p.error(f"--sizes: not a list of integers: {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 10:
        p.error("--sizes: at least one size, each >= 10")
    if not 0 < args.referenced < 1:
        p.error("--referenced must be between 0 and 1")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args.child, json.loads(args.child_args))
    base, notes = choose_base(args.dir, args.sizes)
    notes.append(f"stores under {base}")
    notes.append(
        "the peer deletes by age alone: every artifact, the referenced ones included;"
        " ours deletes exactly the unreferenced ones and checks keeps, the queue, the runs"
    )
    started = time.perf_counter()
    try:
        results = [bench_size(n, args, base) for n in args.sizes]
    finally:
        remove_tree(base)
    summary = summarise(results)
    summary["wall_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(render(summary, notes))
    progress(f"done in {summary['wall_s']:.0f} s")
    ok = all(r["checks_ok"] and not r["errors"] for r in summary["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
