"""Serving artifacts over HTTP: mediaflow against nginx (and aiohttp's stock
``FileResponse``), measured with wrk in the same run.

Run from the repository root (about 1-2 minutes)::

    python -m bench.serve                   # the table
    python -m bench.serve --json            # the numbers as JSON on stdout
    python -m bench.serve --duration 10 --skip stock,put

Needs Debian's ``wrk`` and ``nginx`` (``nginx-light`` is enough); a missing
one turns its lines into ``unavailable`` and the rest still runs. Every
server runs in its own process on 127.0.0.1 with the same files: mediaflow
as ``mediaflow serve`` over a temporary data directory; nginx
(``sendfile on; tcp_nopush off;``, one worker, access log off) over a root
whose ``artifacts/sha256:<hex>`` entries are hard links to the store's
files, so every server answers the same URLs from the same inodes.

Two more servers give the ratios their context: aiohttp's stock
``web.FileResponse`` over the same root, and an aiohttp "ceiling" that answers
from a constant in memory (no file at all): what a handler going through
aiohttp's own response path can reach here (its 64 KiB body sits in the CPU
cache; random 64 KiB reads of a 64 MiB file cost ~12 us more per request
here, for nginx too). All three Python servers run on the event loop the
commands use (uvloop unless ``MEDIAFLOW_LOOP`` says otherwise). The machine
is shared and its load drifts, so all servers run at once and take turns, rep
by rep, on each workload; the best rep of each is kept.

Workloads (wrk, ``--threads`` 1 and ``--connections`` 16, ``--duration`` s
each, after a 1 s warm-up; a Lua script picks each request's target):

1. **64 KiB ranges**: ``Range: bytes=a-b`` at random 64 KiB-aligned offsets
   of a 64 MiB artifact; requests/s.
2. **4 KiB artifacts**: whole GETs of 64 different 4 KiB artifacts, at random; requests/s.
3. **whole 64 MiB GETs** (4 connections); bytes/s.
4. **1 GiB streamed PUT**: one chunked upload to mediaflow from a reused
   1 MiB buffer; the server process's RSS is sampled every 20 ms, growth =
   highest sample - the sample before the upload.

Every wrk run counts non-2xx answers and socket errors; a run with any is
reported as failed rather than fast. Targets: >= 60 % of nginx's requests/s
on 64 KiB ranges, >= 30 % on 4 KiB artifacts, >= 90 % of its bytes/s on
whole files, < 32 MiB RSS growth over the PUT.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench._lib.common import MIB, fmt_rate, verdict
from bench._lib.loop import loop_name
from bench.serve.load import (
    BIG_SIZE,
    RANGE_SIZE,
    SMALL_COUNT,
    SMALL_SIZE,
    WrkResult,
    lua_scripts,
    measure_put,
    run_wrk,
)
from bench.serve.servers import (
    CEILING_SERVER,
    free_port,
    start_mediaflow,
    start_nginx,
    start_stock,
    stop,
)
from mediaflow.store import ArtifactStore

PUT_SIZE = 1024 * MIB

TARGETS = {"ranges": 0.60, "small": 0.30, "whole": 0.90}
PUT_RSS_TARGET = 32 * MIB

# -- files -----------------------------------------------------------------------------


def make_files(data_dir: Path, nginx_root: Path) -> tuple[str, list[str]]:
    """Store the artifacts; link them under ``nginx_root/artifacts/<digest>``."""
    store = ArtifactStore(data_dir)
    rng = random.Random(7)
    big = store.save_sync(_random_chunks(rng, BIG_SIZE), "video/mp4").digest
    small = [
        store.save_sync(rng.randbytes(SMALL_SIZE), "image/jpeg").digest for _ in range(SMALL_COUNT)
    ]
    links = nginx_root / "artifacts"
    links.mkdir(parents=True)
    for digest in [big, *small]:
        os.link(store.path_for(digest), links / digest)
    store.close()
    return big, small


def _random_chunks(rng: random.Random, size: int) -> Iterator[bytes]:
    for _ in range(size // MIB):
        yield rng.randbytes(MIB)


# -- the run -----------------------------------------------------------------------------


def check_answers(port: int, big: str, small: list[str], data_dir: Path) -> None:
    """Before timing anything: the server returns the right bytes for a range and a file."""
    store = ArtifactStore(data_dir)
    try:
        want = store.path_for(big).read_bytes()[RANGE_SIZE : 2 * RANGE_SIZE]
        small_bytes = store.path_for(small[0]).read_bytes()
    finally:
        store.close()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/artifacts/{big}",
        headers={"Range": f"bytes={RANGE_SIZE}-{2 * RANGE_SIZE - 1}"},
    )
    with urllib.request.urlopen(request) as response:
        if response.status != 206 or response.read() != want:
            raise RuntimeError(f"port {port}: wrong answer to a range request")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/artifacts/{small[0]}") as response:
        if response.read() != small_bytes:
            raise RuntimeError(f"port {port}: wrong bytes for a small artifact")


def run(args: argparse.Namespace) -> dict[str, Any]:
    skip = set(filter(None, args.skip.split(",")))
    results: dict[str, Any] = {"servers": {}, "put": None, "notes": []}
    have_wrk = shutil.which("wrk") is not None
    have_nginx = shutil.which("nginx") is not None or os.path.exists("/usr/sbin/nginx")
    if not have_wrk:
        results["notes"].append("wrk: unavailable (apt-get install wrk)")
    if not have_nginx:
        results["notes"].append("nginx: unavailable (apt-get install nginx-light)")
    loop = loop_name()
    results["notes"].append(f"Python servers on {'asyncio' if loop == 'asyncio' else loop}'s loop")
    with tempfile.TemporaryDirectory(prefix="mf-bench-serve-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # nginx's worker runs as an unprivileged user and must read it
        data_dir, root = workdir / "data", workdir / "root"
        print("making 64 MiB + 64 x 4 KiB artifacts ...", file=sys.stderr)
        big, small = make_files(data_dir, root)
        scripts = lua_scripts(workdir, big, small)
        starters: list[tuple[str, Callable[[int], subprocess.Popen[bytes]]]] = [
            ("mediaflow", lambda p: start_mediaflow(data_dir, p))
        ]
        if have_nginx and "nginx" not in skip:
            starters.append(("nginx", lambda p: start_nginx(workdir, root, p)))
        if "stock" not in skip:
            starters.append(("stock", lambda p: start_stock(workdir, root, p)))
        if "ceiling" not in skip:
            starters.append(
                ("ceiling", lambda p: start_stock(workdir, root, p, CEILING_SERVER, "ceiling"))
            )
        running: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
        try:
            for name, starter in starters if have_wrk else []:
                port = free_port()
                running[name] = (port, starter(port))
                if name != "ceiling":
                    check_answers(port, big, small, data_dir)
            results["servers"] = bench_all(
                {name: port for name, (port, _) in running.items()}, scripts, args
            )
        finally:
            for _, proc in running.values():
                stop(proc)
        if "put" not in skip:
            port = free_port()
            proc = start_mediaflow(data_dir, port)
            try:
                print(f"mediaflow: streamed PUT of {args.put_mib} MiB ...", file=sys.stderr)
                results["put"] = measure_put(port, proc.pid, args.put_mib * MIB)
            finally:
                stop(proc)
    return results


def bench_all(
    ports: dict[str, int], scripts: dict[str, Path], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Each workload on every server, the servers taking turns rep by rep.

    The machine is shared and its load drifts: interleaving puts every server
    under the same drift, so the ratios stay fair. The best rep of each is kept.
    """
    out: dict[str, dict[str, Any]] = {name: {} for name in ports}
    for workload, script in scripts.items():
        connections = 4 if workload == "whole" else args.connections
        names = [n for n in ports if not (n == "ceiling" and workload == "whole")]
        for name in names:  # warm-up: page cache, open files, the servers' own caches
            run_wrk(
                ports[name], script, duration_s=1, connections=connections, threads=args.threads
            )
        best: dict[str, WrkResult] = {}
        for rep in range(args.reps):
            order = names if rep % 2 == 0 else names[::-1]
            for name in order:
                print(f"{workload}: {name} (rep {rep + 1}/{args.reps}) ...", file=sys.stderr)
                result = run_wrk(
                    ports[name],
                    script,
                    duration_s=args.duration,
                    connections=connections,
                    threads=args.threads,
                )
                if name not in best or result.requests_s > best[name].requests_s:
                    best[name] = result
        for name, result in best.items():
            out[name][workload] = asdict(result)
    return out


