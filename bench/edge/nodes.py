"""The flow's consumers: what runs where an edge box's work goes.

They do nothing with what they get. On the edge box they never run (the box
forwards their items); in the plain run that CPU is measured against, they run
locally and return at once, so the two runs differ by forwarding alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from mediaflow import Context, Node


class Frames(Node):
    """Takes each camera frame and does nothing with it."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}

    async def run(self, ctx: Context) -> None:
        return None


class Chunks(Node):
    """Takes each microphone chunk and does nothing with it."""

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}

    async def run(self, ctx: Context) -> None:
        return None
