"""``mediaflow flows`` end to end: a real ``mediaflow run FLOW --port 0`` in a
subprocess, operated by the command as a user types it (in this process through
``mediaflow.cli.main``, and once as its own process), errors included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mediaflow import cli

REPO = Path(__file__).resolve().parent.parent
TOKEN = "cli-token"

NODES = '''
from mediaflow import Node


class Picky(Node):
    """Fails the chunks listed in ``bad`` on their first delivery; logs every run."""

    inputs = {"chunk": "json"}

    def __init__(self, log_file: str, bad: list[int]) -> None:
        self.log_file = log_file
        self.bad = set(bad)

    async def run(self, ctx) -> None:
        seq = ctx.inputs["chunk"]["seq"]
        with open(self.log_file, "a") as fh:
            fh.write(f"{seq} {ctx.item.deliveries}\\n")
        if seq in self.bad and ctx.item.deliveries == 1:
            raise RuntimeError(f"picky about chunk {seq}")
'''


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    log_file: Path
    stderr: list[str] = field(default_factory=list)

    def runs(self) -> list[tuple[int, int]]:
        if not self.log_file.exists():
            return []
        rows = (line.split() for line in self.log_file.read_text().splitlines())
        return [(int(seq), int(deliveries)) for seq, deliveries in rows]


def launch(args: list[str], env: dict[str, str], log_file: Path) -> Server:
    """Start ``mediaflow ARGS`` and wait for its ``serving on URL`` line; stderr is
    drained by a thread from then on (the run logs a line per dead letter)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mediaflow", *args],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("mediaflow: serving on "):
            threading.Thread(target=lines.extend, args=(proc.stderr,), daemon=True).start()
            return Server(proc, line.split()[-1], log_file, lines)
    proc.kill()
    raise AssertionError("the server did not start:\n" + "".join(lines))


def stop(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        raise


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of the servers (the token set, one attempt per item); the
    command in this process sees the token unless a test takes it away."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLOW_")}
    for name in os.environ:
        if name.startswith("MEDIAFLOW_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MEDIAFLOW_TOKEN", TOKEN)
    return {**clean, "MEDIAFLOW_TOKEN": TOKEN, "MEDIAFLOW_MAX_ATTEMPTS": "1"}


@pytest.fixture
def running(tmp_path: Path, env: dict[str, str]) -> Iterator[Server]:
    """``mediaflow run ctl.toml --port 0``: 400 chunks, one every 20 ms, to a node
    that fails chunks 3 and 5 once (each becomes a dead letter)."""
    (tmp_path / "ctlnodes.py").write_text(NODES)
    log_file = tmp_path / "runs.log"
    flow = tmp_path / "ctl.toml"
    flow.write_text(
        '[flow]\nname = "ctl"\n'
        '[[node]]\nid = "src"\nuse = "tests.engine_nodes:Counter"\ncount = 400\n'
        "period_s = 0.02\n"
        f'[[node]]\nid = "sink"\nuse = "ctlnodes:Picky"\nlog_file = "{log_file}"\n'
        'bad = [3, 5]\ninputs = { chunk = "src.chunk" }\n'
    )
    server = launch(
        ["run", str(flow), "--port", "0", "--data", str(tmp_path / "data")], env, log_file
    )
    try:
        yield server
    finally:
        stop(server)


Flows = Callable[..., tuple[int, str, str]]


@pytest.fixture
def flows(capsys: pytest.CaptureFixture[str]) -> Flows:
    """``mediaflow flows ARGS`` in this process: (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = cli.main(["flows", *args])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def wait_for(check: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def settled(count: Callable[[], int], quiet_s: float = 0.3, timeout_s: float = 20.0) -> int:
    """``count()`` once it has not changed for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise AssertionError(f"still changing after {timeout_s} s: {last}")
        time.sleep(0.05)
        if (now := count()) != last:
            last, since = now, time.monotonic()
    return last


