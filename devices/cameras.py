"""Find the cameras on this machine.

Linux (tested): ``/sys/class/video4linux`` names every V4L2 node, its ``index`` within
its physical device (a UVC camera exposes its capture node at index 0 and a metadata
node at index 1) and a ``device`` link to the bus device. ``/dev/v4l/by-id`` holds
stable names that survive re-plugging. What each capture node offers comes from the
V4L2 enumeration ioctls (:mod:`devices.v4l2`), injectable so tests run on a fake tree.

macOS (``avfoundation``) and Windows (``dshow``), untested here: FFmpeg's
``list_devices`` option logs device names, which are parsed from PyAV's log capture.
Neither lists formats, sizes or rates without opening a device, so ``formats`` is
empty there and a wrong mode is only reported by FFmpeg when the device is opened; on
Windows the index is the order of FFmpeg's listing and the spec uses the name.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devices.camera_modes import CameraFormat
from devices.v4l2 import query_v4l2_formats

FormatQuery = Callable[[Path], list[CameraFormat]]

SYSFS_ROOT = Path("/sys/class/video4linux")
BY_ID_ROOT = Path("/dev/v4l/by-id")
DEV_ROOT = Path("/dev")


@dataclass(frozen=True)
class CameraInfo:
    """One capture-capable camera node.

    ``spec`` is what :func:`devices.video_input.open_video` takes; ``by_id`` the stable
    ``/dev/v4l/by-id`` names pointing at ``device``; ``error`` why formats are unknown.
    """

    name: str
    device: str
    spec: str
    backend: str
    index: int = 0
    by_id: tuple[str, ...] = ()
    bus: str | None = None
    subsystem: str | None = None
    usb_id: str | None = None
    formats: tuple[CameraFormat, ...] = field(default_factory=tuple)
    error: str | None = None

    @property
    def stable_spec(self) -> str:
        """The by-id path when there is one (survives re-plugging), else ``spec``."""
        return self.by_id[0] if self.by_id else self.spec


def list_cameras(
    sysfs_root: Path = SYSFS_ROOT,
    by_id_root: Path = BY_ID_ROOT,
    dev_root: Path = DEV_ROOT,
    *,
    query_formats: FormatQuery | None = None,
) -> list[CameraInfo]:
    """List capture-capable cameras, ordered by node number.

    Blocks briefly (file system reads and a few ioctls per camera; on macOS/Windows a
    device-list call into FFmpeg). A node whose formats cannot be read is still listed,
    with ``error`` set. Raises nothing for a missing sysfs tree (no cameras).
    """
    if sys.platform == "darwin" and sysfs_root == SYSFS_ROOT:
        return list_ffmpeg_cameras("avfoundation")
    if sys.platform == "win32" and sysfs_root == SYSFS_ROOT:
        return list_ffmpeg_cameras("dshow")
    return list_v4l2_cameras(sysfs_root, by_id_root, dev_root, query_formats=query_formats)


def list_v4l2_cameras(
    sysfs_root: Path,
    by_id_root: Path,
    dev_root: Path,
    *,
    query_formats: FormatQuery | None = None,
) -> list[CameraInfo]:
    """The Linux half of :func:`list_cameras` (same contract)."""
    query = query_formats if query_formats is not None else query_v4l2_formats
    if not sysfs_root.is_dir():
        return []
    stable = _by_id_links(by_id_root)
    cameras: list[CameraInfo] = []
    for node in sorted(sysfs_root.iterdir(), key=lambda p: _node_number(p.name)):
        if not node.name.startswith("video"):
            continue  # vbi*, radio*, v4l-subdev*, swradio*: not cameras
        if _read_int(node / "index", default=0) != 0:
            continue  # metadata (UVC) or secondary nodes of the same device
        device = dev_root / node.name
        bus, subsystem, usb_id = _bus_info(node)
        formats: tuple[CameraFormat, ...] = ()
        error: str | None = None
        try:
            formats = tuple(query(device))
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
        cameras.append(
            CameraInfo(
                name=_read_text(node / "name") or node.name,
                device=str(device),
                spec=str(device),
                backend="v4l2",
                index=_node_number(node.name),
                by_id=tuple(stable.get(node.name, ())),
                bus=bus,
                subsystem=subsystem,
                usb_id=usb_id,
                formats=formats,
                error=error,
            )
        )
    return cameras


def _node_number(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else sys.maxsize


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path, *, default: int) -> int:
    text = _read_text(path)
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _by_id_links(by_id_root: Path) -> dict[str, list[str]]:
    """``{"video0": ["/dev/v4l/by-id/usb-..-video-index0"]}`` from the symlinks there."""
    links: dict[str, list[str]] = {}
    if not by_id_root.is_dir():
        return links
    for link in sorted(by_id_root.iterdir()):
        if not link.is_symlink():
            continue
        # Resolve lexically: the target is relative ("../../video0") and tests point it at
        # a tree that need not contain the node.
        target = os.path.normpath(os.path.join(link.parent, os.readlink(link)))
        links.setdefault(os.path.basename(target), []).append(str(link))
    return links


def _bus_info(node: Path) -> tuple[str | None, str | None, str | None]:
    """``(bus id, subsystem, "vvvv:pppp")`` from the node's ``device`` link."""
    device = node / "device"
    if not device.exists():
        return None, None, None
    resolved = device.resolve()
    subsystem_link = resolved / "subsystem"
    subsystem = subsystem_link.resolve().name if subsystem_link.exists() else None
    usb_id = None
    # A UVC node's device is the USB interface; idVendor/idProduct live on its parent.
    for candidate in (resolved, resolved.parent):
        vendor = _read_text(candidate / "idVendor")
        product = _read_text(candidate / "idProduct")
        if vendor and product:
            usb_id = f"{vendor}:{product}"
            break
    return resolved.name, subsystem, usb_id


