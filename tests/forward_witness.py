"""Consumers for the real-process forwarding tests: each writes down what it read.

``Frames`` (an ``image`` input) and ``Chunks`` (an ``audio`` input) wait ``delay_s``
(a consumer slower than its source keeps a backlog where the work goes), read every item's
artifact back (``ctx.read_artifact``: where the work goes, from the artifact service)
and append one JSON line per delivery to ``<log_dir>/<node>-<pid>.jsonl``::

    {"seq": 3, "digest": "sha256:…", "sha256": "<hex of the bytes read>",
     "deliveries": 1, "redelivery": false}

One ``os.write`` of one line into a file of the process's own, before the item is
acknowledged: a delivery that is not acknowledged shows up again as a second line.
:func:`read_deliveries` reads them back per node. No tests live here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from mediaflow import Context, MediaRef, Node


class _Witness(Node):
    """Reads each delivered artifact and logs it (module doc)."""

    def __init__(self, log_dir: str, delay_s: float = 0.0) -> None:
        self.log_dir = Path(log_dir)
        self.delay_s = float(delay_s)
        self._fd = -1

    async def setup(self, ctx: Context) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{ctx.node}-{os.getpid()}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def run(self, ctx: Context) -> None:
        (ref,) = ctx.inputs.values()
        assert isinstance(ref, MediaRef) and ctx.item is not None
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        data = await ctx.read_artifact(ref)
        line = {
            "seq": ref.meta.get("seq"),
            "digest": ref.digest,
            "sha256": hashlib.sha256(data).hexdigest(),
            "deliveries": ctx.item.deliveries,
            "redelivery": ctx.redelivery,
        }
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    async def teardown(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Frames(_Witness):
    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}


class Chunks(_Witness):
    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}


def read_deliveries(log_dir: Path, node: str) -> list[dict[str, Any]]:
    """Every delivery ``node`` logged, in the order each process wrote them (a
    process's lines in order; processes one after the other)."""
    lines: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob(f"{node}-*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines
