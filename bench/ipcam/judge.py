"""The IP camera bench's verdicts: did a step sustain its cameras, and the issue's targets.

Pure: results in, checks and numbers out (:mod:`bench.ipcam.report` renders them).

A step (``N`` cameras, one run) is **sustained** when every :func:`checks` passes:

- *no packet lost*: every camera's clips, and its segments, hold the file's slices as
  one unbroken run from its first slice (:mod:`bench.ipcam.loss`);
- *nothing skipped*: mediaflow's capture losses (``frames_skipped``: the capture bridge,
  the JPEG lane, the segment lane) did not move over the judged span, from the start
  of the no-viewer window to the end of the live one, and no segment is marked as
  following a gap;
- *JPEGs at fps*: each camera made ``fps`` JPEGs a second over the span, one item of
  slack either way (more is a camera catching up on late ones); at every look its
  newest JPEG was captured at most ``JPEG_AGE_S`` before; *segments* at least one per
  ``segment_s``, one of slack;
- *clips keep up*: at the end no recorder (and no witness) has more than
  ``BACKLOG_SLACK`` items waiting, and no more segments than a clip's worth plus one
  are not yet in a clip when the run stops;
- *live*: every camera's player fetched parts, with no hole and no HTTP error;
- *headroom*: mediaflow and the RTSP server together used at most ``HEADROOM`` of the
  machine's cores in the no-viewer window (beyond that the machine is saturated and
  the step says nothing about real time);
- mediaflow logged no ERROR line and its phase had no error.

Targets are judged like the other benches': MET only when every run meets the bound
with ``MARGIN`` of it to spare and there are ``MIN_RUNS`` runs (BORDERLINE: a run in
the margin).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench._lib.common import percentile
from bench._lib.look import Check, Snapshot
from bench.ipcam.flow import IpcamFlow
from bench.ipcam.peer import PeerRun
from bench.ipcam.run import MediaflowRun

HEADROOM = 0.9  # of the machine's cores, for mediaflow + the RTSP server
JPEG_AGE_S = 3.0  # the newest JPEG at a look: a period (1 s), a group of pictures, slack
BACKLOG_SLACK = 1
MARGIN = 0.10
MIN_RUNS = 3
CPU_BOUND = 1.2  # mediaflow's CPU per camera / the peer's
CAMERAS_TARGET = 16
JUDGED_PEER = "ffmpeg"  # the command line


@dataclass
class Step:
    """One step of one run: ``cameras`` cameras, mediaflow and each peer variant."""

    run: int
    cameras: int
    mediaflow: MediaflowRun | None = None
    peers: dict[str, PeerRun] = field(default_factory=dict)


def _delta(a: Snapshot, b: Snapshot, key: str) -> int:
    return b.emitted.get(key, 0) - a.emitted.get(key, 0)


def _losses(snap: Snapshot, camera: str) -> int:
    return sum(n for key, n in snap.losses.items() if key.startswith(f"{camera}/"))


def checks(flow: IpcamFlow, run: MediaflowRun, cores: int | None = None) -> list[Check]:
    """The sustained checks of one mediaflow phase (module doc)."""
    found: list[Check] = []
    stopped = run.exit_code in (0, None)
    said = "; ".join(run.errors) or "no error"
    found.append(Check("phase ran", not run.errors and stopped, f"{said}; exit {run.exit_code}"))
    found.append(Check("no ERROR logged", not run.log_errors, f"{len(run.log_errors)} lines"))
    broken = [r.node for r in run.records if not (r.clips_check and r.clips_check.unbroken)]
    broken_segments = [
        r.node for r in run.records if not (r.segments_check and r.segments_check.unbroken)
    ]
    missing = sum(r.clips_check.missing for r in run.records if r.clips_check)
    found.append(
        Check(
            "no packet lost (clips and segments vs the file)",
            len(run.records) == flow.cameras and not broken and not broken_segments,
            f"{len(run.records)} cameras checked; clips broken: {broken or 'none'}, "
            f"segments broken: {broken_segments or 'none'}; {missing} slices missing",
        )
    )
    marked = sum(r.discontinuities for r in run.records)
    found.append(Check("no segment after a gap", marked == 0, f"{marked} marked"))
    if len(run.looks) >= 2:
        found += _window_checks(flow, run.looks[0], run.looks[-1])
    else:
        found.append(Check("looked at the flow", False, "no snapshots"))
    found.append(_fresh(flow, run))
    tails = {r.node: r.tail_segments for r in run.records}
    allowed = math.ceil(flow.clip_s / flow.segment_s) + 1
    longest = max(tails.values(), default=0)
    found.append(
        Check(
            "clips keep up with segments",
            longest <= allowed,
            f"at most {longest} segments not in a clip at the stop (bound {allowed})",
        )
    )
    if run.players or run.live is not None:
        found.append(_live_check(flow, run))
    found.append(_headroom(run, cores or os.cpu_count() or 1))
    return found


def _window_checks(flow: IpcamFlow, a: Snapshot, b: Snapshot) -> list[Check]:
    span = b.t - a.t
    lost = {cam: _losses(b, cam) - _losses(a, cam) for cam in flow.camera_nodes}
    total = sum(_losses(b, cam) for cam in flow.camera_nodes)
    jpegs = {cam: _delta(a, b, f"{cam}.image") for cam in flow.camera_nodes}
    want = span * flow.fps
    off = {cam: n for cam, n in jpegs.items() if abs(n - want) > 1.0 + 1e-9}
    segments = {cam: _delta(a, b, f"{cam}.video") for cam in flow.camera_nodes}
    few = {cam: n for cam, n in segments.items() if n < span / flow.segment_s - 1}
    waiting = {node: n for node, n in b.ready.items() if n > BACKLOG_SLACK}
    return [
        Check(
            "nothing skipped in the window",
            not any(lost.values()),
            f"{sum(lost.values())} packets ({total} since the start, start-up included)",
        ),
        Check(
            f"JPEGs at {flow.fps:g}/s",
            not off,
            f"{min(jpegs.values(), default=0)}-{max(jpegs.values(), default=0)} per camera "
            f"in {span:.1f} s (want {want:.1f} ± 1)",
        ),
        Check(
            "segments keep coming",
            not few,
            f"{min(segments.values(), default=0)}+ per camera in {span:.1f} s",
        ),
        Check(
            "no backlog at the end",
            not waiting,
            f"waiting: {waiting or 'none'} (slack {BACKLOG_SLACK})",
        ),
    ]


def _fresh(flow: IpcamFlow, run: MediaflowRun) -> Check:
    """Every camera's newest JPEG, at every look, at most ``JPEG_AGE_S`` old."""
    seen = [ages.get(cam) for ages in run.ages for cam in flow.camera_nodes]
    known = [age for age in seen if age is not None]
    if not known:
        return Check("JPEGs fresh", False, "no JPEG age seen")
    oldest = max(known)
    return Check(
        "JPEGs fresh",
        oldest <= JPEG_AGE_S and len(known) == len(seen),
        f"oldest newest-JPEG at a look {oldest:.1f} s (bound {JPEG_AGE_S:g} s); "
        f"the API answered in up to {max(run.look_s, default=0.0):.1f} s",
    )


