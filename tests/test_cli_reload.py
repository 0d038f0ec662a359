"""``mediaflow run`` reloading its flow file while a slow consumer has a backlog:
SIGHUP with a broken file (refused with the start's messages, the flow goes on),
then with a changed node option and a removed node; ``--watch`` without a
signal. Nothing lost, nothing run twice unmarked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.test_engine_reload import check_nothing_lost, deliveries

REPO = Path(__file__).resolve().parent.parent
COUNT = 400


def write_flow(path: Path, *, sink_delay: float, extra: bool) -> None:
    where = path.parent
    text = (
        '[flow]\nname = "hup"\n'
        f'[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = {COUNT}\n'
        "period_s = 0.003\n"
        f'[[node]]\nid = "sink"\nuse = "tests.engine_nodes:Recorder"\ndelay_s = {sink_delay}\n'
        f'log_file = "{where / "sink.log"}"\ninputs = {{ chunk = "src.chunk" }}\n'
    )
    if extra:
        text += (
            '[[node]]\nid = "extra"\nuse = "tests.engine_nodes:Recorder"\ndelay_s = 0.01\n'
            'inputs = { chunk = "src.chunk" }\n'
        )
    path.write_text(text)


class Run:
    """A ``mediaflow run --until-idle`` child whose stderr is collected as it comes."""

    def __init__(self, flow: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "mediaflow", "run", str(flow), "--until-idle"),
                *("--data", str(flow.parent / "data"), *extra),
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.text()}"
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {self.text()}")

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def text(self) -> str:
        return "".join(self.lines)[-4000:]

    def finish(self) -> int:
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=5)
        return code


def logged(where: Path, at_least: int) -> Callable[[], bool]:
    log = where / "sink.log"
    return lambda: log.exists() and len(log.read_text().splitlines()) >= at_least


def test_sighup_refuses_a_broken_file_then_reloads_a_good_one(tmp_path: Path) -> None:
    flow = tmp_path / "hup.toml"
    write_flow(flow, sink_delay=0.01, extra=True)
    run = Run(flow)
    try:
        run.wait_for(logged(tmp_path, 20), "the sink to start")
        flow.write_text('[flow]\nname = "hup"\n[[node]]\nid = "src"\nuse = "nowhere:Nothing"\n')
        run.proc.send_signal(signal.SIGHUP)
        run.wait_for(lambda: run.saw("reload refused"), "the refusal")
        assert run.saw("nowhere")  # the start's own message names the problem
        before = len(deliveries(tmp_path / "sink.log"))
        run.wait_for(logged(tmp_path, before + 10), "the flow to go on")
        write_flow(flow, sink_delay=0.001, extra=False)
        run.proc.send_signal(signal.SIGHUP)
        run.wait_for(lambda: run.saw("reloaded flow 'hup'"), "the reload")
        assert run.finish() == 0, run.text()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert "'changed': ['sink']" in run.text() and "'removed': ['extra']" in run.text()
    check_nothing_lost(tmp_path / "sink.log", range(COUNT))


def test_watch_reloads_when_the_file_changes(tmp_path: Path) -> None:
    flow = tmp_path / "hup.toml"
    write_flow(flow, sink_delay=0.01, extra=False)
    run = Run(flow, "--watch")
    try:
        run.wait_for(logged(tmp_path, 20), "the sink to start")
        flow.touch()  # the same content: not a change
        time.sleep(1.5)
        assert not run.saw("reloading")
        write_flow(flow, sink_delay=0.0, extra=False)
        run.wait_for(lambda: run.saw("reloaded flow 'hup'"), "the reload")
        assert run.finish() == 0, run.text()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    check_nothing_lost(tmp_path / "sink.log", range(COUNT))
