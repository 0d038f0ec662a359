"""One run of the live benchmark: a real ``mediaflow run``, its viewers, then the peer.

:func:`run_once` writes the flow (:mod:`bench.live.flow`), starts ``mediaflow run``
on it (:class:`bench._lib.flow_process.FlowProcess`: embedded queue, local store, no GC
sweep during the run) and, in this order, so that the sound is encoded only once a
viewer came (a feed read in the last 10 s is *watched*):

1. waits for the camera's segments and the microphone's chunks, and reads the
   sources' ``captured_at - pts`` from the flow API for ``warmup_s``;
2. measures the flow's CPU with no viewer (nothing has read ``/live`` yet);
3. with ``webrtc``: ``viewers`` WHEP viewers in a process of their own
   (:mod:`bench.live.whep`: aiortc receiving, not decoding), the CPU after
   ``settle_s``; first, because a WHEP viewer does not make the feed *watched*
   (its AAC encode), while an HLS viewer does for ``WATCH_S`` after its last read;
   then the floor under them (:mod:`bench.live.floor`): the datagrams they received,
   at the same rates, only sent, by a process of its own beside the flow; then the
   peer in C (:mod:`bench.live.gst_peer`): GStreamer's ``webrtcbin`` sending the
   camera's stream to as many aiortc viewers, its CPU with and without them;
4. starts one HLS viewer in a process of its own (:mod:`bench.live.hls`), which
   records the stream, and measures the CPU after ``settle_s``;
5. the same with ``viewers`` viewers (none records);
6. opens the wall in headless Chromium (:mod:`bench.live.browser`) as ``/?live=hls``
   (LL-HLS), then with ``webrtc`` as ``/`` (WHEP);
7. once nobody has read the feed for ``WATCH_S`` (the sound is silent again),
   measures the CPU with no viewer a second time: the two bracket the viewers'
   windows, so a machine whose load drifts shows it; with ``webrtc``, the WHEP
   viewers' window once more, before the HLS viewers' second one;
8. stops the flow and decodes the recording (:mod:`bench.live.sync`);
9. replays a clip whose flashes and beeps are made together with the file connector
   (its own sound live) and records it with one viewer (:func:`clip_offsets`);
10. runs the peer, ffmpeg's HLS muxer, alone (:func:`bench.live.cpu.run_peer`).

Each step that fails is noted in :attr:`RunResult.errors` and the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av

from bench._lib.common import parse_result
from bench._lib.flow_process import FlowProcess, GcEnv
from bench.live.browser import BrowserResult, unavailable, wall_latency
from bench.live.cpu import PeerResult, Usage, measure, run_peer
from bench.live.flow import (
    CAMERA,
    CLIP_FLOW_NAME,
    CLIP_NODE,
    FLOW_NAME,
    MICROPHONE,
    LiveFlow,
    write_clip_flow,
    write_flow,
)
from bench.live.hls import ViewerStats, read_sidecar
from bench.live.sync import SyncResult, analyse, anchors, decode, file_offsets

GIB = 1024**3
NO_SWEEP = GcEnv(max_bytes=2 * GIB, interval_s=3600.0, grace_s=3600.0)

# How long a feed counts as watched after its last read: its sound is encoded
# only meanwhile (docs/live-view.md, "within the last 10 s").
WATCH_S = 10.0


@dataclass(frozen=True)
class RunConfig:
    warmup_s: float = 5.0
    seconds: float = 20.0  # each measured window
    settle_s: float = 3.0  # viewers start, before their window
    viewers: int = 10
    browser: bool = True
    peer: bool = True
    idle_after: bool = True  # a second window with no viewer, once the feed is unwatched
    webrtc: bool = True  # the wall over WHEP too, and WHEP viewers' CPU windows
    clip_s: float = 12.0  # how long the file's live stream is recorded


@dataclass
class ViewerWindow:
    """A window with HLS viewers: the flow's CPU and what the viewers saw."""

    viewers: int
    usage: Usage | None = None
    stats: list[ViewerStats] = field(default_factory=list)

    @property
    def lags(self) -> list[float]:
        return [lag for viewer in self.stats for lag in viewer.lags]