def render(results: dict[str, Any]) -> str:
    servers = results["servers"]
    mf = servers.get("mediaflow", {})
    ngx = servers.get("nginx", {})
    stock = servers.get("stock", {})
    ceiling = servers.get("ceiling", {})
    rows = [
        (
            "workload",
            "mediaflow",
            "nginx",
            "aiohttp FileResponse",
            "aiohttp ceiling",
            "mf/nginx",
            "target",
            "",
        )
    ]
    for workload, label, unit in (
        ("ranges", "64 KiB ranges, req/s", "requests_s"),
        ("small", "4 KiB artifacts, req/s", "requests_s"),
        ("whole", "whole 64 MiB, MiB/s", "bytes_s"),
    ):
        scale = MIB if unit == "bytes_s" else 1

        def cell(d: dict[str, Any], w: str = workload, u: str = unit, s: float = scale) -> str:
            if w not in d:
                return "—"
            text = fmt_rate(d[w][u] / s)
            return text if d[w]["errors"] == 0 else f"{text} ({d[w]['errors']} errors!)"

        ratio = None
        if workload in mf and workload in ngx and ngx[workload][unit]:
            ratio = mf[workload][unit] / ngx[workload][unit]
        ok = None if ratio is None else ratio >= TARGETS[workload] and mf[workload]["errors"] == 0

        def vs_nginx(d: dict[str, Any], w: str = workload, u: str = unit) -> str:
            if w not in d or w not in ngx or not ngx[w][u]:
                return ""
            return f" ({d[w][u] / ngx[w][u]:.0%})"

        rows.append(
            (
                label,
                cell(mf),
                cell(ngx),
                cell(stock) + vs_nginx(stock),
                cell(ceiling) + vs_nginx(ceiling),
                "—" if ratio is None else f"{ratio:.0%}",
                f">= {TARGETS[workload]:.0%}",
                verdict(ok),
            )
        )
    put = results.get("put")
    if put is not None:
        growth = put["rss_growth"]
        rows.append(
            (
                f"PUT {put['bytes'] // MIB} MiB: RSS growth",
                f"{growth / MIB:.1f} MiB",
                "",
                "",
                "",
                f"{put['bytes_s'] / MIB:.0f} MiB/s",
                "< 32 MiB",
                verdict(growth < PUT_RSS_TARGET),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.extend(f"note: {n}" for n in results["notes"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.serve", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run (5)")
    parser.add_argument("--reps", type=int, default=2, help="wrk runs per workload, best kept (2)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (16)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (1)")
    parser.add_argument("--put-mib", type=int, default=PUT_SIZE // MIB, help="PUT size (1024)")
    parser.add_argument("--skip", default="", help="comma-separated: nginx,stock,ceiling,put")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=2) if args.json else render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
