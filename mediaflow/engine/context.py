"""The :class:`~mediaflow.engine.node.Context` a node's ``run`` receives."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediaflow.engine.node import ItemInfo
from mediaflow.media import MediaRef, decode_value

if TYPE_CHECKING:
    from mediaflow.engine.runner import FlowRunner


class RunContext:
    """Context for one node run (or a source's whole life). Cheap to create."""

    __slots__ = ("_cause", "_runner", "flow", "inputs", "item", "log", "node")

    @property
    def flow_dir(self) -> Path:
        """The flow file's directory (the working directory for flows built in Python);
        relative paths in node options are resolved against it."""
        path = self._runner.spec.path
        return path.parent if path is not None else Path.cwd()

    def __init__(
        self,
        runner: FlowRunner,
        node: str,
        inputs: Mapping[str, Any],
        item: ItemInfo | None,
    ) -> None:
        self._runner = runner
        self.flow = runner.spec.name
        self.node = node
        self.inputs = inputs
        self.item = item
        # The input item this run is for (a source's run is for none): named by
        # its emissions and events so a viewer can tell which ones belong together.
        is_source = runner.spec.nodes[node].is_source
        self._cause = None if item is None or is_source else item.seq
        self.log = logging.getLogger(f"mediaflow.node.{node}")

    @property
    def redelivery(self) -> bool:
        return self.item is not None and self.item.deliveries > 1

    async def emit(self, port: str, value: Any) -> None:
        await self._runner.emit(self.node, port, value, item=self._cause)

    async def flush(self) -> None:
        await self._runner.flush()

    async def save_artifact(
        self,
        data: bytes | Path | AsyncIterator[bytes],
        media_type: str,
        meta: Mapping[str, Any] | None = None,
    ) -> MediaRef:
        return await self._runner.store.save(data, media_type, meta)

    async def read_artifact(self, ref: MediaRef | str) -> bytes:
        return await self._runner.store.read(ref)

    def keep(self, ref: MediaRef | str) -> None:
        """Record ``ref`` as kept by this run (a ``run_artifact`` row): garbage
        collection will not take it. Blocking SQLite write, small."""
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        if self._runner.run_id is not None:
            self._runner.store.keep(self._runner.run_id, digest)

    def artifact_path(self, ref: MediaRef | str) -> Path:
        digest = ref.digest if isinstance(ref, MediaRef) else ref
        return self._runner.store.path_for(digest)

    def publish(self, event_type: str, **data: Any) -> None:
        # ``item``: the seq of the input item being run, as on this run's emissions.
        cause = {} if self._cause is None else {"item": self._cause}
        self._runner.bus.publish(
            event_type, {"flow": self.flow, "node": self.node, **cause, **data}
        )

    def stopping(self) -> bool:
        return self._runner.stopping

    def is_wired(self, port: str) -> bool:
        """Whether this node's input ``port`` is wired in the flow (optional inputs)."""
        return port in self._runner.spec.nodes[self.node].inputs

    def temp_dir(self) -> Path:
        """A scratch directory for this node on the store's filesystem, so a file
        written there is saved by a link rather than a copy. Created on demand."""
        path = self._runner.store.data_dir / "tmp" / self.node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def has_readers(self, port: str) -> bool:
        """Whether any node in the flow reads this node's ``port`` (a camera encodes
        video segments only when someone reads them)."""
        return bool(self._runner.routes.get((self.node, port)))

    def latest(self, port: str) -> Any:
        """The newest value this node emitted on ``port`` (this run or a crashed one), or None."""
        encoded = self._runner.latest_values.get((self.node, port))
        return None if encoded is None else decode_value(encoded)