@dataclass
class WhepWindow:
    """A window with WHEP viewers (:mod:`bench.live.whep`): the flow's CPU, what they got."""

    viewers: int
    usage: Usage | None = None
    results: list[dict[str, Any]] = field(default_factory=list)  # per viewer
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # frames and bytes, all

    @property
    def errors(self) -> list[str]:
        return [e for viewer in self.results for e in viewer.get("errors", [])]


@dataclass
class RunResult:
    index: int
    idle: Usage | None = None  # no viewer
    idle_after: Usage | None = None  # no viewer again, after the viewers and the wall
    one: ViewerWindow | None = None
    many: ViewerWindow | None = None
    # The busy window once more, then no viewer once more: the CPU the viewers add is a
    # few percent, no more than the flow's own drift over a minute, so it is judged on
    # windows that alternate.
    many_again: ViewerWindow | None = None
    idle_last: Usage | None = None
    browser: BrowserResult | None = None  # the wall over LL-HLS
    whep: WhepWindow | None = None  # WHEP viewers, before the HLS ones
    whep_again: WhepWindow | None = None  # and after the second idle window
    whep_floor: dict[str, Any] | None = None  # their datagrams, only sent (bench.live.floor)
    whep_gst: dict[str, Any] | None = None  # GStreamer's webrtcbin, as many viewers
    browser_webrtc: BrowserResult | None = None  # the wall over WHEP
    sync: SyncResult | None = None
    clip_offsets: list[float] | None = None  # a file's own sound against its picture
    peer: PeerResult | None = None
    errors: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)  # ERROR lines of the flow's log
    exit_code: int | None = None
    workdir: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=15) as resp:
        return json.load(resp)


def wait_for_sources(url: str, timeout_s: float = 60.0) -> None:
    """Until the camera's segments and the microphone's chunks have a latest value.
    Raises ``RuntimeError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = anchors(fetch_json(f"{url}/api/flows/{FLOW_NAME}"))
        if len(found[CAMERA]) >= 2 and found[MICROPHONE]:  # image and video
            return
        time.sleep(0.5)
    raise RuntimeError(f"no segments and chunks within {timeout_s:.0f} s")


def collect_anchors(url: str, seconds: float, every_s: float = 0.5) -> dict[str, list[float]]:
    """The sources' ``captured_at - pts``, looked at every ``every_s`` for ``seconds``."""
    found: dict[str, list[float]] = {CAMERA: [], MICROPHONE: []}
    end = time.monotonic() + seconds
    while True:
        for name, values in anchors(fetch_json(f"{url}/api/flows/{FLOW_NAME}")).items():
            found[name] += values
        if time.monotonic() + every_s > end:
            return found
        time.sleep(every_s)


