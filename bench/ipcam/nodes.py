"""The IP camera bench's witness node: it notes every segment and clip it is given.

``RefLog`` (one per camera, ``use = "bench.ipcam.nodes:RefLog"``) reads the camera's
``video`` segments on ``segment`` and the recorder's clips on ``clip``, and keeps one
JSON line per item: the port, the reference's digest and its meta (``seq``, ``pts``,
``duration``, ``discontinuity`` ...). It never reads the bytes and touches no file
while the flow runs (a blocking write on the event loop would be the bench's cost
billed to mediaflow): the lines go to ``<log_dir>/<node>.jsonl`` at teardown, which a
clean stop (SIGINT) runs. After the run, :mod:`bench.ipcam.run` opens the logged
artifacts in the data directory and checks their coded slices against the files the
server played; a run whose witness wrote nothing fails that check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from mediaflow import Context, MediaRef, Node


class RefLog(Node):
    """Notes each ``segment`` and ``clip`` reference it gets (module doc)."""

    inputs: ClassVar[Mapping[str, str]] = {"segment": "video", "clip": "video"}

    def __init__(self, log_dir: str) -> None:
        self.log_dir = Path(log_dir)
        self._path: Path | None = None
        self._lines: list[str] = []

    async def setup(self, ctx: Context) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._path = self.log_dir / f"{ctx.node}.jsonl"

    async def run(self, ctx: Context) -> None:
        for port in ("segment", "clip"):
            ref = ctx.inputs.get(port)
            if isinstance(ref, MediaRef):
                line = {"port": port, "digest": ref.hex, "size": ref.size, "meta": dict(ref.meta)}
                self._lines.append(json.dumps(line))

    async def teardown(self) -> None:
        if self._path is not None and self._lines:
            with self._path.open("a") as out:
                out.write("".join(line + "\n" for line in self._lines))
            self._lines.clear()
