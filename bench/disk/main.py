"""Disk use of ``mediaflow demo`` over time, with a disk cap and without one.

``python -m bench.disk [--for 600] [--cap 50MB] [--every 30]`` runs the bundled
demo twice at the same time, each in a fresh data directory: once with
``ARTIFACT_MAX_BYTES`` (the cap) and once without (the peer: what any tool that
never deletes holds after the same time). Every ``--every`` seconds it samples
both directories: the artifact files' bytes (a walk, not the store's counter),
the store's counter, and the SQLite files with their WALs. The table gives both
series side by side and the ratio; the last row is what a user sees after
``--for`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._lib.common import REPO_ROOT
from mediaflow.gc import format_bytes, parse_bytes

DB_FILES = ("queue.sqlite3", "store.sqlite3", "state.sqlite3")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_demo(data: Path, seconds: float, cap: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop("ARTIFACT_MAX_BYTES", None)
    if cap is not None:
        env["ARTIFACT_MAX_BYTES"] = cap
    command = [sys.executable, "-m", "mediaflow", "demo", "--for", str(seconds)]
    command += ["--data", str(data), "--port", str(free_port()), "-q"]
    log = open(data.parent / f"{data.name}.log", "wb")  # noqa: SIM115 - lives with the child
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)


def sample(data: Path) -> dict[str, Any]:
    """Bytes on disk under ``data``: artifact files, the store's counter, each database."""
    files = 0
    count = 0
    for root, _dirs, names in os.walk(data / "artifacts"):
        for name in names:
            try:
                files += os.lstat(os.path.join(root, name)).st_size
                count += 1
            except FileNotFoundError:
                continue
    databases = 0
    for name in DB_FILES:
        for suffix in ("", "-wal", "-shm"):
            path = data / (name + suffix)
            databases += path.stat().st_size if path.exists() else 0
    counter = None
    if (data / "store.sqlite3").exists():
        with sqlite3.connect(data / "store.sqlite3", timeout=30) as db:
            row = db.execute("SELECT bytes FROM store_totals WHERE id = 1").fetchone()
            counter = int(row[0]) if row else None
    return {"files": files, "count": count, "counter": counter, "databases": databases}


def both(elapsed: float, capped: Path, uncapped: Path) -> dict[str, Any]:
    return {"t": elapsed, "capped": sample(capped), "uncapped": sample(uncapped)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.disk", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--for", dest="seconds", type=float, default=600.0)
    parser.add_argument("--cap", default="50MB")
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cap_bytes = parse_bytes(args.cap)
    base = Path(tempfile.mkdtemp(prefix="mediaflow-disk-"))
    capped, uncapped = base / "capped", base / "uncapped"
    children = [
        start_demo(capped, args.seconds, args.cap),
        start_demo(uncapped, args.seconds, None),
    ]
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        while any(child.poll() is None for child in children):
            time.sleep(min(args.every, 1.0))
            elapsed = time.monotonic() - started
            if not rows or elapsed - rows[-1]["t"] >= args.every:
                rows.append(both(elapsed, capped, uncapped))
                print(f"t={elapsed:5.0f}s capped {format_bytes(rows[-1]['capped']['files'])}"
                      f" uncapped {format_bytes(rows[-1]['uncapped']['files'])}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
                child.wait(30)
    rows.append(both(time.monotonic() - started, capped, uncapped))
    codes = [child.returncode for child in children]
    if args.json:
        print(json.dumps({"cap": cap_bytes, "exit": codes, "rows": rows}))
        return 0 if codes == [0, 0] else 1
    print(f"demo for {args.seconds:.0f} s, ARTIFACT_MAX_BYTES={args.cap} ({cap_bytes} B); "
          f"exit codes {codes}; logs in {base}")  # fmt: skip
    print(f"{'t (s)':>6} | {'capped: artifacts':>18} | {'files':>6} | {'dbs+WAL':>9} | "
          f"{'uncapped: artifacts':>20} | {'files':>6} | {'dbs+WAL':>9} | ratio")  # fmt: skip
    for row in rows:
        c, u = row["capped"], row["uncapped"]
        ratio = c["files"] / u["files"] if u["files"] else float("nan")
        print(f"{row['t']:6.0f} | {format_bytes(c['files']):>18} | {c['count']:6d} | "
              f"{format_bytes(c['databases']):>9} | {format_bytes(u['files']):>20} | "
              f"{u['count']:6d} | {format_bytes(u['databases']):>9} | {ratio:5.2f}")  # fmt: skip
    peak = max(row["capped"]["files"] for row in rows)
    print(f"capped peak {format_bytes(peak)} = {peak / cap_bytes:.2f} of the cap")
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
