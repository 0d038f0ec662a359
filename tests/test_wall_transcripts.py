"""Transcripts on the wall the way people read them, in Chromium against the real demo.

The demo's microphone loops spoken grammar sentences through the speech node. The
wall must show each finished utterance once (``asr.text``: a list that only grows),
the hypothesis being spoken as one live line (``asr.partial``) that is replaced and
goes when the utterance ends, and readable line numbers past 9. What the page shows
is compared with what the server emitted (its ``transcript`` events), not with
hardcoded sentences. The wall's decisions (``static/text.js``) are checked as pure
functions too, and the engine's emission identities that they rely on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import aiohttp

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.server import ServerSettings
from mediaflow.server.state import AppState
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.demo_process import demo_fixture, demo_url_fixture  # noqa: F401 - fixtures
from tests.http_support import serve, wait_until

if TYPE_CHECKING:
    from playwright.async_api import Page

FINALS = "[data-widget='asr.text'] .lines"
PARTIAL = "[data-widget='asr.partial']"
LINES_WANTED = 10  # numbering past 9 is part of what is checked

# Records what the page shows after every DOM change: a test of "a single element,
# replaced" must see the states in between, not only the last one.
OBSERVE = """
(() => {
  window.__wall = { snapshots: [], finals: [] };
  const snap = () => {
    const list = document.querySelector("[data-widget='asr.text'] .lines");
    const widget = document.querySelector("[data-widget='asr.partial']");
    if (!list || !widget) return;
    const lines = [...list.children];
    const live = widget.querySelectorAll(".live-line");
    const shown = [...live].filter((e) => !e.hidden);
    const last = lines[lines.length - 1];
    window.__wall.snapshots.push({
      lines: lines.length,
      lastItem: last && last.dataset.item !== undefined ? Number(last.dataset.item) : null,
      liveElements: live.length,
      listItemsInPartial: widget.querySelectorAll("li").length,
      live: shown.map((e) => ({ text: e.textContent,
        item: e.dataset.item !== undefined ? Number(e.dataset.item) : null })),
    });
  };
  new MutationObserver(snap).observe(document, {
    subtree: true, childList: true, characterData: true, attributes: true,
    attributeFilter: ["hidden", "data-item"],
  });
})();
"""


# -- the demo, in a subprocess --------------------------------------------------------


async def transcripts(url: str, seen: list[dict[str, Any]]) -> None:
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{url}/api/events?types=transcript&after=0") as resp,  # from the start
    ):
        async for line in resp.content:
            if line.startswith(b"data: "):
                seen.append(json.loads(line[6:]))


async def test_the_wall_shows_each_utterance_once_and_one_live_hypothesis(
    demo_url: str, page: Page
) -> None:
    emitted: list[dict[str, Any]] = []
    reader = asyncio.create_task(transcripts(demo_url, emitted))
    try:
        await page.add_init_script(OBSERVE)
        await page.goto(demo_url + "/")
        await page.wait_for_function(
            f"(n) => document.querySelectorAll(`{FINALS} > li`).length >= n",
            arg=LINES_WANTED,
            timeout=35_000,
        )
        shown = await page.evaluate(
            f"""() => [...document.querySelectorAll(`{FINALS} > li`)].map((li) => ({{
                text: li.querySelector(".t").textContent,
                number: li.querySelector(".n").textContent,
                item: li.dataset.item === undefined ? null : Number(li.dataset.item),
            }}))"""
        )
        recorded = await page.evaluate("() => window.__wall")
        geometry = await page.evaluate(
            f"""() => [...document.querySelectorAll(`{FINALS} > li`)].map((li) => {{
                const list = li.parentElement.getBoundingClientRect();
                const n = li.querySelector(".n"), t = li.querySelector(".t");
                const nb = n.getBoundingClientRect(), tb = t.getBoundingClientRect();
                return {{ left: nb.left - list.left, gap: tb.left - nb.right,
                    fits: n.scrollWidth <= n.clientWidth, width: nb.width }};
            }})"""
        )
        panel = await page.evaluate(
            """() => ({ hidden: document.getElementById("transcripts").hidden,
                lines: document.querySelectorAll(".transcript-lines li").length })"""
        )
        # Every line shown came from the server by now; let its events catch up.
        try:
            await wait_until(lambda: finals_by_item(emitted).keys() >= {s["item"] for s in shown})
        except AssertionError:
            raise AssertionError((shown, emitted)) from None
    finally:
        reader.cancel()

    finals = finals_by_item(emitted)
    partial_texts = {e["text"] for e in emitted if e.get("final") is False}
    assert partial_texts, "the speech node published no hypotheses"

    # Finished utterances only, each emission once, in the order they were emitted:
    # the list is a run of consecutive finals of the server's.
    items = [s["item"] for s in shown]
    assert None not in items and len(set(items)) == len(items), shown
    assert [s["text"] for s in shown] == [finals[i] for i in items]
    order = sorted(finals)
    first = order.index(items[0])
    assert items == order[first : first + len(items)], (items, order)
    # No hypothesis in the list: a bare prefix ("open", "open the") is never a line.
    whole = set(finals.values())
    assert not any(s["text"] not in whole for s in shown)
    assert any(t not in whole for t in partial_texts)  # the demo does speak prefixes
    # The same sentence more than once is several lines (the demo loops its track).
    texts = [s["text"] for s in shown]
    assert len(set(texts)) < len(texts)
    # Transcripts went to the widgets, not (also) to the panel.
    assert panel == {"hidden": True, "lines": 0}

    # The hypothesis: one element, replaced as the speaker goes on, never one of an
    # utterance already listed, and gone between utterances.
    snapshots = recorded["snapshots"]
    assert snapshots
    assert {s["liveElements"] for s in snapshots} == {1}
    assert {s["listItemsInPartial"] for s in snapshots} == {0}
    live = [s for s in snapshots if s["live"]]
    assert len({s["live"][0]["text"] for s in live}) >= 3
    assert {s["live"][0]["text"] for s in live} <= partial_texts
    for s in live:
        if s["lastItem"] is not None and s["live"][0]["item"] is not None:
            assert s["live"][0]["item"] >= s["lastItem"], (s, snapshots[:40])
    went = [
        i for i in range(1, len(snapshots)) if snapshots[i - 1]["live"] and not snapshots[i]["live"]
    ]
    assert went, "the live line never went away"

    # Numbers: explicit, counting from 1, wholly visible (10 and up included).
    assert [s["number"] for s in shown] == [f"{i}." for i in range(1, len(shown) + 1)]
    for box in geometry:
        assert box["left"] >= 0 and box["gap"] >= 0 and box["fits"], geometry
    assert page_errors(page) == []


def finals_by_item(events: list[dict[str, Any]]) -> dict[int, str]:
    return {e["item"]: e["text"] for e in events if e.get("final") is not False and "item" in e}


# -- the wall's decisions, as pure functions ---------------------------------------


async def test_text_decisions(tmp_path: Path, page: Page) -> None:
    async with serve(tmp_path) as served:
        await page.goto(served.url + "/")
        await page.wait_for_function("() => window.MediaflowText !== undefined")
        result = await page.evaluate(
            """() => {
              const T = window.MediaflowText;
              const said = { text: "open the door", item: 7 };
              const again = { text: "open the door", item: 9 };
              const polled = { text: "open the door", seq: "1/3", item: 7 };
              const step = (state, ...ticks) => ticks.reduce((s, [t, e, now]) =>
                T.live(s, { type: t, entry: e }, now), state);
              const p = (text, item, start) => ({ text, item, start });
              const speaking = step(T.LIVE_IDLE, ["partial", p("open", 5, 1.0), 0],
                ["partial", p("open the", 6, 1.0), 100]);
              return {
                eventThenPoll: T.findShown([said], polled),
                pollThenEvent: T.findShown([polled], said),
                saidTwice: T.findShown([said], again),
                sameTextNoIdentity: T.findShown([{ text: "x" }], { text: "x" }),
                twoEmissionsOfOneItem: T.findShown([polled], { ...polled, seq: "1/4" }),
                mergedSeq: T.merged(said, polled).seq,
                speaking: speaking.line.text,
                endedByFinal: step(speaking, ["final", p("open the door", 8, 1.0), 200]).line,
                sameChunkNext: step(speaking, ["final", p("open the door", 8, 1.0), 200],
                  ["partial", p("turn", 8, 2.5), 210]).line.text,
                lateHypothesis: step(speaking, ["final", p("open the door", 8, 1.0), 200],
                  ["partial", p("open the", 6, 1.0), 220]).line,
                olderIgnored: step(speaking, ["partial", p("open", 5, 1.0), 300]).line.text,
                stale: step(speaking, ["clock", null, 100 + T.STALE_MS + 1]).line,
                fresh: step(speaking, ["clock", null, 100 + T.STALE_MS - 1]).line.text,
                ports: [
                  T.transcriptPort({ final: true }, [{ port: "text", live: false },
                    { port: "partial", live: true }]),
                  T.transcriptPort({ final: false }, [{ port: "text", live: false },
                    { port: "partial", live: true }]),
                  T.transcriptPort({ port: "other" }, [{ port: "text", live: false }]),
                  T.transcriptPort({}, [{ port: "a", live: false }, { port: "b", live: false }]),
                ],
                livePorts: ["partial", "asr_partial", "text", "partially"].map(T.isLivePort),
              };
            }"""
        )
    assert result == {
        "eventThenPoll": 0,
        "pollThenEvent": 0,
        "saidTwice": -1,
        "sameTextNoIdentity": 0,
        "twoEmissionsOfOneItem": -1,
        "mergedSeq": "1/3",
        "speaking": "open the",
        "endedByFinal": None,
        "sameChunkNext": "turn",
        "lateHypothesis": None,
        "olderIgnored": "open the",
        "stale": None,
        "fresh": "open the",
        "ports": ["text", "partial", None, None],
        "livePorts": [True, True, False, False],
    }
    assert page_errors(page) == []


# -- the engine names the emission a value or an event is -------------------------


class Words(Node):
    """Emits three words, the first twice: one item each for ``Echo``."""

    outputs: ClassVar[Mapping[str, str]] = {"word": "text"}

    async def run(self, ctx: Context) -> None:
        for word in ("same", "same", "other"):
            await ctx.emit("word", word)


class Echo(Node):
    """Says each word on ``text`` and in a ``transcript`` event, as the speech node does."""

    inputs: ClassVar[Mapping[str, str]] = {"word": "text"}
    outputs: ClassVar[Mapping[str, str]] = {"text": "text"}

    async def run(self, ctx: Context) -> None:
        await ctx.emit("text", ctx.inputs["word"])
        ctx.more.publish("transcript", text=ctx.inputs["word"], final=True)


async def test_latest_values_and_node_events_carry_their_emission(tmp_path: Path) -> None:
    spec = (
        FlowBuilder("ids").add("src", Words).add("echo", Echo, inputs={"word": "src.word"}).build()
    )
    bus = EventBus()
    seen: list[tuple[str, dict[str, Any]]] = []
    bus.listen(lambda e: seen.append((e.type, dict(e.data))))
    session = FlowSession(spec, tmp_path / "data", settings=EngineSettings(), bus=bus)
    await session.start()
    try:
        await wait_until(lambda: sum(t == "transcript" for t, _ in seen) == 3, timeout=10)
        ids = session.snapshot().latest_ids
        events = [d for t, d in seen if t == "transcript"]
        items = [e["item"] for e in events]
        assert [e["text"] for e in events] == ["same", "same", "other"]
        assert len(set(items)) == 3  # the same word twice is two items
        assert ids["src", "word"] == {"seq": 3}  # a source runs for no item
        assert ids["echo", "text"] == {"seq": 3, "item": items[-1]}

        # `latest` events are throttled per port; the burst ends with its last value.
        def echoed() -> list[dict[str, Any]]:
            return [d for t, d in seen if t == "latest" and d["node"] == "echo"]

        await wait_until(lambda: any(d["seq"] == 3 for d in echoed()))
        latest = echoed()
        assert latest[-1]["item"] == items[-1] and latest[-1]["value"] == "other"
        state = AppState.for_session(session, settings=ServerSettings())
        async with (
            serve(tmp_path, state=state) as served,
            served.client.get(served.url + "/api/flows/ids") as resp,
        ):
            view = await resp.json()
        echo = next(n for n in view["nodes"] if n["id"] == "echo")
        assert echo["outputs"]["text"] == {
            "kind": "text", "latest": "other", "seq": 3, "item": items[-1],
        }  # fmt: skip
    finally:
        await session.stop()