def _live_check(flow: IpcamFlow, run: MediaflowRun) -> Check:
    bad: list[str] = []
    for cam in flow.camera_nodes:
        stats = run.players.get(cam)
        if stats is None or "error" in stats:
            bad.append(f"{cam}: {stats.get('error') if stats else 'not watched'}")
        elif not stats["parts"] or stats["holes"] or stats["errors"]:
            bad.append(
                f"{cam}: {stats['parts']} parts, {stats['holes']} holes, "
                f"{len(stats['errors'])} errors"
            )
    return Check("every camera watched live", not bad, "; ".join(bad[:3]) or "all followed")


def _headroom(run: MediaflowRun, cores: int) -> Check:
    if run.idle is None:
        return Check("headroom", False, "no CPU window")
    used = (run.idle.of("mediaflow") or 0.0) + (run.idle.of("server") or 0.0)
    bound = HEADROOM * cores
    return Check(
        "headroom",
        used <= bound,
        f"mediaflow + server {used:.2f} cores (bound {bound:.2f} of {cores})",
    )


def sustained(flow: IpcamFlow, run: MediaflowRun | None, cores: int | None = None) -> bool:
    return run is not None and all(check.ok for check in checks(flow, run, cores))


# -- numbers ------------------------------------------------------------------------


def per_camera(run: MediaflowRun | None, window: str = "idle") -> float | None:
    """mediaflow's cores per camera in the ``idle`` or ``live`` window."""
    found = None if run is None else (run.idle if window == "idle" else run.live)
    cores = None if found is None else found.of("mediaflow")
    return None if cores is None or run is None else cores / run.cameras


