"""One mediaflow phase of the IP camera bench: N cameras served, recorded, watched, checked.

:func:`run_mediaflow` starts a fresh RTSP server with ``N`` mounts
(:mod:`bench.ipcam.media`), writes the flow (:mod:`bench.ipcam.flow`) and runs it with
``mediaflow run`` (:class:`bench._lib.flow_process.FlowProcess`: embedded queue, local
store, no GC sweep in the run), then, in this order:

1. waits until every camera has made a JPEG, then ``warmup_s`` more (the RTSP opens,
   the first group of pictures decoded through, the first segments and clips);
2. looks at the flow (the API's items per port and backlogs, ``/metrics``: capture
   losses and emit → start latency; :func:`bench._lib.look.snapshot`) and measures
   the CPU of mediaflow's process tree and of the RTSP server over ``seconds``, with
   no viewer: the recording wall's own cost, the one compared with the peer (with
   ``profile``, one more such window under py-spy: :mod:`bench.ipcam.profile`);
3. starts one player per camera in a process of its own (:mod:`bench.ipcam.hls`),
   and after ``settle_s`` measures the CPU of mediaflow, the server and the players
   over ``live_s``, the players noting each part's latency;
4. looks at the flow again, stops it (SIGINT), stops the server, and checks each
   camera's clips and segments, slice by slice, against the file it played
   (:func:`bench.ipcam.loss.continuity`).

A step that fails is noted in :attr:`MediaflowRun.errors` and the phase goes on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench._lib.common import parse_result
from bench._lib.flow_process import FlowProcess, GcEnv
from bench._lib.look import Snapshot, snapshot
from bench._lib.sample import scrape
from bench.ipcam.cpu import Window, measure
from bench.ipcam.flow import FLOW_NAME, IpcamFlow, Logged, logged, slices_of, write_flow
from bench.ipcam.loss import Continuity, continuity
from bench.ipcam.media import CameraMedia, mount_path, reference_slices, serve
from bench.ipcam.profile import Profile, profile
from tests.rtsp_server import RtspServer

GIB = 1024**3
NO_SWEEP = GcEnv(max_bytes=64 * GIB, interval_s=3600.0, grace_s=3600.0)
START_TIMEOUT_S = 90.0  # every camera opened (~2 s each, FFmpeg's probe) and made a JPEG


@dataclass(frozen=True)
class PhaseConfig:
    warmup_s: float = 8.0
    seconds: float = 15.0  # the CPU window with no viewer
    live_s: float = 15.0  # the window with every camera watched
    settle_s: float = 2.0  # players start, before the live window
    live: bool = True
    keep: bool = False  # keep the data directory (the recordings) after the check
    profile: bool = False  # a window more, no viewer, under py-spy (bench.ipcam.profile)

    @property
    def phase_s(self) -> float:
        """How long a phase streams after the cameras opened, about."""
        live = self.settle_s + self.live_s if self.live else 0.0
        profiled = self.seconds if self.profile else 0.0
        return self.warmup_s + self.seconds + profiled + live + 10.0


@dataclass
class CameraRecord:
    """What one camera left: its witness's counts and the slice checks."""

    node: str
    segments: int = 0
    clips: int = 0
    clip_segments: int = 0  # segments the clips say they hold
    discontinuities: int = 0  # segments marked as following a gap
    clips_check: Continuity | None = None
    segments_check: Continuity | None = None

    @property
    def tail_segments(self) -> int:
        """Segments not (yet) in a clip when the run stopped."""
        return self.segments - self.clip_segments


@dataclass
class MediaflowRun:
    cameras: int
    idle: Window | None = None  # no viewer: mediaflow, server
    live: Window | None = None  # every camera watched: mediaflow, server, players
    looks: list[Snapshot] = field(default_factory=list)  # idle start, idle end, live end
    look_s: list[float] = field(default_factory=list)  # how long each look's API call took
    ages: list[dict[str, float]] = field(default_factory=list)  # each look's JPEG ages
    players: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> FollowStats
    records: list[CameraRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)  # ERROR lines of mediaflow's log
    skip_lines: list[str] = field(default_factory=list)  # its frames_skipped warnings
    exit_code: int | None = None
    workdir: str = ""
    slices_per_s: float = 0.0  # of the files: places a hole in stream time
    profile: Profile | None = None
    profile_error: str | None = None  # py-spy missing or refused: not the flow's fault

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def server_pids(server: RtspServer) -> list[int]:
    return [server.pid] if server.pid is not None else []


@dataclass(frozen=True)
class Look:
    """One look at the flow: ``snapshot.t`` is when the flow's answer arrived (a busy
    event loop answers seconds late: counts belong to then, not to the asking);
    ``took_s`` how long the API took; ``ages`` each camera's newest JPEG's age then
    (wall clock minus its ``captured_at``)."""

    snapshot: Snapshot
    took_s: float
    ages: dict[str, float]


def jpeg_ages(body: Mapping[str, Any], now: float) -> dict[str, float]:
    """``now`` minus the ``captured_at`` of each node's latest ``image`` in ``GET
    /api/flows/{flow}``'s answer (nodes without one are left out). Pure."""
    ages: dict[str, float] = {}
    for node in body.get("nodes", []):
        latest = ((node.get("outputs") or {}).get("image") or {}).get("latest")
        meta = latest.get("meta", latest) if isinstance(latest, dict) else None
        captured = meta.get("captured_at") if isinstance(meta, dict) else None
        if isinstance(captured, int | float):
            ages[node["id"]] = now - captured
    return ages


