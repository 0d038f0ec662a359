"""The GC bench's figures, targets and table. Pure: results in, text out.

:func:`summarise` reduces each size's runs to medians and ratios (ours against the
peer) and judges how the sweep grows from the smallest N to the largest against
the targets: time at most linear (``LINEAR_EXPONENT``), peak RSS flat
(``FLAT_RSS``). :func:`render` prints the table, the growth, the sweep's phases and
the profile's hotspots.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bench._lib.common import MIB, Json, verdict
from bench.gc.run import SizeResult

# Targets: time exponent (log time ratio / log size ratio) and RSS growth, smallest to largest N.
LINEAR_EXPONENT = 1.1
FLAT_RSS = 16 * MIB


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