def viewers_child(
    module: str, base: str, count: int, seconds: float, extra: list[str],
    during: Callable[[], None], what: str,
) -> dict[str, Any]:  # fmt: skip
    """``count`` viewers (``python -m module``) of ``base`` in a child process for
    ``seconds``, ``during`` running meanwhile; the result it printed. Raises
    ``RuntimeError`` (naming ``what``) if they could not watch."""
    command = [sys.executable, "-m", module, "--url", base]
    command += ["--viewers", str(count), "--seconds", f"{seconds:g}", *extra]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        during()
        out, err = proc.communicate(timeout=seconds + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = parse_result(out)
    if result is None or "error" in result:
        reason = result["error"] if result else f"exit {proc.returncode}: {err[-300:]}"
        raise RuntimeError(f"{count} {what}: {reason}")
    return result


def watch_process(
    base: str, count: int, seconds: float, record: Path | None, during: Callable[[], None]
) -> list[ViewerStats]:
    """``count`` HLS viewers of ``base`` in a child process for ``seconds``; ``during``
    runs meanwhile. Raises ``RuntimeError`` if they could not watch."""
    extra = [] if record is None else ["--record", str(record)]
    result = viewers_child("bench.live.hls", base, count, seconds, extra, during, "viewer(s)")
    return [ViewerStats(**body) for body in result["viewers"]]


def viewers_window(
    pid: int, base: str, count: int, config: RunConfig, record: Path | None
) -> ViewerWindow:
    """``count`` viewers in a child process; the flow's CPU once they settled."""
    window = ViewerWindow(count)

    def sample() -> None:
        time.sleep(config.settle_s)
        window.usage = measure(pid, config.seconds)

    total = config.settle_s + config.seconds + 1.0
    window.stats = watch_process(base, count, total, record, sample)
    return window


def whep_window(pid: int, base: str, count: int, config: RunConfig) -> WhepWindow:
    """``count`` WHEP viewers of ``base`` (``.../whep/{flow}/{node}``) in a child
    process; the flow's CPU once they settled. Raises ``RuntimeError`` if they could not
    watch."""
    window = WhepWindow(count)

    def sample() -> None:
        time.sleep(config.settle_s)
        window.usage = measure(pid, config.seconds)

    seconds = config.settle_s + config.seconds + 1.0
    result = viewers_child("bench.live.whep", base, count, seconds, [], sample, "WHEP viewer(s)")
    window.results, window.counts = result["viewers"], result["counts"]
    return window


def floor_peer(window: WhepWindow, config: RunConfig) -> dict[str, Any]:
    """:mod:`bench.live.floor` at the sizes ``window``'s viewers received, beside the
    flow (a process of its own, measuring its own CPU); its result. Raises
    ``RuntimeError`` if it fails."""
    video, sound = window.counts.get("video", {}), window.counts.get("audio", {})
    frame = video.get("bytes", 0) // max(1, video.get("frames", 0))
    packet = sound.get("bytes", 0) // max(1, sound.get("frames", 0))
    command = [sys.executable, "-m", "bench.live.floor", "--viewers", str(window.viewers),
               "--seconds", f"{config.seconds:g}", "--frame-bytes", str(max(1, frame)),
               "--sound-bytes", str(max(1, packet))]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=config.seconds + 60)
    result = parse_result(done.stdout)
    if result is None or "error" in result:
        reason = result["error"] if result else f"exit {done.returncode}: {done.stderr[-300:]}"
        raise RuntimeError(f"the floor peer: {reason}")
    return result


def gst_peer(config: RunConfig, workdir: Path) -> dict[str, Any]:
    """:mod:`bench.live.gst_peer` with ``config``'s viewers and windows, beside the flow;
    its result. Raises ``RuntimeError`` if it fails."""
    command = [sys.executable, "-m", "bench.live.gst_peer", "--viewers", str(config.viewers),
               "--seconds", f"{config.seconds:g}", "--settle", f"{config.settle_s:g}",
               "--workdir", str(workdir)]  # fmt: skip
    timeout = 12 * (config.seconds + config.settle_s) + 180  # its clip is encoded first
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    result = parse_result(done.stdout)
    if result is None or "error" in result:
        reason = result["error"] if result else f"exit {done.returncode}: {done.stderr[-300:]}"
        raise RuntimeError(f"the GStreamer peer: {reason}")
    return result


def clip_offsets(clip: Path, flow: LiveFlow, config: RunConfig, workdir: Path) -> list[float]:
    """The clip replayed live with its own sound (:func:`bench.live.flow.make_clip`),
    recorded by one viewer: ``beep - flash`` per second. Raises what the steps raise."""
    flow_file = write_clip_flow(workdir / "flow", clip, flow)
    recording = workdir / "viewer.mp4"
    limit = config.settle_s + config.clip_s + 120
    with FlowProcess(flow_file, workdir / "data", NO_SWEEP, limit_s=limit) as proc:
        url = proc.wait_serving(timeout_s=90)
        base = f"{url}/live/{CLIP_FLOW_NAME}/{CLIP_NODE}"
        watch_process(base, 1, config.settle_s + config.clip_s, recording, lambda: None)
    started, parts = read_sidecar(recording)
    return file_offsets(decode(recording), parts, started)


