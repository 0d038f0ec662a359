"""Small node classes for the flow-loading tests, imported from next to the flow files.

The flow files in this directory name them as ``nodes_here:Class``; the loader
finds this module because it sits next to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mediaflow.node import Context, Node


class Ticker(Node):
    """A source: ``count`` numbers on ``n``."""

    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, count: int = 3, every_ms: int = 0) -> None:
        self.count = count
        self.every_ms = every_ms

    async def run(self, ctx: Context) -> None:
        for i in range(self.count):
            await ctx.emit("n", i)


class Pictures(Node):
    """A source of images (for kind mismatches)."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image"}


class Doubler(Node):
    """``n`` in, ``n * factor`` out; ``tags`` is a list option (for copy tests)."""

    inputs: ClassVar[Mapping[str, str]] = {"n": "number"}
    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, factor: float = 2.0, tags: list[str] | None = None) -> None:
        self.factor = factor
        self.tags = tags if tags is not None else []

    async def run(self, ctx: Context) -> dict[str, Any]:
        return {"n": ctx.inputs["n"] * self.factor}


class TwoIn(Node):
    """``a`` required, ``b`` optional."""

    inputs: ClassVar[Mapping[str, str]] = {"a": "number", "b": "number"}
    outputs: ClassVar[Mapping[str, str]] = {"sum": "number"}
    optional_inputs: ClassVar[frozenset[str]] = frozenset({"b"})


class Mixer(Node):
    """Both inputs optional (but at least one must be wired to ever run)."""

    inputs: ClassVar[Mapping[str, str]] = {"a": "audio", "b": "audio"}
    outputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    optional_inputs: ClassVar[frozenset[str]] = frozenset({"a", "b"})


class ImageSink(Node):
    """Reads images, produces nothing."""

    inputs: ClassVar[Mapping[str, str]] = {"image": "image"}


class JsonSink(Node):
    """Reads any plain JSON value."""

    inputs: ClassVar[Mapping[str, str]] = {"value": "json"}


class NeedsLabel(Node):
    """A source with a required option."""

    outputs: ClassVar[Mapping[str, str]] = {"text": "text"}

    def __init__(self, label: str, *, loud: bool = False) -> None:
        self.label = label
        self.loud = loud


class Switch(Node):
    """A source whose output kind is an option, like a connector's ``ports`` hook."""

    def __init__(self, kind: str = "number") -> None:
        self.kind = kind

    @classmethod
    def ports(cls, options: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        return {}, {"out": options.get("kind", "number")}


class Replay(Node):
    """A source whose ``ports`` hook reads a file, and fails when it is missing."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def ports(cls, options: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
        with open(options["path"]) as f:
            return {}, {f.read().strip(): "image"}


class BadKind(Node):
    """Declares a kind mediaflow does not know."""

    outputs: ClassVar[Mapping[str, str]] = {"pixels": "pixels"}


def not_a_node() -> None:
    """A function, which a flow cannot use as a node."""
