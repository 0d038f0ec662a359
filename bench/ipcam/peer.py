"""The peer of a step: one ffmpeg per camera, ``-c copy`` into 4 s segments plus 1 fps JPEGs.

What a home-grown recorder does with an IP camera (the issue's command line)::

    ffmpeg -rtsp_transport tcp -i rtsp://.../camK
        -map 0:v -map 0:a -c copy -f segment -segment_time 4 -reset_timestamps 1 segNNNNN.mp4
        -map 0:v -vf fps=1 -q:v 3 imgNNNNN.jpg

The JPEG output decodes *every* picture (the ``fps`` filter drops frames after the
decoder), which is most of its CPU at 1080p30. mediaflow decodes only the keyframes it
needs, so the bench also runs the stronger peer: the same command with ``-skip_frame
nokey`` on the input (the decoder skips all but keyframes; with an IDR every second,
the ``fps`` filter still gets its picture a second). Neither stores anything durably,
serves a live view or makes a second copy as clips.

:func:`run_peer` runs one variant against a fresh server with the same ``N`` mounts:
it waits until every ffmpeg wrote its first JPEG, then ``warmup_s``, measures the CPU
of all the ffmpeg processes and of the server over ``seconds``, stops them with SIGINT
(ffmpeg closes its last segment) and checks each camera's segments, slice by slice,
against the file, as for mediaflow.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av

from bench.ipcam.cpu import Window, measure
from bench.ipcam.loss import Continuity, continuity
from bench.ipcam.media import CameraMedia, mount_path, reference_slices, serve
from tests.copy_helpers import h264_slices

FFMPEG = "/usr/bin/ffmpeg"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
VARIANTS = {
    "ffmpeg": "the issue's command: every picture decoded for the fps filter",
    "ffmpeg-keyframes": "the same with -skip_frame nokey: keyframes decoded only",
}


def command(url: str, outdir: Path, variant: str, segment_s: float, fps: float) -> list[str]:
    """The ffmpeg command line of ``variant`` (a key of :data:`VARIANTS`)."""
    skip = ["-skip_frame", "nokey"] if variant == "ffmpeg-keyframes" else []
    return [
        FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error",
        "-rtsp_transport", "tcp", *skip, "-i", url,
        "-map", "0:v", "-map", "0:a", "-c", "copy",
        "-f", "segment", "-segment_time", f"{segment_s:g}", "-reset_timestamps", "1",
        str(outdir / "seg%05d.mp4"),
        "-map", "0:v", "-vf", f"fps={fps:g}", "-q:v", "3", str(outdir / "img%05d.jpg"),
    ]  # fmt: skip


@dataclass
class PeerCamera:
    jpegs: int = 0  # written over the window
    segments: int = 0
    check: Continuity | None = None
    exit_code: int | None = None
    stderr: str = ""


@dataclass
class PeerRun:
    variant: str
    cameras: int
    window: Window | None = None
    outcomes: list[PeerCamera] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _jpegs(outdir: Path) -> int:
    return sum(1 for _ in outdir.glob("img*.jpg"))


def _wait_for_pictures(dirs: list[Path], procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every ffmpeg wrote a JPEG; raises ``RuntimeError`` if one exits first or
    ``START_TIMEOUT_S`` passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("an ffmpeg exited before its first JPEG")
        if all(_jpegs(outdir) for outdir in dirs):
            return
        time.sleep(0.25)
    raise RuntimeError(f"not every ffmpeg wrote a JPEG within {START_TIMEOUT_S:.0f} s")


def run_peer(
    variant: str,
    cameras: int,
    files: list[Path],
    media: CameraMedia,
    *,
    warmup_s: float,
    seconds: float,
    segment_s: float,
    fps: float,
    workdir: Path,
    say: Callable[[str], None],
    keep: bool = False,
) -> PeerRun:
    """One peer phase (module doc), camera ``k`` playing ``files[k]``; never raises for
    a step that fails, but for a server that cannot start."""
    result = PeerRun(variant, cameras)
    server = serve(files[:cameras])
    dirs = [workdir / f"cam{i}" for i in range(cameras)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, outdir in enumerate(dirs):
            outdir.mkdir(parents=True, exist_ok=True)
            line = command(server.url(mount_path(i)), outdir, variant, segment_s, fps)
            procs.append(subprocess.Popen(line, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        try:
            _wait_for_pictures(dirs, procs)
            time.sleep(warmup_s)
            say(f"   {variant}: {seconds:g} s")
            before = [_jpegs(outdir) for outdir in dirs]
            pids = [proc.pid for proc in procs]
            result.window = measure(
                {"peer": pids, "server": [server.pid] if server.pid else []}, seconds
            )
            after = [_jpegs(outdir) for outdir in dirs]
        except (OSError, RuntimeError) as exc:
            result.errors.append(f"{type(exc).__name__}: {exc}")
            before = after = [0] * cameras
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # ffmpeg closes its segment and exits
        for i, proc in enumerate(procs):
            camera = PeerCamera(jpegs=after[i] - before[i])
            try:
                _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            camera.exit_code, camera.stderr = proc.returncode, err.decode(errors="replace")[-300:]
            result.outcomes.append(camera)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.stop()
    for index, (camera, outdir) in enumerate(zip(result.outcomes, dirs, strict=True)):
        segments = sorted(outdir.glob("seg*.mp4"))
        camera.segments = len(segments)
        reference = reference_slices(files[index], media)
        camera.check = continuity(reference, [_slices(path) for path in segments])
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _slices(path: Path) -> list[bytes] | None:
    try:
        return h264_slices(path)
    except (OSError, av.error.FFmpegError, IndexError):  # torn, or no video: counted foreign
        return None
