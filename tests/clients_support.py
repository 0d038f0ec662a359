"""What the tests of other people's clients and linters share (``tests/test_clients_*.py``):
the tools themselves, clips recorded the way users record them, running a tool without
blocking the served loop, and reading back which ranges the server was asked for.

The tools are Debian's (``scripts/test`` installs them: see ``APT_PACKAGES``). A tool that
is missing skips its test with the package to install; in CI that skip fails the run
(``tests/ci_skips.py``). No tests live here.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pytest

from mediaflow import FlowBuilder
from mediaflow.media import MediaRef
from mediaflow.server.state import Answered
from tests.connector_helpers import MediaSink, run_flow

# The command each test needs, and the Debian package that brings it.
PACKAGES = {
    "ffmpeg": "ffmpeg",
    "ffprobe": "ffmpeg",
    "mkvmerge": "mkvtoolnix",
    "gst-play-1.0": "gstreamer1.0-plugins-base-apps",
    "gst-inspect-1.0": "gstreamer1.0-tools",
    "cvlc": "vlc-bin vlc-plugin-base",
    "setpriv": "util-linux",
}
TOOL_TIMEOUT_S = 60.0  # a tool still running after this has hung: it is killed


def tool(name: str) -> str:
    """The path of command ``name``; skips the test (a failure in CI) without it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not found (apt-get install {PACKAGES[name]}; scripts/test does)")
    return path


# -- recording, as a user does: a virtual camera and microphone, the recorder node ---------

# Noise makes every frame big (~4.5 MB for 4 s of 640x360). A seek past the keyframe at 2 s
# then jumps further than a player reads ahead on its first connection (FFmpeg reads
# through any gap shorter than its socket's receive buffer), so it must ask for a range.
SEEK_CAMERA = "lavfi:testsrc2=size=640x360:rate=15,noise=alls=24:allf=t,trim=duration=4"
SMALL_CAMERA = "lavfi:testsrc2=size=320x240:rate=15,trim=duration=4"
TONE = "lavfi:sine=frequency=440:sample_rate=16000:duration=5"
SEGMENT_S = 2.0  # the camera's segments, so keyframes at 0 s and 2 s of each clip
FPS = 15


def recording_flow(name: str, camera: str, codec: str = "h264", clip_s: float = 4.0) -> FlowBuilder:
    """Camera (segments of :data:`SEGMENT_S`) and tone into the recorder; sink ``segments``
    reads the camera's segments, sink ``clips`` the recorder's clips."""
    camera_options: dict[str, Any] = {"fps": 1, "segment_s": SEGMENT_S, "codec": codec}
    return (
        FlowBuilder(name)
        .add("cam", "camera", device=camera, video=True, realtime=False, **camera_options)
        .add("mic", "microphone", device=TONE, realtime=False)
        .add("rec", "recorder", inputs={"video": "cam.video", "audio": "mic.audio"}, clip_s=clip_s)
        .add("segments", MediaSink, inputs={"video": "cam.video"})
        .add("clips", MediaSink, inputs={"video": "rec.video"})
    )


@dataclass(frozen=True)
class Recording:
    """A finished run's data directory and what its camera and recorder wrote."""

    data_dir: Path
    segments: list[MediaRef]
    clips: list[MediaRef]
    clip_bytes: list[bytes]


async def record(builder: FlowBuilder, data_dir: Path) -> Recording:
    """Run the flow until idle; the refs its sinks read, in order."""
    result = await run_flow(builder, data_dir, timeout=60)
    clips = result.port("video", sink="clips")
    return Recording(
        data_dir,
        [r.ref for r in result.port("video", sink="segments")],
        [c.ref for c in clips],
        [c.data for c in clips],
    )


def record_now(builder: FlowBuilder, data_dir: Path) -> Recording:
    """:func:`record` from synchronous code (a module-scoped fixture), on a loop of its own."""
    return asyncio.run(record(builder, data_dir))


def keyframe_before(clip: bytes, at: float) -> tuple[float, int]:
    """``(time, byte offset)`` of the last video keyframe at or before ``at`` seconds: where
    a player seeking to ``at`` must start reading and decoding."""
    best: tuple[float, int] | None = None
    with av.open(io.BytesIO(clip), "r") as container:
        for packet in container.demux(video=0):
            if packet.pts is None or packet.pos is None or not packet.is_keyframe:
                continue
            time = float(packet.pts * packet.time_base)
            if time <= at and (best is None or time > best[0]):
                best = (time, packet.pos)
    if best is None:
        raise AssertionError(f"no keyframe at or before {at} s")
    return best


# -- running a tool without blocking the loop that serves it ---------------------------------


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