def test_operating_a_running_flow(running: Server, flows: Flows, tmp_path: Path) -> None:
    url = ["--url", running.url]
    code, out, _ = flows(*url)
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["flow", "status", "nodes", "backlog", "last", "run"]
    assert row.split()[:3] == ["ctl", "running", "2"]

    assert flows(*url, "pause", "ctl") == (0, "ctl: paused\n", "")
    assert flows("pause", "ctl", *url) == (0, "ctl: paused (unchanged)\n", "")
    ran = settled(lambda: len(running.runs()))  # a batch under way when paused ends
    code, out, _ = flows(*url, "step", "ctl")
    assert code == 0 and out.startswith("ctl: stepped sink seq ") and out.endswith("; paused\n")
    first = int(out.split()[4])
    code, out, _ = flows(*url, "step", "ctl", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["stepped"]["seq"] == first + 1 and answer["status"] == "paused"
    wait_for(lambda: len(running.runs()) == ran + 2)
    assert flows(*url, "resume", "ctl") == (0, "ctl: running\n", "")
    code, _, err = flows(*url, "step", "ctl")
    assert (
        code == 1 and err == "mediaflow: flow 'ctl' is not paused: pause it before stepping (409)\n"
    )

    # Two dead letters: chunks 3 and 5 failed their one attempt.
    def dead_letters() -> list[dict[str, object]]:
        code, out, _ = flows(*url, "dead-letters", "ctl", "--json")
        assert code == 0
        letters: list[dict[str, object]] = json.loads(out)["dead_letters"]
        return letters

    wait_for(lambda: len(dead_letters()) == 2)
    code, out, _ = flows(*url, "dead-letters", "ctl")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["id", "node", "seq", "tries"]
    assert "picky about chunk 5" in lines[1] and "picky about chunk 3" in lines[2]
    newest, oldest = dead_letters()
    code, out, _ = flows(*url, "requeue", "ctl", str(oldest["id"]))
    assert code == 0 and out.startswith(f"ctl: requeued dead letter {oldest['id']}: sink seq ")
    assert out.endswith("runs again (delivery 2)\n")
    wait_for(lambda: (3, 2) in running.runs())  # ran again, as a redelivery
    code, out, _ = flows(*url, "discard", "ctl", str(newest["id"]))
    assert (code, out) == (0, f"ctl: discarded dead letter {newest['id']}\n")
    code, _, err = flows(*url, "discard", "ctl", str(newest["id"]))
    assert code == 1 and err == f"mediaflow: flow 'ctl' has no dead letter '{newest['id']}' (404)\n"
    assert flows(*url, "dead-letters", "ctl") == (0, "ctl: no dead letters\n", "")

    assert flows(*url, "disable", "ctl") == (0, "ctl: disabled\n", "")
    code, out, _ = flows(*url, "--json")
    assert json.loads(out)["flows"][0]["status"] == "disabled"
    assert flows(*url, "enable", "ctl") == (0, "ctl: running\n", "")


def test_errors_are_one_line_with_exit_codes(
    running: Server, flows: Flows, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = ["--url", running.url]
    code, _, err = flows(*url, "pause", "nope")
    assert (code, err) == (1, "mediaflow: no flow 'nope' (404)\n")
    code, _, err = flows(*url, "pause", "bad name")
    assert (code, err) == (2, "mediaflow: malformed flow name (400)\n")
    monkeypatch.setenv("MEDIAFLOW_TOKEN", "wrong")
    code, _, err = flows(*url, "pause", "ctl")
    assert code == 1 and err.startswith(
        f"mediaflow: the server at {running.url} refused the token in MEDIAFLOW_TOKEN (401)"
    )
    monkeypatch.delenv("MEDIAFLOW_TOKEN")
    code, _, err = flows(*url, "pause", "ctl")
    assert code == 1 and err.startswith(f"mediaflow: the server at {running.url} needs a token")
    assert flows(*url)[0] == 0  # reads need no token

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    code, _, err = flows("--url", f"http://127.0.0.1:{free}", "list")
    assert code == 1 and err.startswith(
        f"mediaflow: cannot reach the server at http://127.0.0.1:{free}"
    )
    assert len(err.splitlines()) == 1
    monkeypatch.setenv("MEDIAFLOW_URL", f"http://127.0.0.1:{free}")
    assert f":{free}" in flows("list")[2]  # the default URL comes from MEDIAFLOW_URL
    code, _, err = flows("--url", "ftp://x", "list")
    assert (code, err) == (2, "mediaflow: --url 'ftp://x' is not an http:// or https:// URL\n")
    assert flows("requeue", "ctl")[0] == 2  # ID missing: a usage error
    assert flows("frobnicate")[0] == 2


def test_the_command_as_its_own_process_and_against_serve(
    running: Server, env: dict[str, str], tmp_path: Path
) -> None:
    """The installed entry point, and ``mediaflow serve`` on the same data, which knows
    the flow from the store but does not run it: 409."""
    result = subprocess.run(
        [sys.executable, "-m", "mediaflow", "flows", "pause", "ctl", "--url", running.url],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "ctl: paused\n", "")
    served = launch(["serve", "--port", "0", "--data", str(tmp_path / "data")], env, tmp_path / "x")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "mediaflow", "flows", "step", "ctl", "--url", served.url],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 1
        assert "flow 'ctl' is not running in this process" in result.stderr
        assert result.stderr.rstrip().endswith("(409)") and result.stderr.count("\n") == 1
    finally:
        assert stop(served) == 0
    assert stop(running) == 0
