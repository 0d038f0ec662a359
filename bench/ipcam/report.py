"""The IP camera bench's report: a markdown table per step, the targets, the notes. Pure.

Every cell is the median over runs with the range in brackets when there is more than
one run. CPU is in cores (CPU seconds per wall second) per camera; latencies are in
milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.ipcam.cpu import MACHINE
from bench.ipcam.flow import IpcamFlow
from bench.ipcam.judge import (
    CAMERAS_TARGET,
    CPU_BOUND,
    JUDGED_PEER,
    Step,
    checks,
    judged_n,
    largest_sustained,
    latency,
    peer_kept_up,
    peer_lost,
    peer_per_camera,
    per_camera,
    ratio,
    spread,
    sustained,
    verdict,
)
from bench.ipcam.peer import VARIANTS
from bench.ipcam.run import MediaflowRun

Show = Callable[[float], str]


def cores(value: float) -> str:
    return f"{value:.3f}"


def times(value: float) -> str:
    return f"{value:.2f}x"


def ms(value: float) -> str:
    return f"{value * 1000:.0f}"


def cell(values: Sequence[float | None], show: Show) -> str:
    found = spread(values)
    if found is None:
        return "—"
    mid, low, high = found
    known = sum(v is not None for v in values)
    return show(mid) if known < 2 else f"{show(mid)} ({show(low)}-{show(high)})"


def _server(step: Step) -> float | None:
    run = step.mediaflow
    window = None if run is None else run.idle
    return None if window is None else window.of("server")


def _machine(step: Step) -> float | None:
    run = step.mediaflow
    return None if run is None or run.idle is None else run.idle.of("machine")


def _lost(step: Step) -> float | None:
    run = step.mediaflow
    if run is None or not run.records:
        return None
    return float(sum(r.clips_check.missing if r.clips_check else 1 for r in run.records))


def table(
    flows: Mapping[int, IpcamFlow], steps: Sequence[Step], variants: Sequence[str]
) -> list[str]:
    """The step table (markdown), one row per camera count."""
    header = ["cameras", "mediaflow CPU/camera"]
    for variant in variants:
        header += [f"{variant} CPU/camera", f"ratio vs {variant}"]
    header += [
        "mediaflow CPU/camera, all watched",
        "RTSP server (cores)",
        "machine busy (cores)",
        "live latency p50 / p95 (ms)",
        "slices lost (clips)",
        "sustained runs",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for n, flow in flows.items():
        at = [step for step in steps if step.cameras == n]
        row = [str(n), cell([per_camera(s.mediaflow) for s in at], cores)]
        for variant in variants:
            row.append(cell([peer_per_camera(s.peers.get(variant)) for s in at], cores))
            row.append(cell([ratio(s, variant) for s in at], times))
        p50 = cell([latency(s.mediaflow, 50) for s in at], ms)
        p95 = cell([latency(s.mediaflow, 95) for s in at], ms)
        row += [
            cell([per_camera(s.mediaflow, "live") for s in at], cores),
            cell([_server(s) for s in at], cores),
            cell([_machine(s) for s in at], lambda v: f"{v:.2f}"),
            f"{p50} / {p95}",
            cell([_lost(s) for s in at], lambda v: f"{v:.0f}"),
            f"{sum(sustained(flow, s.mediaflow) for s in at)} of {len(at)}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def targets(flows: Mapping[int, IpcamFlow], steps: Sequence[Step]) -> list[tuple[str, str, str]]:
    """(target, verdict, detail) for the issue's three targets."""
    runs = sorted({step.run for step in steps})
    per_run = {run: largest_sustained(flows, [s for s in steps if s.run == run]) for run in runs}
    judged_at, why = judged_n(flows, steps)
    at = [s for s in steps if s.cameras == judged_at]
    ratios = [ratio(s) for s in at]
    shown = ", ".join("—" if r is None else times(r) for r in ratios)
    out = [
        (
            f"mediaflow's CPU per camera ≤ {CPU_BOUND:g}x the peer's ({JUDGED_PEER}, "
            f"at {judged_at} cameras)",
            verdict(ratios, CPU_BOUND, larger_is_better=False),
            f"judged where {why}; per run: {shown}",
        )
    ]
    counts = list(per_run.values())
    enough = bool(counts) and all(c is not None and c >= CAMERAS_TARGET for c in counts)
    said = "MET" if enough and len(runs) >= 3 else "MISSED"
    if enough and len(runs) < 3:
        said = f"met in {len(runs)} run(s); 3 needed to count"
    largest = max(flows, default=0)
    if largest < CAMERAS_TARGET:
        said = f"not measured (largest step {largest})"
    out.append(
        (
            f"≥ {CAMERAS_TARGET} cameras sustained on 2 cores",
            said,
            f"largest sustained per run: {counts}",
        )
    )
    lost = [s for s in steps if s.mediaflow is not None and _lost(s)]
    unchecked = [s for s in steps if s.mediaflow is None or not s.mediaflow.records]
    said = "MET" if not lost and not unchecked and len(runs) >= 3 else "MISSED"
    if not lost and not unchecked and len(runs) < 3:
        said = f"met in {len(runs)} run(s); 3 needed to count"
    detail = f"{len(steps)} steps checked; not checked: "
    detail += ", ".join(f"run {s.run} N={s.cameras}" for s in unchecked) or "none"
    detail += "; with a loss: " + (", ".join(f"run {s.run} N={s.cameras}" for s in lost) or "none")
    out.append(("every video packet the server sent is in the clips", said, detail))
    return out


