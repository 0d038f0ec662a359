"""FlowProcess from Python: the session, the server beside it and a stop, as
``mediaflow run --port`` has them, without the command line."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

from mediaflow import FlowBuilder
from mediaflow.gc import GcSettings
from mediaflow.process import FlowProcess, PartFailed
from tests.connector_helpers import FAST, MediaSink

LAVFI_1S = "lavfi:testsrc2=size=160x120:rate=10,trim=duration=1"  # 10 frames, then the end


def camera_flow(name: str) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("cam", "camera", device=LAVFI_1S, fps=10, realtime=False)
        .add("sink", MediaSink, inputs={"image": "cam.image"})
    )


async def test_a_flow_process_runs_serves_and_stops(tmp_path: Path) -> None:
    process = FlowProcess(
        camera_flow("procvirtual").build(),
        tmp_path,
        settings=FAST,
        gc_settings=GcSettings(interval_s=0.0),
        port=0,
    )
    await process.start()
    try:
        assert process.url is not None
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{process.url}/healthz") as health:
                assert health.status == 200
            async with http.get(f"{process.url}/api/flows/procvirtual") as view:
                assert view.status == 200
                assert (await view.json())["name"] == "procvirtual"
        reason = await asyncio.wait_for(process.wait(until_idle=True), 30)
    finally:
        outcome = await process.stop()
    assert reason == "idle"
    assert outcome.items > 0
    images = [r for r in MediaSink.received.pop("sink", []) if r.port == "image"]
    assert len(images) == 10
    MediaSink.received.clear()
    with pytest.raises(aiohttp.ClientConnectionError):  # the server stopped with it
        async with aiohttp.ClientSession() as http, http.get(f"{process.url}/healthz"):
            pass


async def test_a_server_that_cannot_listen_leaves_nothing_running(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = FlowProcess(camera_flow("proctaken").build(), tmp_path, settings=FAST, port=port)
        with pytest.raises(PartFailed) as failed:
            await process.start()
    assert failed.value.part == "server" and isinstance(failed.value.cause, OSError)
    MediaSink.received.clear()
    # The session stopped with it: the same flow starts again on the same data.
    again = FlowProcess(camera_flow("proctaken").build(), tmp_path, settings=FAST)
    await again.start()
    await again.stop()
    MediaSink.received.clear()
