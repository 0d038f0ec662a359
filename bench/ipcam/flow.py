"""The IP camera bench's flow file, and what the flow left behind for the loss check.

:func:`flow_text` writes ``N`` cameras, each as an operator would configure an IP
camera for a recording wall: ``connector = "camera"`` on ``rtsp://.../camK`` over TCP,
JPEGs at ``fps`` (``image = true``: made with no node reading them, as the wall would
show them), segments of about ``segment_s`` copied from the camera's own packets and
sound (read by the recorder, so made, and fed to the live view), a ``recorder`` with
``clip_s`` clips, and the bench's witness (:class:`bench.ipcam.nodes.RefLog`) on the
segments and the clips.

:func:`logged` reads the witness's lines back and :func:`slices_of` opens each logged
artifact in the data directory (``artifacts/<hex[0:2]>/<hex[2:4]>/<hex>``) for its
coded slices, in ``seq`` order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av

from tests.copy_helpers import h264_slices

FLOW_NAME = "ipcam"


@dataclass(frozen=True)
class IpcamFlow:
    """``cameras`` IP cameras at ``url(k)``, each with its recorder and witness."""

    cameras: int
    fps: float = 1.0
    segment_s: float = 4.0
    clip_s: float = 4.0

    def camera(self, index: int) -> str:
        return f"cam{index}"

    def recorder(self, index: int) -> str:
        return f"rec{index}"

    def witness(self, index: int) -> str:
        return f"log{index}"

    @property
    def camera_nodes(self) -> list[str]:
        return [self.camera(i) for i in range(self.cameras)]


def flow_text(flow: IpcamFlow, url: Callable[[int], str], log_dir: Path) -> str:
    """The flow file (TOML) for ``flow``, camera ``k`` at ``url(k)``."""
    parts = [f'[flow]\nname = "{FLOW_NAME}"\n']
    for i in range(flow.cameras):
        cam, rec = flow.camera(i), flow.recorder(i)
        parts.append(
            f'[[node]]\nid = "{cam}"\nconnector = "camera"\ndevice = "{url(i)}"\n'
            f'transport = "tcp"\nfps = {flow.fps:g}\nsegment_s = {flow.segment_s:g}\n'
            "image = true\n"
        )
        parts.append(
            f'[[node]]\nid = "{rec}"\nuse = "recorder"\nclip_s = {flow.clip_s:g}\n'
            f'inputs = {{ video = "{cam}.video" }}\n'
        )
        parts.append(
            f'[[node]]\nid = "{flow.witness(i)}"\nuse = "bench.ipcam.nodes:RefLog"\n'
            f'log_dir = "{log_dir.as_posix()}"\n'
            f'inputs = {{ segment = "{cam}.video", clip = "{rec}.video" }}\n'
        )
    return "\n".join(parts)


def write_flow(directory: Path, flow: IpcamFlow, url: Callable[[int], str]) -> Path:
    """Write ``ipcam.toml`` (witness logs under ``directory/logs``); its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ipcam.toml"
    path.write_text(flow_text(flow, url, directory / "logs"))
    return path


@dataclass
class Logged:
    """One camera's items as its witness logged them, each list in ``seq`` order:
    ``(digest hex, meta)``."""

    segments: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    clips: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def logged(flow_dir: Path, flow: IpcamFlow) -> dict[str, Logged]:
    """Per camera node, what its witness logged (empty if it logged nothing). A torn
    last line (the run was killed mid-write) is left out."""
    found: dict[str, Logged] = {}
    for i in range(flow.cameras):
        items = Logged()
        path = flow_dir / "logs" / f"{flow.witness(i)}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            target = items.segments if entry["port"] == "segment" else items.clips
            target.append((entry["digest"], entry["meta"]))
        for target in (items.segments, items.clips):
            target.sort(key=lambda item: int(item[1].get("seq") or 0))
        found[flow.camera(i)] = items
    return found


def artifact_path(data_dir: Path, digest_hex: str) -> Path:
    return data_dir / "artifacts" / digest_hex[:2] / digest_hex[2:4] / digest_hex


def slices_of(data_dir: Path, items: list[tuple[str, dict[str, Any]]]) -> list[list[bytes] | None]:
    """Each item's coded slices, in order; None for an artifact missing or unreadable."""
    out: list[list[bytes] | None] = []
    for digest, _meta in items:
        try:
            out.append(h264_slices(artifact_path(data_dir, digest)))
        except (OSError, av.error.FFmpegError):
            out.append(None)
    return out