async def run_tool(
    *args: str, env: dict[str, str] | None = None, timeout: float = TOOL_TIMEOUT_S
) -> Finished:
    """Run a command to its end (the test's server keeps answering meanwhile). Raises
    ``AssertionError`` with what it printed if it runs longer than ``timeout``."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"{args[0]} ran longer than {timeout} s:\n{out.decode(errors='replace')[-3000:]}"
            f"\n{err.decode(errors='replace')[-3000:]}"
        ) from None
    assert proc.returncode is not None
    return Finished(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


# -- VLC, which refuses to run as root -------------------------------------------------------

NOBODY = 65534  # Debian's nobody and nogroup
# A VLC Lua interface: while an input plays it prints VLC's own account of it every
# 20 ms (position in microseconds, state, pictures decoded and displayed). VLC stops it
# (an "Interrupted" error on stderr) when --play-and-exit ends the playlist.
VLC_PROBE = """\
local started = false
while true do
  local input = vlc.object.input()
  if input then
    started = true
    local item = vlc.input.item()
    local stats = item and item:stats() or {}
    io.stdout:write(string.format("mfprobe time=%d state=%d decoded=%d displayed=%d\\n",
      vlc.var.get(input, "time"), vlc.var.get(input, "state"),
      stats.decoded_video or -1, stats.displayed_pictures or -1))
    io.stdout:flush()
  elseif started then
    vlc.misc.quit()
    return
  end
  vlc.misc.mwait(vlc.misc.mdate() + 20000)
end
"""
VLC_PROBE_LINE = re.compile(r"mfprobe time=(-?\d+) state=(\d+) decoded=(-?\d+) displayed=(-?\d+)")


@dataclass(frozen=True)
class VlcReport:
    """One line of :data:`VLC_PROBE`."""

    time: float  # seconds
    state: int  # 2 playing, 3 paused, 4 ended (VLC 3's input states)
    decoded: int
    displayed: int


def vlc_reports(stdout: str) -> list[VlcReport]:
    return [
        VlcReport(int(m[1]) / 1e6, int(m[2]), int(m[3]), int(m[4]))
        for m in VLC_PROBE_LINE.finditer(stdout)
    ]


@contextmanager
def vlc_home() -> Iterator[tuple[list[str], dict[str, str]]]:
    """``(command prefix, environment)`` to run VLC with :data:`VLC_PROBE` as interface
    ``mfprobe`` and a home of its own. As root (CI, this machine) VLC runs as nobody,
    through util-linux's ``setpriv``: ``vlc`` exits at once when its euid is 0."""
    home = Path(tempfile.mkdtemp(prefix="mediaflow-vlc-"))  # in /tmp: nobody can reach it
    try:
        scripts = home / "data" / "vlc" / "lua" / "intf"
        scripts.mkdir(parents=True)
        (scripts / "mfprobe.lua").write_text(VLC_PROBE)
        prefix: list[str] = []
        if os.geteuid() == 0:
            for path in [home, *home.rglob("*")]:
                os.chown(path, NOBODY, NOBODY)
            prefix = [tool("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}",
                      "--clear-groups", "--"]  # fmt: skip
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"),
        }
        yield prefix, env
    finally:
        shutil.rmtree(home, ignore_errors=True)


# -- what the server was asked ----------------------------------------------------------------

_FIRST_BYTE = re.compile(r"\s*bytes\s*=\s*(\d+)-", re.IGNORECASE)


def first_byte(range_value: str | None) -> int | None:
    """The first position of a ``bytes=N-...`` Range; None for none or a suffix range."""
    matched = _FIRST_BYTE.match(range_value or "")
    return int(matched[1]) if matched else None


def answers_for(answered: list[Answered], digest: str) -> list[Answered]:
    return [a for a in answered if a.path.startswith(f"/artifacts/{digest}")]


def assert_seeked_by_range(answers: list[Answered], keyframe_pos: int, size: int) -> None:
    """The client asked for a range starting at the keyframe it must decode from (up to
    64 KiB early: the audio interleaved just before it), and every answer was a good one:
    200 or 206, or 416 for a probe past the end (VLC asks for ``bytes=<size>-``)."""
    starts = [first_byte(a.range) for a in answers]
    assert any(s is not None and keyframe_pos - 65536 <= s <= keyframe_pos for s in starts), (
        f"no range from the keyframe at byte {keyframe_pos}: {answers}"
    )
    for answer, start in zip(answers, starts, strict=True):
        probe_past_end = answer.status == 416 and start is not None and start >= size
        assert answer.status in (200, 206) or probe_past_end, answer