def look(url: str) -> Look:
    """The flow's items, backlogs, JPEG ages and metrics now. Raises ``OSError`` if it
    is gone."""
    asked = time.monotonic()
    with urllib.request.urlopen(f"{url}/api/flows/{FLOW_NAME}", timeout=30) as resp:
        body = json.load(resp)
    t, now = time.monotonic(), time.time()
    metrics = scrape(url, timeout_s=30)
    if metrics is None:
        raise OSError("the server did not answer /metrics")
    return Look(snapshot(t, 0.0, 0, body, metrics), t - asked, jpeg_ages(body, now))


def wait_for_pictures(url: str, flow: IpcamFlow, timeout_s: float) -> None:
    """Until every camera emitted a JPEG. Raises ``RuntimeError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        emitted = look(url).snapshot.emitted
        if all(emitted.get(f"{cam}.image", 0) >= 1 for cam in flow.camera_nodes):
            return
        time.sleep(0.5)
    raise RuntimeError(f"not every camera made a JPEG within {timeout_s:.0f} s")


def watched_window(
    pid: int, server: RtspServer, url: str, flow: IpcamFlow, config: PhaseConfig
) -> tuple[Window | None, dict[str, dict[str, Any]]]:
    """Every camera followed by a player (one process) while the CPU is measured."""
    total = config.settle_s + config.live_s + 1.0
    command = [sys.executable, "-m", "bench.ipcam.hls", "--base", f"{url}/live/{FLOW_NAME}"]
    command += ["--nodes", ",".join(flow.camera_nodes), "--seconds", f"{total:g}"]
    players = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    window = None
    try:
        time.sleep(config.settle_s)
        groups = {"mediaflow": [pid], "server": server_pids(server), "players": [players.pid]}
        window = measure(groups, config.live_s)
        out, err = players.communicate(timeout=total + 60)
    finally:
        if players.poll() is None:
            players.kill()
            players.communicate()
    result = parse_result(out)
    if result is None:
        raise RuntimeError(f"players: exit {players.returncode}: {err[-300:]}")
    return window, result["cameras"]


def check_camera(
    node: str, items: Logged, data_dir: Path, reference: tuple[bytes, ...]
) -> CameraRecord:
    """A camera's counts and its clips' and segments' slices against the file."""
    record = CameraRecord(node, len(items.segments), len(items.clips))
    record.clip_segments = sum(int(meta.get("segments") or 1) for _, meta in items.clips)
    record.discontinuities = sum(bool(meta.get("discontinuity")) for _, meta in items.segments)
    record.clips_check = continuity(reference, slices_of(data_dir, items.clips))
    record.segments_check = continuity(reference, slices_of(data_dir, items.segments))
    return record


def run_mediaflow(
    flow: IpcamFlow,
    files: list[Path],
    media: CameraMedia,
    config: PhaseConfig,
    workdir: Path,
    say: Callable[[str], None],
) -> MediaflowRun:
    """One phase (module doc), camera ``k`` playing ``files[k]``
    (:func:`bench.ipcam.media.camera_files` of ``media``); never raises for a step that
    fails, but for a server that cannot start (``tests.rtsp_server`` errors)."""
    result = MediaflowRun(flow.cameras, workdir=str(workdir))
    server = serve(files[: flow.cameras])
    try:
        flow_file = write_flow(workdir / "flow", flow, lambda i: server.url(mount_path(i)))
        limit = START_TIMEOUT_S + config.phase_s + 120
        with FlowProcess(flow_file, workdir / "data", NO_SWEEP, limit_s=limit) as proc:
            try:
                url = proc.wait_serving(timeout_s=90)
                _measure_phase(proc.pid, url, server, flow, config, result, say)
            except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
            result.exit_code = proc.stop()
            lines = proc.log_text().splitlines()
            result.log_errors = [line for line in lines if " ERROR " in line]
            result.skip_lines = [line for line in lines if "frames_skipped" in line]
    finally:
        server.stop()
    say(f"   checking {flow.cameras} camera(s)' clips and segments against the file")
    for index, (node, items) in enumerate(logged(workdir / "flow", flow).items()):
        reference = reference_slices(files[index], media)
        result.slices_per_s = len(reference) / media.seconds
        result.records.append(check_camera(node, items, workdir / "data", reference))
    if not config.keep:
        shutil.rmtree(workdir / "data", ignore_errors=True)
    return result


def _note(result: MediaflowRun, seen: Look) -> None:
    result.looks.append(seen.snapshot)
    result.look_s.append(seen.took_s)
    result.ages.append(seen.ages)


def _measure_phase(
    pid: int,
    url: str,
    server: RtspServer,
    flow: IpcamFlow,
    config: PhaseConfig,
    result: MediaflowRun,
    say: Callable[[str], None],
) -> None:
    wait_for_pictures(url, flow, START_TIMEOUT_S)
    time.sleep(config.warmup_s)
    say(f"   {config.seconds:g} s with no viewer")
    _note(result, look(url))
    result.idle = measure({"mediaflow": [pid], "server": server_pids(server)}, config.seconds)
    _note(result, look(url))
    if config.profile:
        say(f"   {config.seconds:g} s more with no viewer, under py-spy")
        try:
            result.profile = profile(pid, config.seconds, Path(result.workdir) / "py-spy.txt")
        except RuntimeError as exc:
            result.profile_error = str(exc)
    if config.live:
        say(f"   {config.live_s:g} s with every camera watched (LL-HLS, one player each)")
        result.live, result.players = watched_window(pid, server, url, flow, config)
        _note(result, look(url))