def run_once(
    flow: LiveFlow,
    config: RunConfig,
    workdir: Path,
    index: int,
    say: Callable[[str], None],
    clip: Path | None = None,
) -> RunResult:
    """One run (module doc); never raises for a step that fails."""
    result = RunResult(index, workdir=str(workdir))
    recording = workdir / "viewer.mp4"
    flow_file = write_flow(workdir / "flow", flow)
    found: dict[str, list[float]] = {CAMERA: [], MICROPHONE: []}
    limit = config.warmup_s + 11 * (config.seconds + config.settle_s) + 2 * WATCH_S + 300
    with FlowProcess(flow_file, workdir / "data", NO_SWEEP, limit_s=limit) as proc:
        try:
            url = proc.wait_serving(timeout_s=90)
            wait_for_sources(url)
            found = collect_anchors(url, config.warmup_s)
            say(f"   measuring {config.seconds:g} s with no viewer")
            result.idle = measure(proc.pid, config.seconds)
            base = f"{url}/live/{FLOW_NAME}/{CAMERA}"
            whep = f"{url}/whep/{FLOW_NAME}/{CAMERA}"
            if config.webrtc:
                say(f"   {config.viewers} WHEP viewers")
                result.whep = whep_window(proc.pid, whep, config.viewers, config)
                say("   the floor: the same datagrams, only sent")
                result.whep_floor = floor_peer(result.whep, config)
                say(f"   the peer in C: GStreamer's webrtcbin, {config.viewers} aiortc viewers")
                result.whep_gst = gst_peer(config, workdir / "gst")
            say("   1 HLS viewer (recording the stream)")
            result.one = viewers_window(proc.pid, base, 1, config, recording)
            say(f"   {config.viewers} HLS viewers")
            result.many = viewers_window(proc.pid, base, config.viewers, config, None)
            if config.browser:
                result.browser = browser_window(url, proc.pid, config, say)
                if config.webrtc:
                    anchor = statistics.median(found[CAMERA]) if found[CAMERA] else None
                    result.browser_webrtc = browser_window(
                        url, proc.pid, config, say, "webrtc", anchor
                    )
            more = anchors(fetch_json(f"{url}/api/flows/{FLOW_NAME}"))
            found = {name: found[name] + more[name] for name in found}
            if config.idle_after:
                say(
                    f"   {WATCH_S + 1:g} s for the feed to be unwatched, {config.seconds:g} s again"
                )
                time.sleep(WATCH_S + 1.0)
                result.idle_after = measure(proc.pid, config.seconds)
                if config.webrtc:
                    say(f"   {config.viewers} WHEP viewers again")
                    result.whep_again = whep_window(proc.pid, whep, config.viewers, config)
                say(f"   {config.viewers} HLS viewers again, then no viewer again")
                result.many_again = viewers_window(proc.pid, base, config.viewers, config, None)
                time.sleep(WATCH_S + 1.0)
                result.idle_last = measure(proc.pid, config.seconds)
        except (OSError, RuntimeError, ValueError) as exc:
            result.errors.append(f"{type(exc).__name__}: {exc}")
        result.exit_code = proc.stop()
        result.log_errors = [line for line in proc.log_text().splitlines() if " ERROR " in line]
    if recording.exists():
        try:
            started, parts = read_sidecar(recording)
            decoded = decode(recording)
            result.sync = analyse(decoded, parts, found[CAMERA], found[MICROPHONE], started)
        except (av.FFmpegError, OSError, ValueError) as exc:
            result.errors.append(f"A/V analysis: {type(exc).__name__}: {exc}")
    if clip is not None:
        say("   a file's own picture and sound, live")
        try:
            result.clip_offsets = clip_offsets(clip, flow, config, workdir / "clip")
        except (av.FFmpegError, OSError, RuntimeError, ValueError) as exc:
            result.errors.append(f"clip A/V: {type(exc).__name__}: {exc}")
    if config.peer:
        say("   peer: ffmpeg's HLS muxer on the same sources")
        result.peer = run_peer(flow, config.settle_s, config.seconds, workdir / "peer")
    return result


def browser_window(
    url: str,
    pid: int,
    config: RunConfig,
    say: Callable[[str], None],
    transport: str = "hls",
    anchor: float | None = None,
) -> BrowserResult:
    """The wall over LL-HLS (``hls``) or WHEP (``webrtc``, which needs the camera's
    ``captured_at - pts`` as ``anchor``)."""
    reason = unavailable()
    if reason is not None:
        return BrowserResult(transport, error=f"Chromium unavailable: {reason}")
    say(f"   the wall in Chromium ({'WebRTC' if transport == 'webrtc' else 'LL-HLS'})")
    return asyncio.run(
        wall_latency(
            url,
            warmup_s=config.warmup_s,
            seconds=config.seconds,
            pid=pid,
            transport=transport,
            anchor=anchor,
        )
    )
