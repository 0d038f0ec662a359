"""The wall gets each value once, after it is durable (issue 26, item 4).

A flow's source says lines when the test tells it to, on a port a sink reads (the
group commit carries it) and on one nobody reads (the batched write of latest
values carries it). The queue holds its commits back when the test asks: a value
emitted then is not durable, and neither the event stream nor the poll may show it.
What reaches a reader is watched where it arrives: the ``latest`` events of
``/api/events``, the poll of ``/api/flows/{flow}``, and in Chromium, what the
wall's event stream carried and what it handed to the widgets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.engine.events import EventBus
from mediaflow.queue import WorkQueue, open_queue
from mediaflow.queue.contract import EmissionRun, NewItem, WorkItem
from mediaflow.server import AppState, ServerSettings
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.http_support import Served, serve, wait_until
from tests.test_engine import FAST

if TYPE_CHECKING:
    from playwright.async_api import Page

PORTS = ("line", "note")  # read by the sink; read by nobody
QUIET_S = 0.8  # longer than the batched write of latest values (0.5 s) and the throttle
POLLS_S = 2.5  # the wall polls every 0.5 s: five polls, and quiet events for 2 s


class Said(Node):
    """Says each word the test puts in ``words`` on both ports; ends at None."""

    outputs: ClassVar[Mapping[str, str]] = {"line": "text", "note": "text"}
    words: ClassVar[asyncio.Queue[str | None]]

    async def run(self, ctx: Context) -> None:
        while (word := await Said.words.get()) is not None:
            await ctx.emit("line", word)
            await ctx.emit("note", word)


class Sink(Node):
    inputs: ClassVar[Mapping[str, str]] = {"line": "text"}

    async def run(self, ctx: Context) -> None:
        return None


class HeldCommits:
    """A queue whose writes wait while held, and that counts the values that landed
    per emitting port (``said.line``; ``said.note`` for the batched latest values)."""

    def __init__(self, inner: WorkQueue) -> None:
        self._inner = inner
        self.open = asyncio.Event()
        self.open.set()
        self.durable: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(
        self, batch: Sequence[EmissionRun | NewItem], **options: Any
    ) -> list[WorkItem]:
        await self.open.wait()
        claimed = await self._inner.commit(batch, **options)
        for run in batch:
            if isinstance(run, EmissionRun):  # not a run's source items
                self.durable[run.src] = self.durable.get(run.src, 0) + len(run.values)
        return claimed

    async def put_latest(self, values: Mapping[tuple[str, str, str], Any]) -> None:
        await self.open.wait()
        await self._inner.put_latest(values)
        for _, node, port in values:
            self.durable[f"{node}.{port}"] = self.durable.get(f"{node}.{port}", 0) + 1


@asynccontextmanager
async def said_flow(tmp_path: Path) -> AsyncIterator[tuple[Served, FlowSession, HeldCommits]]:
    Said.words = asyncio.Queue()
    queue = HeldCommits(open_queue(None, tmp_path))
    spec = FlowBuilder("said").add("said", Said).add("sink", Sink, inputs={"line": "said.line"})
    session = FlowSession(
        spec.build(), tmp_path, queue=cast(WorkQueue, queue), settings=FAST, bus=EventBus()
    )
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings())
        async with serve(tmp_path, state=state) as served:
            yield served, session, queue
    finally:
        queue.open.set()
        Said.words.put_nowait(None)
        await session.stop()


def emitted(session: FlowSession, word: str, count: int) -> bool:
    """Whether both ports' latest emission is ``word``, the ``count``-th of each."""
    snapshot = session.snapshot()
    return all(
        snapshot.latest.get(("said", port)) == word
        and snapshot.latest_ids.get(("said", port), {}).get("seq") == count
        for port in PORTS
    )


async def polled(served: Served) -> dict[str, tuple[Any, Any]]:
    """Each port's value and seq as ``GET /api/flows/said`` shows them."""
    async with served.client.get(served.url + "/api/flows/said") as response:
        view = await response.json()
    (said,) = (node for node in view["nodes"] if node["id"] == "said")
    return {
        port: (said["outputs"][port]["latest"], said["outputs"][port].get("seq")) for port in PORTS
    }


class Heard:
    """One ``/api/events?types=latest`` reader: ``(port, value, seq, durable then)`` of
    each of ``said``'s values, in the order they came."""

    def __init__(self, served: Served, queue: HeldCommits) -> None:
        self.values: list[tuple[str, Any, int | None, int]] = []
        self._served, self._queue = served, queue
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        url = self._served.url + "/api/events?types=latest"
        async with self._served.client.get(url) as response:
            async for line in response.content:
                if line.startswith(b"data: "):
                    data = json.loads(line[6:])
                    port = data["port"]
                    durable = self._queue.durable.get(f"said.{port}", 0)
                    self.values.append((port, data["value"], data.get("seq"), durable))

    def of(self, port: str) -> list[tuple[Any, int | None]]:
        return [(value, seq) for p, value, seq, _ in self.values if p == port]

    def close(self) -> None:
        self._task.cancel()


async def say(session: FlowSession, word: str, count: int) -> None:
    Said.words.put_nowait(word)
    await wait_until(lambda: emitted(session, word, count))


