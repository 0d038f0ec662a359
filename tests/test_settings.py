"""Settings are read from the environment once, at the process boundary, into typed
settings; the library's constructors take those and never look at the
environment themselves (issue 26, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaflow import EngineSettings, FlowBuilder, FlowSession
from mediaflow.config import StoreSettings
from mediaflow.queue import QueueError
from tests.engine_nodes import Counter, Recorder

# Each would refuse the process if anything but the boundary read it.
UNUSABLE = {
    "MEDIAFLOW_NODE_BUFFER": "lots",
    "MEDIAFLOW_LEASE_MS": "soon",
    "MEDIAFLOW_SQLITE_SYNC": "sometimes",
    "MEDIAFLOW_STORE": "ftp://store.example",
}


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
    settings = EngineSettings.from_env()
    assert (settings.node_buffer, settings.lease_ms) == (64, 2500)
    assert settings.trace_path == tmp_path / "trace.jsonl"
    assert settings.sqlite_sync == "FULL"
    assert settings.store == StoreSettings("http://store.example:8765", "secret")


@pytest.mark.parametrize("name", ["MEDIAFLOW_NODE_BUFFER", "MEDIAFLOW_STORE"])
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
    flow = (
        FlowBuilder("settled")
        .add("src", Counter, count=20)
        .add("sink", Recorder, inputs={"chunk": "src.chunk"})
    )
    async with FlowSession(flow.build(), tmp_path) as session:
        assert session.settings == EngineSettings()
        assert await session.wait(until_idle=True) == "idle"
    assert Recorder.seen["sink"] == list(range(20))
    given = EngineSettings(node_buffer=8, sqlite_sync="FULL")
    assert FlowSession(flow.build(), tmp_path, settings=given).settings is given
