"""The live benchmark's figures, targets and report. Pure: results in, text out.

:func:`figures` reduces one run to named numbers (seconds and cores; None where a
step was not measured). The issue's targets are judged over runs with a margin
(:func:`verdict`): a target is MET only when every run meets it with
``MARGIN`` of the bound to spare and there are at least ``MIN_RUNS`` runs;
a run inside the margin makes it BORDERLINE, a run beyond the bound MISSED.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench._lib.common import percentile
from bench.live.run import RunResult

MARGIN = 0.10  # of the bound
MIN_RUNS = 3
Figures = dict[str, float | None]


def quantiles(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(p50, p95, max), nearest-rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 95), ordered[-1]


def spread(values: Sequence[float | None], show: Callable[[float], str]) -> str:
    """``median X (min A, max B; n runs)`` of the measured values, or ``-``."""
    known = [v for v in values if v is not None and not math.isnan(v)]
    if not known:
        return "-"
    mid = statistics.median(known)
    return f"{show(mid)} (min {show(min(known))}, max {show(max(known))}; {len(known)} runs)"


def verdict(values: Sequence[float | None], bound: float, runs: int) -> str:
    """MET / BORDERLINE / MISSED for a smaller-is-better figure per run (module doc).
    A run that did not measure the figure counts against it."""
    known = [v for v in values if v is not None]
    if not known:
        return "not measured"
    if len(known) < len(values):
        return f"MISSED ({len(values) - len(known)} run(s) did not measure it)"
    worst = max(known)
    if worst > bound:
        return "MISSED"
    if worst > bound * (1 - MARGIN):
        return f"BORDERLINE (a run within {MARGIN:.0%} of the bound)"
    if runs < MIN_RUNS:
        return f"met in {runs} run(s); {MIN_RUNS} needed to count"
    return "MET"


def _mean(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _abs_quantile(values: Sequence[float], q: float) -> float | None:
    return percentile(sorted(abs(v) for v in values), q) if values else None


def figures(run: RunResult, viewers: int) -> Figures:
    """Named numbers of one run (seconds, cores, ratios); None where not measured."""
    got: Figures = {}
    lat = quantiles(run.browser.latencies) if run.browser else None
    got["latency_p50"], got["latency_p95"], got["latency_max"] = lat or (None, None, None)
    web = run.browser_webrtc
    lat = quantiles(web.latencies) if web else None
    got["webrtc_p50"], got["webrtc_p95"], got["webrtc_max"] = lat or (None, None, None)
    if web is not None and web.latencies:
        got["webrtc_to_browser"] = _median(web.to_browser)
        got["webrtc_to_browser_p95"] = percentile(sorted(web.to_browser), 95)
        got["webrtc_in_browser"] = _median(web.in_browser)
        got["webrtc_in_browser_p95"] = percentile(sorted(web.in_browser), 95)
        emitted = web.rtp_stats.get("jitterBufferEmittedCount", 0.0)
        got["webrtc_jitter_buffer"] = (
            web.rtp_stats["jitterBufferDelay"] / emitted if emitted > 0 else None
        )
        got["webrtc_flashes"] = float(web.flashes)
    sync = run.sync
    if sync is not None:
        video = [e.error for e in sync.video]
        audio = [e.error for e in sync.audio]
        got["video_error"], got["video_error_max"] = _median(video), _abs_quantile(video, 100)
        got["audio_error"], got["audio_error_max"] = _median(audio), _abs_quantile(audio, 100)
        got["av_offset"] = _median(sync.offsets)
        got["av_offset_abs"] = None if got["av_offset"] is None else abs(got["av_offset"])
        got["av_offset_p95"] = _abs_quantile(sync.offsets, 95)
        got["av_offset_max"] = _abs_quantile(sync.offsets, 100)
        got["av_events"] = float(len(sync.offsets))
    if run.clip_offsets is not None:
        got["clip_offset"] = _median(run.clip_offsets)
        got["clip_offset_abs"] = None if got["clip_offset"] is None else abs(got["clip_offset"])
        got["clip_offset_max"] = _abs_quantile(run.clip_offsets, 100)
        got["clip_events"] = float(len(run.clip_offsets))
    before = run.idle.cores if run.idle else None
    after = run.idle_after.cores if run.idle_after else None
    last = run.idle_last.cores if run.idle_last else None
    idle = _mean([before, after, last])  # they bracket the busy windows
    got["cpu_idle_before"], got["cpu_idle_after"], got["cpu_idle_last"] = before, after, last
    got["cpu_idle_drift"] = after - before if after is not None and before is not None else None
    one = run.one.usage.cores if run.one and run.one.usage else None
    busy = [w.usage.cores if w and w.usage else None for w in (run.many, run.many_again)]
    got["cpu_many_first"], got["cpu_many_again"] = busy
    many = _mean(busy)
    peer = run.peer.usage.cores if run.peer and run.peer.usage else None
    got.update(cpu_idle=idle, cpu_one=one, cpu_many=many, cpu_peer=peer)
    got["cpu_wall"] = run.browser.usage.cores if run.browser and run.browser.usage else None
    got["cpu_stream"] = one - idle if one is not None and idle is not None else None
    got["cpu_per_viewer"] = None
    if many is not None and one is not None and viewers > 1:
        got["cpu_per_viewer"] = (many - one) / (viewers - 1)
    got["cpu_increase"] = many / idle - 1 if many is not None and idle else None
    got["cpu_vs_peer"] = one / peer if one is not None and peer else None
    got["cpu_idle_vs_peer"] = idle / peer if idle is not None and peer else None
    whep = _mean([w.usage.cores if w and w.usage else None for w in (run.whep, run.whep_again)])
    got["cpu_whep"] = whep
    got["cpu_whep_first"] = run.whep.usage.cores if run.whep and run.whep.usage else None
    again = run.whep_again
    got["cpu_whep_again"] = again.usage.cores if again and again.usage else None
    got["cpu_whep_added"] = whep - idle if whep is not None and idle is not None else None
    got["cpu_whep_increase"] = whep / idle - 1 if whep is not None and idle else None
    got["cpu_wall_webrtc"] = web.usage.cores if web and web.usage else None
    floor = run.whep_floor.get("cores") if run.whep_floor else None
    got["cpu_whep_floor"] = floor
    got["cpu_whep_floor_share"] = floor / idle if floor is not None and idle else None
    gst = run.whep_gst or {}
    gst_added = None
    if gst.get("viewers_cores") is not None and gst.get("idle_cores") is not None:
        gst_added = gst["viewers_cores"] - gst["idle_cores"]
    got["cpu_whep_gst_added"] = gst_added
    got["cpu_whep_gst_share"] = gst_added / idle if gst_added is not None and idle else None
    added = got["cpu_whep_added"]
    got["cpu_whep_vs_gst"] = added / gst_added if added is not None and gst_added else None
    one_lags = run.one.lags if run.one else []
    many_lags = run.many.lags if run.many else []
    peer_lags = run.peer.lags if run.peer else []
    got["lag_one"], got["lag_many"] = _median(one_lags), _median(many_lags)
    got["lag_one_p95"] = percentile(sorted(one_lags), 95) if one_lags else None
    got["lag_peer"] = _median(peer_lags)
    got["lag_peer_p95"] = percentile(sorted(peer_lags), 95) if peer_lags else None
    lag_one, lag_peer = got["lag_one"], got["lag_peer"]
    got["lag_vs_peer"] = lag_one / lag_peer if lag_one is not None and lag_peer else None
    return got


@dataclass(frozen=True)
class Target:
    name: str
    key: str  # the figure judged, per run
    bound: float
    show: Callable[[float], str]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if abs(seconds) >= 0.0095 else f"{seconds * 1000:.1f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.2f} s"


def cores(value: float) -> str:
    return f"{value:.3f}"


def pct(value: float) -> str:
    return f"{value * 100:+.1f} %"


def times(value: float) -> str:
    return f"{value:.2f}x"


def count(value: float) -> str:
    return f"{value:.0f}"


TARGETS = (
    Target("glass-to-glass p95 ≤ 1.5 s (Chromium, 0.5 s parts)", "latency_p95", 1.5, secs),
    Target(
        "|A/V offset| ≤ 40 ms, camera + microphone against their capture facts (median)",
        "av_offset_abs",
        0.040,
        ms,
    ),
    Target(
        "|A/V offset| ≤ 40 ms, a file's own picture and sound against the file (median)",
        "clip_offset_abs",
        0.040,
        ms,
    ),
    Target("ten viewers add < 10 % CPU (vs no viewer)", "cpu_increase", 0.10, pct),
    Target("WebRTC (WHEP) glass-to-glass p95 ≤ 300 ms (Chromium)", "webrtc_p95", 0.300, ms),
    Target("ten WHEP viewers add < 10 % CPU (vs no viewer)", "cpu_whep_increase", 0.10, pct),
)


def judged(per_run: Sequence[Figures]) -> list[tuple[Target, str]]:
    return [(t, verdict([f.get(t.key) for f in per_run], t.bound, len(per_run))) for t in TARGETS]


def _cell(value: float | None, show: Callable[[float], str]) -> str:
    return "-" if value is None else show(value)


Cells = Sequence[tuple[str, Callable[[float], str]]]


def _table(header: Sequence[str], rows: Sequence[tuple[str, Figures]], cells: Cells) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for label, got in rows:
        lines.append("| " + " | ".join([label, *(_cell(got.get(k), s) for k, s in cells)]) + " |")
    return lines


def report(runs: Sequence[RunResult], viewers: int, heading: str) -> str:
    """The whole report: a table per section, the spread over runs, the targets."""
    per_run = [figures(run, viewers) for run in runs]
    rows = [(str(run.index), got) for run, got in zip(runs, per_run, strict=True)]
    lines = [heading, ""]

    def section(title: str, header: list[str], cells: list[tuple[str, Callable[[float], str]]],
                summary: list[tuple[str, str, Callable[[float], str]]]) -> None:  # fmt: skip
        lines.extend([title, "", *_table(["run", *header], rows, cells), ""])
        for label, key, show in summary:
            lines.append(f"- {label}: {spread([f.get(key) for f in per_run], show)}")
        lines.append("")

    section(
        "Glass-to-glass latency in Chromium (one value per frame shown)",
        ["p50", "p95", "max"],
        [("latency_p50", secs), ("latency_p95", secs), ("latency_max", secs)],
        [("p50", "latency_p50", secs), ("p95", "latency_p95", secs)],
    )
    section(
        "WebRTC (WHEP) in the same run: glass-to-glass in Chromium (capture times from the"
        " flashes), its halves (to the browser: received - captured; in the browser:"
        " shown - received), Chromium's mean jitter-buffer delay; the flow's CPU with"
        f" {viewers} WHEP viewers (aiortc, not decoding; the mean of two windows), the"
        " floor: their datagrams only sent, by a process that does nothing else, and"
        f" GStreamer's webrtcbin (C) sending the camera's stream to {viewers} such viewers"
        " (its CPU with them less without, against the flow's no-viewer CPU)",
        ["p50", "p95", "max", "to browser p50", "p95", "in browser p50", "p95",
         "jitter buffer", "flashes", "wall (cores)", f"{viewers} WHEP (cores)",
         "added (cores)", "vs no viewer", "floor (cores)", "floor vs no viewer",
         "GStreamer added (cores)", "GStreamer vs no viewer", "mediaflow / GStreamer"],
        [("webrtc_p50", ms), ("webrtc_p95", ms), ("webrtc_max", ms),
         ("webrtc_to_browser", ms), ("webrtc_to_browser_p95", ms),
         ("webrtc_in_browser", ms), ("webrtc_in_browser_p95", ms),
         ("webrtc_jitter_buffer", ms), ("webrtc_flashes", count),
         ("cpu_wall_webrtc", cores), ("cpu_whep", cores), ("cpu_whep_added", cores),
         ("cpu_whep_increase", pct), ("cpu_whep_floor", cores),
         ("cpu_whep_floor_share", pct), ("cpu_whep_gst_added", cores),
         ("cpu_whep_gst_share", pct), ("cpu_whep_vs_gst", times)],
        [("p50", "webrtc_p50", ms), ("p95", "webrtc_p95", ms),
         (f"{viewers} WHEP viewers vs no viewer", "cpu_whep_increase", pct),
         ("the floor (their datagrams, only sent) vs no viewer", "cpu_whep_floor_share",
          pct),
         (f"GStreamer's webrtcbin, {viewers} viewers, vs the flow's no viewer",
          "cpu_whep_gst_share", pct),
         ("mediaflow's viewers' CPU / GStreamer's", "cpu_whep_vs_gst", times)],
    )  # fmt: skip
    section(
        "A/V sync in the live stream: camera + microphone (observed - made, per flash and beep;"
        " offset = audio - video, + is sound late) and a file's own picture and sound"
        " (beep - flash)",
        ["flashes paired", "video error", "max |video|", "audio error", "max |audio|",
         "A/V offset", "p95 |offset|", "max |offset|", "file: pairs", "file: offset",
         "max |offset|"],
        [("av_events", count), ("video_error", ms), ("video_error_max", ms),
         ("audio_error", ms), ("audio_error_max", ms), ("av_offset", ms),
         ("av_offset_p95", ms), ("av_offset_max", ms), ("clip_events", count),
         ("clip_offset", ms), ("clip_offset_max", ms)],
        [("camera + microphone A/V offset (median per run)", "av_offset", ms),
         ("a file's own A/V offset (median per run)", "clip_offset", ms)],
    )  # fmt: skip
    section(
        "CPU of the flow's processes, cores, in the order measured (no viewer: the mean"
        f" of its three windows; {viewers} viewers: of its two; the peer: ffmpeg -re into"
        " its HLS muxer, alone)",
        [
            "no viewer",
            "1 viewer",
            f"{viewers} viewers",
            "wall in Chromium",
            "no viewer",
            f"{viewers} viewers",
            "no viewer",
            "ffmpeg HLS",
        ],
        [
            ("cpu_idle_before", cores),
            ("cpu_one", cores),
            ("cpu_many_first", cores),
            ("cpu_wall", cores),
            ("cpu_idle_after", cores),
            ("cpu_many_again", cores),
            ("cpu_idle_last", cores),
            ("cpu_peer", cores),
        ],
        [
            ("no viewer, after - before (the machine's drift)", "cpu_idle_drift", cores),
            ("the live stream (first viewer: AAC encode + serving)", "cpu_stream", cores),
            ("each further viewer", "cpu_per_viewer", cores),
            (f"{viewers} viewers vs no viewer", "cpu_increase", pct),
            ("mediaflow with 1 viewer / ffmpeg", "cpu_vs_peer", times),
            ("mediaflow with no viewer / ffmpeg", "cpu_idle_vs_peer", times),
        ],
    )
    section(
        "Listing lag: a part listed (blocking reload answered) - capture time of its end",
        ["mediaflow, 1 viewer", "p95", f"{viewers} viewers", "ffmpeg segment appears", "p95"],
        [
            ("lag_one", ms),
            ("lag_one_p95", ms),
            ("lag_many", ms),
            ("lag_peer", ms),
            ("lag_peer_p95", ms),
        ],
        [("mediaflow / ffmpeg (medians)", "lag_vs_peer", times)],
    )
    lines += ["Targets (every run within the bound with 10 % of it to spare)", ""]
    for target, said in judged(per_run):
        values = ", ".join(_cell(f.get(target.key), target.show) for f in per_run)
        lines.append(f"- {target.name}: {said} (per run: {values})")
    notes = notes_of(runs)
    if notes:
        lines += ["", "Notes", "", *notes]
    return "\n".join(lines)


def notes_of(runs: Sequence[RunResult]) -> list[str]:
    """Errors, holes, jumps and machine load worth a reader's eye."""
    notes: list[str] = []
    for run in runs:
        tag = f"- run {run.index}:"
        notes += [f"{tag} {error}" for error in run.errors]
        notes += [f"{tag} log: {line}" for line in run.log_errors[:5]]
        for window in (run.one, run.many):
            if window is None:
                continue
            holes = sum(v.holes for v in window.stats)
            errors = [e for v in window.stats for e in v.errors]
            if holes or errors:
                notes.append(
                    f"{tag} {window.viewers} viewer(s): {holes} parts missed, "
                    f"{len(errors)} errors {errors[:3]}"
                )
        for b in (run.browser, run.browser_webrtc):
            if b is not None and (b.error or b.player_error or b.console_errors or b.jumps):
                notes.append(
                    f"{tag} wall ({b.transport}): {b.error or ''} player error "
                    f"{b.player_error}, {b.jumps} jumps, console {b.console_errors[:3]}"
                )
        for w in (run.whep, run.whep_again):
            if w is not None and w.errors:
                notes.append(f"{tag} {w.viewers} WHEP viewers: errors {w.errors[:3]}")
        web = run.browser_webrtc
        if web is not None and web.origin_spread is not None and web.origin_spread > 0.05:
            notes.append(f"{tag} WebRTC: the flashes' origins spread {web.origin_spread:.3f} s")
        if run.peer is not None and run.peer.error:
            notes.append(f"{tag} peer: {run.peer.error}")
        windows = (
            run.idle,
            run.whep and run.whep.usage,
            run.one and run.one.usage,
            run.many and run.many.usage,
        )
        after = (run.idle_after, run.whep_again and run.whep_again.usage)
        again = run.many_again and run.many_again.usage
        usages = [u for u in (*windows, *after, again, run.idle_last) if u]
        if usages:
            machine = ", ".join(f"{u.machine:.2f}" for u in usages)
            notes.append(f"{tag} machine busy cores in the CPU windows: {machine}")
    return notes
