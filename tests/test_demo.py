"""``mediaflow demo``: the bundled flow runs on virtual devices and the wall has it all."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from mediaflow import load_flow
from mediaflow.cli.demo import demo_flow
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from playwright.async_api import Page

DEMO_FLOW = demo_flow()
LATEST = {("cam", "image"), ("mic", "audio"), ("asr", "text"), ("rec", "video")}


DEMO_NODES = {"cam", "mic", "asr", "rec", "loud"}


def test_the_demo_flow_file_loads() -> None:
    spec = load_flow(DEMO_FLOW)
    assert spec.name == "demo" and set(spec.nodes) == DEMO_NODES
    assert (DEMO_FLOW.parent / "speech" / "commands.wav").stat().st_size < 300_000
    samples = Path(__file__).resolve().parents[1] / "samples"
    assert load_flow(samples / "devices.toml").name == "devices"
    # samples/ shows the demo's grammar for devices.toml: the same file, not a copy.
    assert (samples / "grammar" / "commands.gram").resolve() == (
        DEMO_FLOW.parent / "grammar" / "commands.gram"
    )


def latest_values(flow: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {
        (node["id"], port): out.get("latest")
        for node in flow["nodes"]
        for port, out in node["outputs"].items()
        if out.get("latest") is not None
    }


async def read_events(url: str, seen: list[dict[str, Any]]) -> None:
    async with aiohttp.ClientSession() as client, client.get(f"{url}/api/events") as resp:
        async for line in resp.content:
            if line.startswith(b"data: "):
                seen.append(json.loads(line[6:]))


async def test_demo_serves_frames_chunks_transcripts_and_a_clip(tmp_path: Path, page: Page) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow", "demo", "--for", "120", "--port", "0",
        "--data", str(tmp_path / "data"), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    url = None
    while url is None:
        line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
        assert line, "the demo exited before serving"
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        url = found.group(1) if found else None
    # Keep reading its log: a full stderr pipe would block the demo.
    log_lines: list[bytes] = []
    drain = asyncio.create_task(drain_into(proc.stderr, log_lines))
    try:
        await check_demo(url, page)
    finally:
        if proc.returncode is None:
            # Ctrl-C (SIGINT) stops the demo cleanly, as it would for a user.
            proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 30)
        await drain
    assert code == 0, b"".join(log_lines[-40:]).decode(errors="replace")


async def drain_into(stream: asyncio.StreamReader, lines: list[bytes]) -> None:
    while line := await stream.readline():
        lines.append(line)


async def check_demo(url: str, page: Page) -> None:
    events: list[dict[str, Any]] = []
    reader = asyncio.create_task(read_events(url, events))
    latest: dict[tuple[str, str], Any] = {}
    async with aiohttp.ClientSession() as client:
        deadline = time.monotonic() + 60  # the first clip and transcript take ~5 s
        while time.monotonic() < deadline:
            async with client.get(f"{url}/api/flows/demo") as resp:
                latest = latest_values(await resp.json())
            seen = {e.get("type") for e in events}
            if set(latest) >= LATEST and {"transcript", "loudness"} <= seen:
                break
            await asyncio.sleep(0.1)
        assert set(latest) >= LATEST, sorted(latest)
        clip = latest["rec", "video"]
        assert clip["media_type"] == "video/mp4"
        assert clip["meta"]["audio_codec"] == "aac" and clip["meta"]["duration"] == 4.0
        first_bytes = {"Range": "bytes=0-99"}
        async with client.get(f"{url}/artifacts/{clip['digest']}", headers=first_bytes) as resp:
            assert resp.status == 206
        async with client.get(url + "/") as resp:
            assert resp.status == 200
    # What a person sees: the wall in Chromium shows a frame, audio chunks
    # arriving, a transcript line and a clip to play.
    await page.goto(url + "/")
    await page.wait_for_selector("[data-widget='cam.image'] img[src]", timeout=15_000)
    await page.wait_for_selector("[data-widget='asr.text'] .lines li", timeout=15_000)
    await page.wait_for_selector("[data-widget='rec.video'] .clips button", timeout=15_000)
    await page.wait_for_function(
        """() => /[1-9]\\d* chunks queued/.test(
            document.querySelector("[data-widget='mic.audio']").textContent)""",
        timeout=15_000,
    )
    assert page_errors(page) == []
    assert latest["asr", "text"] in {"turn on the lights", "what time is it", "open the door"}
    assert any(e.get("type") == "transcript" for e in events)
    # The spoken stretches are loudness events, and on the recorder's timeline.
    assert any(e.get("type") == "loudness" and e.get("source") == "mic" for e in events)
    recordings = f"{url}/api/recordings/demo/rec"
    async with aiohttp.ClientSession() as client, client.get(recordings) as resp:
        timeline = await resp.json()
    assert timeline["spans"] and "mic" in timeline["sources"]
    assert {e["type"] for e in timeline["events"]} >= {"loudness", "transcript"}
    reader.cancel()


def test_a_demo_missing_a_file_fails_naming_it(
    monkeypatch: Any, capsys: Any, tmp_path: Path
) -> None:
    from mediaflow.cli import demo as cli_demo

    copied = tmp_path / "demo"
    cli_demo.copy_demo(copied)
    (copied / "speech" / "commands.wav").unlink()
    monkeypatch.setattr(cli_demo, "DEMO_DIR", copied)
    assert cli_demo.main(["--for", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mediaflow demo: this installation of mediaflow lacks the demo's ")
    assert "speech/commands.wav" in err and str(copied) in err
    assert "demo.toml" not in err.split(" in ")[0]


def test_the_demo_copies_out_and_runs_from_the_copy(tmp_path: Path) -> None:
    from mediaflow.cli import demo as cli_demo

    target = tmp_path / "mine"
    written = cli_demo.copy_demo(target)
    assert [p.relative_to(target).as_posix() for p in written] == list(cli_demo.DEMO_FILES)
    for name in cli_demo.DEMO_FILES:
        assert (target / name).read_bytes() == (cli_demo.DEMO_DIR / name).read_bytes()
    spec = load_flow(target / "demo.toml")
    assert set(spec.nodes) == DEMO_NODES
    with pytest.raises(FileExistsError, match=r"demo\.toml already exists"):
        cli_demo.copy_demo(target)