async def test_a_reader_hears_each_value_once_and_only_once_it_is_durable(tmp_path: Path) -> None:
    async with said_flow(tmp_path) as (served, session, queue):
        first = Heard(served, queue)
        try:
            await asyncio.sleep(0.2)  # the stream is open
            await say(session, "one", 1)
            await wait_until(lambda: all(first.of(p) == [("one", 1)] for p in PORTS))
            assert await polled(served) == {p: ("one", 1) for p in PORTS}

            # Emitted, not durable: nobody is told, the poll keeps the durable value.
            queue.open.clear()
            await say(session, "two", 2)
            await asyncio.sleep(QUIET_S)
            assert all(first.of(p) == [("one", 1)] for p in PORTS), first.values
            assert await polled(served) == {p: ("one", 1) for p in PORTS}
            queue.open.set()
            await wait_until(lambda: all(first.of(p)[-1] == ("two", 2) for p in PORTS))
            assert await polled(served) == {p: ("two", 2) for p in PORTS}

            # A reader that comes now starts with each port's value, once.
            second = Heard(served, queue)
            try:
                await wait_until(lambda: all(second.of(p) == [("two", 2)] for p in PORTS))
                # The same words again is a new value: each reader hears it once.
                await say(session, "two", 3)
                await wait_until(lambda: all(second.of(p)[-1] == ("two", 3) for p in PORTS))
                await asyncio.sleep(QUIET_S)
                for port in PORTS:
                    assert first.of(port) == [("one", 1), ("two", 2), ("two", 3)], first.values
                    assert second.of(port) == [("two", 2), ("two", 3)], second.values
            finally:
                second.close()
        finally:
            first.close()
    # Each value was durable before its event reached the reader.
    assert all(seq is not None and seq <= durable for _, _, seq, durable in first.values)


# Records, in the page, every `latest` value the wall's event stream carried and
# every value the wall handed to a widget of flow `said` (FlowView.offer, where
# events and polls both end).
HEAR = """
(() => {
  window.__heard = [];
  const Native = window.EventSource;
  window.EventSource = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("latest", (message) => {
        const data = JSON.parse(message.data);
        if (data.flow === "said") window.__heard.push([data.port, data.value, data.seq]);
      });
    }
  };
})();
"""
WATCH_OFFERS = """
() => {
  window.__offered = [];
  const flow = window.MediaflowWall.flows.flows.get("said");
  const offer = flow.offer.bind(flow);
  flow.offer = (node, port, value, ident) => {
    window.__offered.push([port, value, ident && ident.seq !== undefined ? ident.seq : null]);
    return offer(node, port, value, ident);
  };
}
"""
LINES = "[data-widget='said.line'] .lines li"


async def test_the_wall_takes_each_value_once_after_its_commit(tmp_path: Path, page: Page) -> None:
    async with said_flow(tmp_path) as (served, session, queue):
        await page.add_init_script(HEAR)
        await page.goto(served.url + "/")
        await page.wait_for_selector("[data-widget='said.line']")
        await page.evaluate(WATCH_OFFERS)
        await say(session, "one", 1)
        await page.wait_for_function("() => window.__heard.length === 2")  # both ports

        queue.open.clear()
        await say(session, "two", 2)
        await asyncio.sleep(POLLS_S)
        assert shown(await page.locator(LINES).all_inner_texts()) == ["1.one"]
        queue.open.set()
        await page.wait_for_function(f"() => document.querySelectorAll(`{LINES}`).length === 2")
        await say(session, "two", 3)
        await page.wait_for_function(f"() => document.querySelectorAll(`{LINES}`).length === 3")
        await asyncio.sleep(POLLS_S)

        heard = await page.evaluate("() => window.__heard")
        offered = await page.evaluate("() => window.__offered")
        lines = await page.locator(LINES).all_inner_texts()
    expected = [
        [port, word, seq] for word, seq in (("one", 1), ("two", 2), ("two", 3)) for port in PORTS
    ]
    assert sorted(heard, key=lambda v: (v[2], v[0])) == expected, heard  # the stream: once each
    assert sorted(offered, key=lambda v: (v[2], v[0])) == expected, offered  # to the widgets
    assert shown(lines) == ["1.one", "2.two", "3.two"]

    assert page_errors(page) == []


def shown(lines: list[str]) -> list[str]:
    return [line.replace("\n", "") for line in lines]


class Burst(Node):
    """Five lines and five numbers, each value in a commit of its own, in far less
    than the throttle's tenth of a second."""

    outputs: ClassVar[Mapping[str, str]] = {"line": "text", "n": "number"}

    async def run(self, ctx: Context) -> None:
        for i in range(1, 6):
            await ctx.emit("line", f"line {i}")
            await ctx.emit("n", i)
            await ctx.more.flush()


async def test_every_line_of_a_text_port_is_told_and_a_number_port_is_throttled(
    tmp_path: Path,
) -> None:
    bus = EventBus()
    heard: list[tuple[str, int]] = []
    bus.listen(
        lambda e: heard.append((e.data["port"], e.data["seq"])) if e.type == "latest" else None
    )
    spec = FlowBuilder("burst").add("burst", Burst).add("sink", Sink, inputs={"line": "burst.line"})
    session = FlowSession(spec.build(), tmp_path, settings=FAST, bus=bus)
    await session.start()
    try:
        assert await asyncio.wait_for(session.wait(until_idle=True), 30) == "idle"
        await asyncio.sleep(0.3)  # the throttle ends a burst with its last value
    finally:
        await session.stop()
    assert [seq for port, seq in heard if port == "line"] == [1, 2, 3, 4, 5]
    numbers = [seq for port, seq in heard if port == "n"]
    assert numbers[-1] == 5 and len(numbers) < 5, numbers
