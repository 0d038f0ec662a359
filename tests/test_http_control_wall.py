"""The wall's flow controls in a real browser (Chromium via Playwright) next to a real
running flow behind a token: no buttons without the token; with it (a ``#token=``
link) pause, step, disable / enable and a dead letter's retry, each seen on the
page and in the flow."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.server import AppState, ServerSettings
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.engine_nodes import Counter
from tests.http_support import serve

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

TOKEN = "wall-token"


class Once(Node):
    """Fails chunk 1 on its first delivery; records every run as (seq, deliveries)."""

    inputs: ClassVar[Mapping[str, str]] = {"chunk": "json"}
    runs: ClassVar[list[tuple[int, int]]] = []

    async def setup(self, ctx: Context) -> None:
        Once.runs = []

    async def run(self, ctx: Context) -> None:
        assert ctx.item is not None
        seq = ctx.inputs["chunk"]["seq"]
        Once.runs.append((seq, ctx.item.deliveries))
        if seq == 1 and ctx.item.deliveries == 1:
            raise RuntimeError("once is enough")


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_the_wall_operates_a_flow_with_the_token(
    tmp_path: Path, page: Page, browser: Browser
) -> None:
    flow = (
        FlowBuilder("ops")
        .add("src", Counter, count=2000, period_s=0.02)
        .add("sink", Once, inputs={"chunk": "src.chunk"})
    )
    settings = EngineSettings(max_attempts=1, backlog_interval_s=0.2)
    session = FlowSession(flow.build(), tmp_path / "data", settings=settings)
    await session.start()
    try:
        state = AppState.for_session(session, settings=ServerSettings(token=TOKEN))
        async with serve(tmp_path, state=state) as served:
            status = ".flow[data-flow='ops'] .flow-status"
            controls = ".flow[data-flow='ops'] .controls"

            # Without the token: the status shows, the controls do not, "operate…" does.
            stranger = await (await browser.new_context()).new_page()
            await stranger.goto(served.url + "/")
            await stranger.wait_for_selector(f"{status}[data-status='running']", timeout=15_000)
            await stranger.wait_for_selector("#unlock", state="visible", timeout=5_000)
            assert await stranger.is_hidden(controls)
            await stranger.context.close()

            # With it: the buttons, and the token leaves the address bar.
            await page.goto(f"{served.url}/#token={TOKEN}")
            await page.wait_for_selector(f"{controls} button[data-action='pause']:enabled",
                                         timeout=15_000)  # fmt: skip
            assert await page.evaluate("() => window.location.hash") == ""
            assert await page.is_hidden("#unlock")

            await page.click(f"{controls} button[data-action='pause']")
            await page.wait_for_selector(f"{status}[data-status='paused']", timeout=5_000)
            assert session.snapshot().status == "paused"
            await asyncio.sleep(0.3)
            ran = len(Once.runs)
            await page.click(f"{controls} button[data-action='step']")
            await page.wait_for_selector(f"{controls} .control-message:has-text('stepped sink')")
            await eventually(lambda: len(Once.runs) == ran + 1)
            await asyncio.sleep(0.2)
            assert len(Once.runs) == ran + 1  # exactly one
            await page.click(f"{controls} button[data-action='resume']")
            await page.wait_for_selector(f"{status}[data-status='running']", timeout=5_000)

            await page.click(f"{controls} button[data-action='toggle']")  # disable
            await page.wait_for_selector(f"{status}[data-status='disabled']", timeout=5_000)
            assert session.snapshot().status == "disabled"
            assert await page.is_disabled(f"{controls} button[data-action='pause']")
            await page.click(f"{controls} button[data-action='toggle']:has-text('enable')")
            await page.wait_for_selector(f"{status}[data-status='running']", timeout=5_000)

            # The dead letter of chunk 1: listed, retried, run again as a redelivery.
            await page.click(f"{controls} .dead-letters summary")
            retry = f"{controls} .dead-list li button[data-action='retry']"
            await page.wait_for_selector(retry, timeout=10_000)
            await page.click(retry)
            await page.wait_for_selector(f"{controls} .dead-letters[data-count='0']", timeout=5_000)
            await eventually(lambda: (1, 2) in Once.runs)
            if shot := os.environ.get("MEDIAFLOW_WALL_SCREENSHOT"):
                await page.screenshot(path=shot, full_page=True)
            assert page_errors(page) == []
    finally:
        await session.stop()
