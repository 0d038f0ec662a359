"""CPU of a process tree over a window, and the peer: ffmpeg's own HLS muxer.

:func:`measure` reads ``/proc`` before and after a window: the CPU seconds of a
process and its children (:func:`bench._lib.sample.tree_cpu`) per wall second, in
cores, with the whole machine's busy cores over the same window for context (other
work on a shared machine shows there, and makes every figure noisier).

:func:`run_peer` runs what a home-grown live stream would be: one ``ffmpeg -re`` on
the same lavfi camera and microphone graphs, x264 with the camera's settings
(veryfast, no B-frames, 2-frame lookahead, a keyframe every segment) and AAC at the
live sound's bitrate, into its HLS muxer with 0.5 s fMP4 segments cut between
keyframes (``split_by_time``, as mediaflow's parts are), ``program_date_time`` and
atomic playlist writes (``temp_file``), in a temp directory. It measures ffmpeg's CPU
over the window and how late each segment appears in the playlist after its end
(``PROGRAM-DATE-TIME + EXTINF``), polling the file every ``POLL_S``. ffmpeg dates its
first segment when its muxer starts, just after the first frame was read, so its
lag is if anything understated.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench._lib.sample import machine_busy, tree_cpu
from bench.live.flow import LiveFlow
from bench.live.hls import ListedPart, parse_playlist

POLL_S = 0.005
PEER_PLAYLIST = "peer.m3u8"

# The peer encodes its sound at the bit rate per channel mediaflow's live AAC track
# uses (mediaflow/live/audio.py), so both pay for the same encoding.
BITS_PER_CHANNEL = {8000: 24000, 11025: 24000, 12000: 24000, 16000: 32000}
DEFAULT_BITS_PER_CHANNEL = 64000


@dataclass(frozen=True)
class Usage:
    """CPU over one window, in cores (CPU seconds per wall second)."""

    seconds: float
    cores: float
    machine: float  # every process on the machine


def measure(pid: int, seconds: float, during: Callable[[], None] | None = None) -> Usage:
    """The tree of ``pid`` over the next ``seconds`` (blocks that long; ``during``
    runs first, inside the window). Raises ``OSError`` if ``pid`` is gone."""
    start, cpu, busy = time.monotonic(), tree_cpu(pid), machine_busy()
    if during is not None:
        during()
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    return finish(pid, start, cpu, busy)


def finish(pid: int, start: float, cpu: float, busy: tuple[float, float]) -> Usage:
    """The window that began at monotonic ``start`` with ``tree_cpu`` ``cpu`` and
    ``machine_busy`` ``busy``, ending now."""
    span = time.monotonic() - start
    now_busy = machine_busy()
    return Usage(span, (tree_cpu(pid) - cpu) / span, (now_busy[0] - busy[0]) / span)


def camera_x264(flow: LiveFlow) -> list[str]:
    """ffmpeg's arguments for x264 with the live camera's settings (module doc)."""
    gop = str(round(flow.rate * flow.segment_s))
    return [
        "-c:v", "libx264", "-preset", "veryfast", "-bf", "0", "-g", gop, "-keyint_min", gop,
        "-sc_threshold", "0", "-x264-params", "rc-lookahead=2", "-pix_fmt", "yuv420p",
    ]  # fmt: skip


def peer_command(flow: LiveFlow, seconds: float, outdir: Path) -> list[str]:
    bitrate = BITS_PER_CHANNEL.get(flow.audio_rate, DEFAULT_BITS_PER_CHANNEL)
    return [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
        "-re", "-t", f"{seconds:g}", "-f", "lavfi", "-i", flow.camera_graph(),
        "-re", "-t", f"{seconds:g}", "-f", "lavfi", "-i", flow.microphone_graph(),
        "-map", "0:v", "-map", "1:a", *camera_x264(flow),
        "-c:a", "aac", "-b:a", str(bitrate), "-ar", str(flow.audio_rate), "-ac", "1",
        "-f", "hls", "-hls_time", "0.5", "-hls_list_size", "8",
        "-hls_segment_type", "fmp4",
        "-hls_flags", "program_date_time+split_by_time+temp_file+delete_segments",
        "-y", str(outdir / PEER_PLAYLIST),
    ]  # fmt: skip


@dataclass
class PeerResult:
    usage: Usage | None = None
    lags: list[float] = field(default_factory=list)  # per segment, seconds
    segments: int = 0
    error: str | None = None


def run_peer(flow: LiveFlow, settle_s: float, seconds: float, outdir: Path) -> PeerResult:
    """ffmpeg's HLS for ``settle_s + seconds`` (module doc); its CPU over the last
    ``seconds``. A missing ffmpeg or a failed run is the result's ``error``."""
    result = PeerResult()
    if shutil.which("ffmpeg") is None:
        result.error = "ffmpeg not found (apt-get install ffmpeg)"
        return result
    outdir.mkdir(parents=True, exist_ok=True)
    command = peer_command(flow, settle_s + seconds + 2.0, outdir)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, tuple[float, ListedPart]] = {}
    try:
        started = time.monotonic()
        window: tuple[float, float, tuple[float, float]] | None = None
        while proc.poll() is None:
            now = time.monotonic()
            if window is None and now >= started + settle_s:
                window = (now, tree_cpu(proc.pid), machine_busy())
            elif window is not None and result.usage is None and now >= window[0] + seconds:
                result.usage = finish(proc.pid, *window)
            in_window = window is not None and result.usage is None
            _look(outdir / PEER_PLAYLIST, seen, counted=in_window)
            time.sleep(POLL_S)
    except OSError as exc:  # it ended between a look and the next
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate()
    if proc.returncode not in (0, None) and result.usage is None:
        result.error = f"ffmpeg exited {proc.returncode}: {err.decode(errors='replace')[-300:]}"
    counted = [(at, part) for at, part in seen.values() if part.end is not None and at > 0]
    result.lags = [at - part.end for at, part in counted if part.end is not None]
    result.segments = len(counted)
    return result


def _look(playlist: Path, seen: dict[int, tuple[float, ListedPart]], *, counted: bool) -> None:
    """Note each segment the first time the playlist lists it (time 0: before the
    window, not counted)."""
    try:
        text = playlist.read_text()
    except FileNotFoundError:
        return
    now = time.time()
    for part in parse_playlist(text).parts:
        if part.seq not in seen:
            seen[part.seq] = (now if counted else 0.0, part)
