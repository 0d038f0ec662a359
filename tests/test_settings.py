"""Settings are read from the environment once, at the process boundary, into typed
settings; the library's constructors take those and never look at the
environment themselves (issue 26, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaflow import EngineSettings, FlowBuilder, FlowSession
from mediaflow.config import SpeechSettings, StoreSettings
from mediaflow.gc import GcSettings, sweep_artifacts
from mediaflow.process import FlowProcess
from mediaflow.queue import QueueError, open_queue
from mediaflow.server import AppState, ServerSettings
from mediaflow.store import ArtifactStore, RemoteArtifactStore, open_store
from tests.engine_nodes import Counter, Recorder

# Each would refuse the process if anything but the boundary read it.
UNUSABLE = {
    "MEDIAFLOW_NODE_BUFFER": "lots",
    "MEDIAFLOW_LEASE_MS": "soon",
    "MEDIAFLOW_SQLITE_SYNC": "sometimes",
    "MEDIAFLOW_STORE": "ftp://store.example",
    "MEDIAFLOW_SPEECH_PROCESSES": "several",
    "MEDIAFLOW_SENDFILE": "maybe",
    "MEDIAFLOW_LINK_HISTORY": "none",
    "ARTIFACT_GC_INTERVAL_S": "hourly",
    "ARTIFACT_GC_GRACE_S": "a while",
}


def counting_flow(name: str) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("src", Counter, count=20)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )


@pytest.fixture
def unusable_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name, value in UNUSABLE.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_engine_settings_from_env_reads_every_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEDIAFLOW_NODE_BUFFER", "64")
    monkeypatch.setenv("MEDIAFLOW_LEASE_MS", "2500")
    monkeypatch.setenv("MEDIAFLOW_TRACE", str(tmp_path / "trace.jsonl"))
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", "full")
    monkeypatch.setenv("MEDIAFLOW_STORE", "http://store.example:8765/")
    monkeypatch.setenv("MEDIAFLOW_TOKEN", "secret")
    monkeypatch.setenv("MEDIAFLOW_SPEECH_PROCESSES", "3")
    settings = EngineSettings.from_env()
    assert (settings.node_buffer, settings.lease_ms) == (64, 2500)
    assert settings.trace_path == tmp_path / "trace.jsonl"
    assert settings.sqlite_sync == "FULL"
    assert settings.store == StoreSettings("http://store.example:8765", "secret")
    assert settings.speech == SpeechSettings(processes=3)


@pytest.mark.parametrize(
    "name", ["MEDIAFLOW_NODE_BUFFER", "MEDIAFLOW_STORE", "MEDIAFLOW_SPEECH_PROCESSES"]
)
def test_engine_settings_from_env_refuses_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, UNUSABLE[name])
    with pytest.raises(ValueError, match=name):
        EngineSettings.from_env()


def test_engine_settings_from_env_refuses_a_sync_mode_as_a_queue_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEDIAFLOW_SQLITE_SYNC", UNUSABLE["MEDIAFLOW_SQLITE_SYNC"])
    with pytest.raises(QueueError, match="MEDIAFLOW_SQLITE_SYNC"):
        EngineSettings.from_env()


async def test_a_session_runs_with_its_settings_not_the_environment(
    unusable_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    flow = counting_flow("settled")
    async with FlowSession(flow.build(), tmp_path) as session:
        assert session.settings == EngineSettings()
        assert await session.wait(until_idle=True) == "idle"
    assert Recorder.seen["sink"] == list(range(20))
    given = EngineSettings(node_buffer=8, sqlite_sync="FULL")
    assert FlowSession(flow.build(), tmp_path, settings=given).settings is given


async def test_the_server_state_serves_with_its_settings_not_the_environment(
    unusable_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = AppState.for_serve(tmp_path)
    try:
        assert state.settings == ServerSettings()
    finally:
        await state.close()


async def test_a_sweep_without_settings_takes_the_defaults_not_the_environment(
    unusable_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    queue = open_queue(None, tmp_path)
    try:
        report = await sweep_artifacts(tmp_path, queue)
    finally:
        await queue.close()
    assert report.started_at - report.cutoff == pytest.approx(GcSettings().grace_s)


async def test_a_flow_process_runs_sweeps_and_serves_without_the_environment(
    unusable_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    process = FlowProcess(counting_flow("settled-process").build(), tmp_path, port=0)
    await process.start()
    try:
        assert await process.wait(until_idle=True) == "idle"
    finally:
        await process.stop()
    assert Recorder.seen["sink"] == list(range(20))


def test_open_store_takes_its_settings_not_the_environment(
    unusable_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    local = open_store(tmp_path)
    remote = open_store(tmp_path, StoreSettings("http://store.example:8765", "secret"))
    try:
        assert type(local) is ArtifactStore
        assert isinstance(remote, RemoteArtifactStore)
        assert (remote.base_url, remote.client.token) == ("http://store.example:8765", "secret")
    finally:
        local.close()
        remote.close()