# -- macOS / Windows: FFmpeg's device listing (untested on this Linux machine) ------------

_AVFOUNDATION_ENTRY = re.compile(r"^\[(\d+)\]\s+(.+?)\s*$")
_DSHOW_ENTRY = re.compile(r'^"(.+)"\s+\(([^)]*)\)\s*$')


def parse_ffmpeg_device_list(backend: str, lines: list[str]) -> list[tuple[int, str]]:
    """Pick video devices out of FFmpeg's ``list_devices`` log lines. Pure.

    avfoundation prints a "video devices:" header then ``[N] Name``; dshow prints
    ``"Name" (video)``. Returns ``[(index, name), ...]``.
    """
    found: list[tuple[int, str]] = []
    in_video = False
    for raw in lines:
        line = raw.strip()
        if backend == "avfoundation":
            lowered = line.lower()
            if lowered.endswith("video devices:"):
                in_video = True
            elif lowered.endswith("audio devices:"):
                in_video = False
            elif in_video and (match := _AVFOUNDATION_ENTRY.match(line)):
                found.append((int(match.group(1)), match.group(2)))
        elif (match := _DSHOW_ENTRY.match(line)) and "video" in match.group(2):
            found.append((len(found), match.group(1)))
    return found


def list_ffmpeg_cameras(backend: str) -> list[CameraInfo]:
    """List cameras through FFmpeg's ``list_devices`` (``avfoundation`` or ``dshow``).

    Blocks while FFmpeg queries the OS. Returns ``[]`` when the backend is not compiled
    into this FFmpeg.
    """
    import av
    import av.logging

    if backend not in av.formats_available:
        return []
    url = "" if backend == "avfoundation" else "dummy"
    previous = av.logging.get_level()
    av.logging.set_level(av.logging.INFO)
    try:
        # list_devices always "fails" to open: the answer is in the log.
        with av.logging.Capture(local=False) as logs, contextlib.suppress(av.FFmpegError):
            av.open(url, format=backend, options={"list_devices": "true"}).close()
    finally:
        av.logging.set_level(previous)
    lines = [message for _level, _name, message in logs]
    cameras = []
    for index, name in parse_ffmpeg_device_list(backend, lines):
        spec = f"avfoundation:{index}" if backend == "avfoundation" else f"dshow:video={name}"
        cameras.append(CameraInfo(name=name, device=spec, spec=spec, backend=backend, index=index))
    return cameras