def peer_per_camera(peer: PeerRun | None) -> float | None:
    cores = None if peer is None or peer.window is None else peer.window.of("peer")
    return None if cores is None or peer is None else cores / peer.cameras


def ratio(step: Step, variant: str = JUDGED_PEER) -> float | None:
    mine, theirs = per_camera(step.mediaflow), peer_per_camera(step.peers.get(variant))
    return mine / theirs if mine is not None and theirs else None


def latencies(run: MediaflowRun | None) -> list[float]:
    if run is None:
        return []
    return sorted(x for stats in run.players.values() for x in stats.get("latencies", []))


def latency(run: MediaflowRun | None, q: float) -> float | None:
    values = latencies(run)
    return percentile(values, q) if values else None


def peer_kept_up(peer: PeerRun | None, fps: float) -> bool:
    """Whether a peer phase kept real time: every ffmpeg wrote ``fps`` JPEGs a second
    over the window (one of slack) and its segments are one unbroken run of its file.
    A saturated machine starves the peer, and its CPU then says nothing per camera."""
    if peer is None or peer.window is None or peer.errors or not peer.outcomes:
        return False
    least = peer.window.seconds * fps - 1.0 - 1e-9
    return all(c.jpegs >= least and c.check and c.check.unbroken for c in peer.outcomes)


def peer_lost(peer: PeerRun | None) -> int | None:
    """Cameras whose peer segments are not one unbroken run of the file."""
    if peer is None:
        return None
    return sum(not (c.check and c.check.unbroken) for c in peer.outcomes)


# -- across runs -----------------------------------------------------------------------


def largest_sustained(
    flows: Mapping[int, IpcamFlow], steps: Sequence[Step], cores: int | None = None
) -> int | None:
    """The largest ``N`` that every run sustained (a run without that step fails it)."""
    runs = {step.run for step in steps}
    good = []
    for n, flow in flows.items():
        at_n = [step for step in steps if step.cameras == n]
        if len(at_n) == len(runs) and all(sustained(flow, s.mediaflow, cores) for s in at_n):
            good.append(n)
    return max(good, default=None)


def judged_n(
    flows: Mapping[int, IpcamFlow], steps: Sequence[Step], cores: int | None = None
) -> tuple[int | None, str]:
    """Where the CPU ratio is judged, and why there: the largest ``N`` at which, in every
    run, mediaflow was sustained and the judged peer kept up; else the largest at which
    the peer kept up; else the largest measured."""
    runs = {step.run for step in steps}

    def every(n: int, ok: Callable[[Step], bool]) -> bool:
        at_n = [step for step in steps if step.cameras == n]
        return len(at_n) == len(runs) and all(ok(step) for step in at_n)

    def peer_ok(step: Step) -> bool:
        return peer_kept_up(step.peers.get(JUDGED_PEER), flows[step.cameras].fps)

    def both_ok(step: Step) -> bool:
        return peer_ok(step) and sustained(flows[step.cameras], step.mediaflow, cores)

    both = [n for n in flows if every(n, both_ok)]
    if both:
        return max(both), "mediaflow sustained and the peer kept up in every run"
    peer_only = [n for n in flows if every(n, peer_ok)]
    if peer_only:
        return max(peer_only), "the peer kept up in every run (mediaflow was not sustained)"
    return max(flows, default=None), "neither kept up in every run anywhere"


def verdict(values: Sequence[float | None], bound: float, *, larger_is_better: bool) -> str:
    """MET / BORDERLINE / MISSED over runs (module doc); a run without the value fails."""
    known = [v for v in values if v is not None]
    if not known:
        return "not measured"
    if len(known) < len(values):
        return f"MISSED ({len(values) - len(known)} run(s) did not measure it)"
    worst = min(known) if larger_is_better else max(known)
    beyond = worst < bound if larger_is_better else worst > bound
    if beyond:
        return "MISSED"
    edge = bound * (1 + MARGIN) if larger_is_better else bound * (1 - MARGIN)
    if (worst < edge) if larger_is_better else (worst > edge):
        return f"BORDERLINE (a run within {MARGIN:.0%} of the bound)"
    if len(values) < MIN_RUNS:
        return f"met in {len(values)} run(s); {MIN_RUNS} needed to count"
    return "MET"


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the known values, or None."""
    known = [v for v in values if v is not None and not math.isnan(v)]
    if not known:
        return None
    return statistics.median(known), min(known), max(known)
