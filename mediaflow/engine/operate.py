"""Operating a running flow: one path for every operator, over HTTP or through a node.

``POST /api/flows/{flow}/<action>`` (:mod:`mediaflow.server.control`) and a node's
``ctx.more.control`` (the MQTT sink's command topic) both go through
:class:`FlowControls`: :func:`decide` (pure) says whether the action applies to the
flow's status, is a no-op, or is refused; then the session acts. Requests of one
flow are served one at a time, so two operators never interleave half-way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from mediaflow.engine.snapshot import FlowSnapshot
from mediaflow.node import ControlAction

ACTIONS: tuple[ControlAction, ...] = ("pause", "resume", "step", "disable", "enable")
STEP_WAIT_S = 2.0


class FlowStateError(RuntimeError):
    """The flow is not in a state that allows this (a step while running, say)."""


@dataclass(frozen=True)
class Decision:
    """What a control request does to a flow in a given state: ``apply`` the
    action, or not (it is in that state already), or be ``refused`` (why)."""

    apply: bool
    refused: str | None = None


def decide(action: ControlAction, status: str) -> Decision:
    """Pure: the answer to ``action`` for a flow whose status is ``status``."""
    if status == "stopping":
        return Decision(False, "is stopping")
    if status == "disabled" and action not in ("enable", "disable"):
        return Decision(False, "is disabled: enable it first")
    match action:
        case "pause":
            return Decision(status == "running")
        case "resume":
            return Decision(status == "paused")
        case "step":
            if status != "paused":
                return Decision(False, "is not paused: pause it before stepping")
            return Decision(True)
        case "disable":
            return Decision(status != "disabled")
        case "enable":
            # Enabling resumes: a flow that is not disabled is left as it is.
            return Decision(status == "disabled")
        case _:
            assert_never(action)


class Operable(Protocol):
    """What :class:`FlowControls` needs of a session."""

    def snapshot(self) -> FlowSnapshot: ...
    async def pause(self) -> None: ...
    async def resume(self) -> None: ...
    async def step(self, *, wait_s: float = STEP_WAIT_S) -> dict[str, Any] | None: ...
    async def disable(self) -> None: ...
    async def enable(self) -> None: ...


@dataclass(frozen=True)
class Controlled:
    """What a control request did: ``changed`` (False: the flow was in that state
    already), the flow as it is after, and for a step the item it started (None:
    nothing waited)."""

    changed: bool
    after: FlowSnapshot
    stepped: dict[str, Any] | None = None


class FlowControls:
    """The controls of one session's flow (see the module doc). The session owns it."""

    def __init__(self, session: Operable, flow: str) -> None:
        self._session = session
        self.flow = flow
        self._lock = asyncio.Lock()

    def status(self) -> str:
        """``running``, ``paused``, ``disabled`` or ``stopping``."""
        return self._session.snapshot().status

    async def apply(self, action: ControlAction, *, wait_s: float = STEP_WAIT_S) -> Controlled:
        """Do ``action`` if the flow's status allows it. Raises :class:`FlowStateError`
        when it is refused (the message says why) and ``QueueError`` when the queue
        is away; may wait ``wait_s`` for a step's item to start."""
        async with self._lock:
            decision = decide(action, self.status())
            if decision.refused is not None:
                raise FlowStateError(f"flow {self.flow!r} {decision.refused}")
            stepped = await self._act(action, wait_s) if decision.apply else None
            return Controlled(decision.apply, self._session.snapshot(), stepped)

    async def _act(self, action: ControlAction, wait_s: float) -> dict[str, Any] | None:
        session = self._session
        match action:
            case "pause":
                await session.pause()
            case "resume":
                await session.resume()
            case "step":
                return await session.step(wait_s=wait_s)
            case "disable":
                await session.disable()
            case "enable":
                await session.enable()
            case _:
                assert_never(action)
        return None
