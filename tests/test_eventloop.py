"""Which event loop the commands run on (mediaflow/eventloop.py), as the environment
says (read at the command's boundary, mediaflow/cli/loop.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from mediaflow import eventloop
from mediaflow.cli import loop as command_loop
from mediaflow.config import ConfigError


def test_auto_picks_uvloop_when_it_imports() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert eventloop.loop_factory("auto") is uvloop.new_event_loop


def test_asyncio_means_the_standard_loop() -> None:
    assert eventloop.loop_factory("asyncio") is None


def test_the_environment_decides_when_no_choice_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(eventloop.LOOP_ENV, " Asyncio ")
    assert command_loop.loop_factory() is None
    monkeypatch.setenv(eventloop.LOOP_ENV, "tokio")
    with pytest.raises(ConfigError, match="MEDIAFLOW_LOOP='tokio'"):
        command_loop.loop_factory()


def test_run_uses_the_factory() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert eventloop.run(loop_module()).startswith("asyncio")
    factory = eventloop.loop_factory("auto")
    if factory is not None:
        assert eventloop.run(loop_module(), factory=factory).startswith("uvloop")


def test_a_bad_setting_refuses_the_command_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(eventloop.LOOP_ENV, "tokio")
    made: list[str] = []

    async def main() -> int:
        return 0

    def make_main() -> Coroutine[Any, Any, int]:
        made.append("main")
        return main()

    assert command_loop.run_command(make_main) == 2
    assert made == []  # no coroutine left un-awaited
    assert "MEDIAFLOW_LOOP='tokio'" in capsys.readouterr().err
    monkeypatch.setenv(eventloop.LOOP_ENV, "auto")
    assert command_loop.run_command(make_main) == 0 and made == ["main"]


def test_the_cli_reports_a_bad_loop_setting(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mediaflow", "serve", "--port", "0", "--data", str(tmp_path)],
        env={**os.environ, "MEDIAFLOW_LOOP": "tokio"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "expected one of auto, uvloop, asyncio" in result.stderr


def test_blocking_file_work_gets_its_own_pool_sized_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def pool_size(expected: int) -> Callable[[], Awaitable[tuple[int, str]]]:
        """Twelve jobs at once, the first ``expected`` of them held until all of
        those run: a pool of that size runs them on that many threads, a
        smaller one never lets them go (10 s), a larger one takes more."""

        async def measure() -> tuple[int, str]:
            started = [0]
            running = threading.Condition()

            def job() -> str:
                with running:
                    started[0] += 1
                    running.notify_all()
                    running.wait_for(lambda: started[0] >= expected, timeout=10)
                return threading.current_thread().name

            names = await asyncio.gather(*(asyncio.to_thread(job) for _ in range(12)))
            return len(set(names)), names[0]

        return measure

    # asyncio's default size, then what the setting asks.
    default = min(12, (os.cpu_count() or 1) + 4)
    threads, name = eventloop.run(pool_size(default)())
    assert threads == default and name.startswith("mediaflow-io")
    monkeypatch.setenv(command_loop.IO_THREADS_ENV, "12")
    assert eventloop.run(pool_size(12)(), executor=command_loop.io_executor())[0] == 12
    monkeypatch.setenv(command_loop.IO_THREADS_ENV, "3")
    assert eventloop.run(pool_size(3)(), executor=command_loop.io_executor())[0] == 3
    monkeypatch.setenv(command_loop.IO_THREADS_ENV, "many")

    async def main() -> int:
        return 0

    assert command_loop.run_command(main) == 2
    assert "MEDIAFLOW_IO_THREADS='many' is not an integer" in capsys.readouterr().err