def notes(flows: Mapping[int, IpcamFlow], steps: Sequence[Step]) -> list[str]:
    """Failed checks, start-up skips, errors, peer losses and the machine's load."""
    found: list[str] = []
    for step in steps:
        tag = f"- run {step.run}, {step.cameras} cameras:"
        run = step.mediaflow
        if run is None:
            found.append(f"{tag} mediaflow not measured")
            continue
        for check in checks(flows[step.cameras], run):
            if not check.ok:
                found.append(f"{tag} FAILED {check.name}: {check.detail}")
        holes = [
            f"{r.node} {at / run.slices_per_s:.1f} s ({n})"
            for r in run.records
            if r.clips_check
            for at, n in r.clips_check.holes
        ]
        if holes and run.slices_per_s:
            found.append(f"{tag} clips' holes (stream time, slices): {', '.join(holes[:8])}")
        if run.skip_lines:
            found.append(
                f"{tag} {len(run.skip_lines)} frames_skipped warnings, first: "
                f"{run.skip_lines[0].split('WARNING ')[-1]}"
            )
        found += [f"{tag} log: {line}" for line in run.log_errors[:3]]
        windows = [("no viewer", run.idle), ("watched", run.live)]
        for variant, peer in step.peers.items():
            windows.append((variant, peer.window))
            found += [f"{tag} {variant}: {error}" for error in peer.errors]
            lost = peer_lost(peer)
            if lost:
                found.append(f"{tag} {variant}: {lost} camera(s) with segments not unbroken")
            jpegs = [c.jpegs for c in peer.outcomes]
            if not peer_kept_up(peer, flows[step.cameras].fps):
                found.append(f"{tag} {variant} did NOT keep up: its CPU per camera is a floor")
            if jpegs and peer.window is not None:
                found.append(
                    f"{tag} {variant}: JPEGs per camera in the window "
                    f"{min(jpegs)}-{max(jpegs)} over {peer.window.seconds:.1f} s"
                )
        busy = ", ".join(
            f"{name} {w.cores[MACHINE]:.2f}"
            for name, w in windows
            if w is not None and MACHINE in w.cores
        )
        players = run.live.of("players") if run.live else None
        extra = f"; the players used {players:.3f} cores" if players is not None else ""
        found.append(f"{tag} machine busy cores: {busy}{extra}")
    return found


def report(
    flows: Mapping[int, IpcamFlow],
    steps: Sequence[Step],
    heading: str,
    profiled: MediaflowRun | None = None,
) -> str:
    """The whole report; ``profiled``: the ``--profile`` phase, not judged."""
    variants = sorted({v for step in steps for v in step.peers}, key=list(VARIANTS).index)
    lines = [heading, "", *table(flows, steps, variants), ""]
    lines += [f"- {VARIANTS[v]} ({v})" for v in variants]
    best = largest_sustained(flows, steps)
    at = [s for s in steps if s.cameras == best]
    lines += [
        "",
        f"Largest N sustained in every run: {best}; live latency there (part downloaded - "
        f"capture of its last frame): p50 {cell([latency(s.mediaflow, 50) for s in at], ms)}"
        f" ms, p95 {cell([latency(s.mediaflow, 95) for s in at], ms)} ms",
        "",
        "Targets (every run within the bound with 10 % of it to spare, over ≥ 3 runs)",
        "",
    ]
    lines += [f"- {name}: {said} ({detail})" for name, said, detail in targets(flows, steps)]
    lines += ["", "Notes", "", *notes(flows, steps)]
    if profiled is not None:
        lines += ["", f"Where the time goes: {profiled.cameras} cameras, a phase of its own", ""]
        if profiled.profile is not None:
            lines += ["    " + line for line in profiled.profile.lines()]
        lines += [f"- {note}" for note in (profiled.profile_error, *profiled.errors) if note]
    return "\n".join(lines)


def to_json(flows: Mapping[int, IpcamFlow], steps: Sequence[Step]) -> dict[str, Any]:
    body: dict[str, Any] = {"steps": []}
    for step in steps:
        flow = flows[step.cameras]
        run = step.mediaflow
        body["steps"].append(
            {
                "run": step.run,
                "cameras": step.cameras,
                "mediaflow": None if run is None else run.to_json(),
                "checks": []
                if run is None
                else [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks(flow, run)],
                "sustained": sustained(flow, run),
                "cpu_per_camera": per_camera(run),
                "peers": {
                    v: p.to_json() | {"cpu_per_camera": peer_per_camera(p)}
                    for v, p in step.peers.items()
                },
                "ratio": {v: ratio(step, v) for v in step.peers},
                "latency_p50": latency(run, 50),
                "latency_p95": latency(run, 95),
            }
        )
    body["largest_sustained"] = largest_sustained(flows, steps)
    body["targets"] = [
        {"target": t, "verdict": v, "detail": d} for t, v, d in targets(flows, steps)
    ]
    body["met"] = all(v == "MET" for _, v, _ in targets(flows, steps))
    return body
