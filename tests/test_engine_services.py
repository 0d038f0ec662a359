"""Services the nodes of one session share (``ctx.more.shared``): one per ``make``,
made from the session's settings the first time a node asks, closed (in a thread)
when the session closes, also when its start fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mediaflow import Context, EngineSettings, FlowBuilder, FlowSession, Node
from mediaflow.engine.services import Services
from tests.engine_nodes import Counter

closed: list[str] = []


class Probe:
    """A service: the settings it was made with, and the thread that closed it."""

    def __init__(self, settings: EngineSettings, name: str = "probe") -> None:
        self.settings = settings
        self.name = name
        self.closed_in: int | None = None

    @classmethod
    def for_settings(cls, settings: EngineSettings) -> Probe:
        return cls(settings)

    def close(self) -> None:
        self.closed_in = threading.get_ident()
        closed.append(self.name)


class User(Node):
    """Asks for the session's :class:`Probe` in ``setup``; ``fail`` makes setup fail after."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    probes: ClassVar[dict[str, Probe]] = {}

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def setup(self, ctx: Context) -> None:
        User.probes[ctx.node] = ctx.more.shared(Probe.for_settings)
        if self.fail:
            raise RuntimeError("setup failed")

    async def run(self, ctx: Context) -> None:
        assert ctx.more.shared(Probe.for_settings) is User.probes[ctx.node]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    User.probes.clear()
    closed.clear()


def sharing_flow(name: str, *, fail: bool = False) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("src", Counter, count=5)
        .add("a", User, inputs={"chunk": "src.chunk"})
        .add("b", User, inputs={"chunk": "src.chunk"}, fail=fail)
    )


async def test_the_nodes_of_a_session_share_one_service_closed_with_it(tmp_path: Path) -> None:
    settings = EngineSettings(node_buffer=8)
    async with FlowSession(sharing_flow("shared").build(), tmp_path, settings=settings) as session:
        assert await session.wait(until_idle=True) == "idle"
        probe = User.probes["a"]
        assert User.probes["b"] is probe
        assert probe.settings is settings
        assert probe.closed_in is None
    assert probe.closed_in is not None and probe.closed_in != threading.get_ident()
    assert closed == ["probe"]
    # The next session has its own.
    async with FlowSession(sharing_flow("shared").build(), tmp_path, settings=settings):
        assert User.probes["a"] is not probe
    assert closed == ["probe", "probe"]


async def test_a_session_whose_start_fails_closes_what_its_nodes_made(tmp_path: Path) -> None:
    session = FlowSession(sharing_flow("failing", fail=True).build(), tmp_path)
    with pytest.raises(RuntimeError, match="setup failed"):
        await session.start()
    assert User.probes["b"].closed_in is not None
    assert closed == ["probe"]


def test_threads_asking_together_get_the_one_made_once() -> None:
    made: list[Probe] = []

    def slow(settings: EngineSettings) -> Probe:
        time.sleep(0.05)  # long enough for every thread to be asking
        made.append(Probe(settings))
        return made[-1]

    services = Services(EngineSettings())
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: services.shared(slow), range(8)))
    assert len(made) == 1
    assert all(probe is made[0] for probe in got)


async def test_each_make_has_its_own_and_the_last_made_closes_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def first(settings: EngineSettings) -> Probe:
        return Probe(settings, "first")

    def second(settings: EngineSettings) -> Probe:
        return Probe(settings, "second")

    class Broken:
        def close(self) -> None:
            closed.append("broken")
            raise OSError("cannot close")

    settings = EngineSettings()
    services = Services(settings)
    one = services.shared(first)
    assert services.shared(Probe.for_settings) is services.shared(Probe.for_settings)
    assert services.shared(first) is one and services.shared(second) is not one
    assert services.shared(lambda s: object()) is not None  # nothing to close: fine
    services.shared(lambda s: Broken())
    await services.close()
    # A close that fails is logged; the others still close.
    assert closed == ["broken", "second", "probe", "first"]
    assert "closing the shared Broken failed" in caplog.text
    with pytest.raises(RuntimeError, match="closed"):
        services.shared(first)
    await services.close()  # idempotent
    assert closed == ["broken", "second", "probe", "first"]


def test_a_make_that_raises_keeps_nothing() -> None:
    calls: list[int] = []

    def flaky(settings: EngineSettings) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("not yet")
        return object()

    services = Services(EngineSettings())
    with pytest.raises(ValueError, match="not yet"):
        services.shared(flaky)
    made = services.shared(flaky)
    assert services.shared(flaky) is made
    assert len(calls) == 2
