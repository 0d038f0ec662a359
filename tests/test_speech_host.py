"""Recognisers in host processes: the same words, off the GIL, surviving a host's death.

Real pocketsphinx in real child processes, fed espeak-ng sentences (the track of
``tests.speech_helpers``) as the speech node feeds them: 16 kHz PCM in 100 ms pieces.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mediaflow import FlowSession
from mediaflow.config import SPEECH_PROCESSES_ENV as PROCESSES_ENV
from mediaflow.config import ConfigError, EngineSettings, SpeechSettings
from mediaflow.engine.events import EventBus
from mediaflow.nodes.pocketsphinx_config import SphinxSearch
from mediaflow.nodes.recognizer import RecognizerError, Result
from mediaflow.nodes.speech import SpeechNode
from mediaflow.nodes.speech_host import HostedRecognizer, HostLost, HostPool
from mediaflow.nodes.speech_recipe import PocketSphinxRecipe
from tests.speech_helpers import (
    FAST,
    GRAMMAR,
    RATE,
    Track,
    make_track,
    microphone_flow,
    read_samples,
)

PIECE = RATE // 10  # samples in 100 ms


@pytest.fixture(scope="module")
def track(tmp_path_factory: pytest.TempPathFactory) -> Track:
    return make_track(tmp_path_factory.mktemp("host"))


@pytest.fixture(scope="module")
def pcm(track: Track) -> bytes:
    return read_samples(track.path)[:, 0].tobytes()


RECIPE = PocketSphinxRecipe(SphinxSearch(grammar=GRAMMAR.read_text()))


def hear(
    recognizer: object, pcm: bytes, stop: int | None = None, piece: int = PIECE
) -> list[Result]:
    step = piece * 2  # bytes: 16-bit samples
    out: list[Result] = []
    for at in range(0, len(pcm) if stop is None else stop, step):
        out += recognizer.feed(pcm[at : at + step])  # type: ignore[attr-defined]
    return out


def finals(results: list[Result]) -> list[str]:
    return [r.text for r in results if r.final]


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        after = fh.read().rsplit(")", 1)[1].split()
    return (int(after[11]) + int(after[12])) / os.sysconf("SC_CLK_TCK")


def test_a_hosted_recogniser_hears_what_one_in_this_process_hears(track: Track, pcm: bytes) -> None:
    pool = HostPool(1)
    hosted = HostedRecognizer(RECIPE, pool)
    try:
        here = RECIPE.build()
        expected = hear(here, pcm) + here.flush()
        got = hear(hosted, pcm) + hosted.flush()
    finally:
        hosted.close()
    assert got == expected
    assert finals(got) == track.texts
    assert pool.pids() == []  # the last recogniser closed: its host stopped


def test_decoding_runs_in_the_host_not_in_this_process(pcm: bytes) -> None:
    hosted = HostedRecognizer(RECIPE, HostPool(1))
    try:
        pid = hosted.host_pid
        assert pid is not None and pid != os.getpid()
        host_before, here_before = cpu_of(pid), time.thread_time()
        hear(hosted, pcm, piece=RATE)  # 1 s pieces: few hops, the decoding dominates
        host_cpu, here_cpu = cpu_of(pid) - host_before, time.thread_time() - here_before
    finally:
        hosted.close()
    # The calling thread only sends pieces and waits on the pipe without the GIL.
    assert host_cpu > 0.05
    assert here_cpu < host_cpu / 4, (here_cpu, host_cpu)


def test_a_killed_host_fails_one_call_then_a_fresh_recogniser_goes_on(
    track: Track, pcm: bytes
) -> None:
    pool = HostPool(1)
    hosted = HostedRecognizer(RECIPE, pool)
    try:
        middle = int(track.sentences[1].start * RATE) * 2
        assert finals(hear(hosted, pcm, stop=middle)) == track.texts[:1]
        first_pid = hosted.host_pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        with pytest.raises(HostLost, match=f"process {first_pid} exited"):
            hosted.feed(pcm[middle : middle + PIECE * 2])
        assert hosted.host_pid not in (None, first_pid)  # rebuilt in a new host
        rest = hear(hosted, pcm[middle:]) + hosted.flush()
    finally:
        hosted.close()
    # The sentence being spoken when its host died is lost; the later ones are heard.
    assert finals(rest)[-2:] == track.texts[-2:]
    assert pool.pids() == []


def test_a_build_failure_in_the_host_reaches_the_caller_as_it_was_raised() -> None:
    pool = HostPool(1)
    bad = PocketSphinxRecipe(SphinxSearch(grammar="#JSGF V1.0;\ngrammar g;\npublic <s> = xyzzy;"))
    with pytest.raises(RecognizerError, match="xyzzy"):
        HostedRecognizer(bad, pool)
    assert pool.pids() == []


def test_recognisers_share_at_most_the_pool_s_size_of_hosts(pcm: bytes) -> None:
    pool = HostPool(2)
    hosted = [HostedRecognizer(RECIPE, pool) for _ in range(3)]
    try:
        assert len(set(pool.pids())) == 2
        assert len({r.host_pid for r in hosted}) == 2
        for recognizer in hosted:
            hear(recognizer, pcm, stop=PIECE * 20)
    finally:
        for recognizer in hosted:
            recognizer.close()
    assert pool.pids() == []


def test_the_number_of_hosts_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROCESSES_ENV, "3")
    assert SpeechSettings.from_env().processes == 3
    assert EngineSettings.from_env().speech == SpeechSettings(processes=3)
    monkeypatch.setenv(PROCESSES_ENV, "none")
    with pytest.raises(ValueError, match=PROCESSES_ENV):
        SpeechSettings.from_env()
    with pytest.raises(ConfigError, match=PROCESSES_ENV):
        EngineSettings.from_env()
    monkeypatch.delenv(PROCESSES_ENV)
    assert SpeechSettings.from_env().processes == (os.cpu_count() or 1)


def test_without_settings_there_is_a_host_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROCESSES_ENV, "none")  # read at the boundary only, not here
    assert EngineSettings().speech.processes == (os.cpu_count() or 1)
    assert SpeechSettings().processes == (os.cpu_count() or 1)


def test_a_pool_is_as_large_as_its_settings_say() -> None:
    settings = EngineSettings(speech=SpeechSettings(processes=2))
    pool = HostPool.for_settings(settings)
    try:
        hosted = [HostedRecognizer(RECIPE, pool) for _ in range(3)]
        assert len(set(pool.pids())) == 2
        for recognizer in hosted:
            recognizer.close()
    finally:
        pool.close()
    assert pool.pids() == []


def test_the_cores_are_shared_out_among_the_hosts() -> None:
    cores = os.cpu_count() or 1
    assert HostPool(1).threads_per_process == cores
    assert HostPool(cores).threads_per_process == 1
    assert HostPool(cores * 4).threads_per_process == 1  # never 0


def test_closing_a_pool_stops_its_hosts_recognisers_or_not() -> None:
    pool = HostPool(2)
    hosted = [HostedRecognizer(RECIPE, pool) for _ in range(2)]
    pids = pool.pids()
    assert len(pids) == 2
    pool.close()
    assert pool.pids() == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # stopped and reaped
    # A recogniser's host went with the pool, and no new one starts for it.
    with pytest.raises(RuntimeError, match="pool is closed"):
        hosted[0].feed(b"\0" * PIECE * 2)
    with pytest.raises(RuntimeError, match="pool is closed"):
        HostedRecognizer(RECIPE, pool)
    for recognizer in hosted:
        recognizer.close()  # still fine after the pool closed
    pool.close()  # idempotent


def test_the_node_isolates_pocketsphinx_in_a_process_and_an_engine_in_a_thread() -> None:
    assert SpeechNode(grammar="g.gram").isolate == "process"
    assert SpeechNode(engine="pkg.mod:Engine").isolate == "thread"
    assert SpeechNode(grammar="g.gram", isolate="thread").isolate == "thread"
    with pytest.raises(ValueError, match="isolate must be one of"):
        SpeechNode(isolate="container")


def test_a_missing_grammar_file_is_named(tmp_path: Path) -> None:
    node = SpeechNode(grammar="missing.gram")
    with pytest.raises(RecognizerError, match=r"missing\.gram"):
        node._build(tmp_path, HostPool(1))


async def test_the_speech_nodes_of_a_session_share_one_pool_closed_with_it(
    track: Track, tmp_path: Path
) -> None:
    """Two speech nodes in one session, a pool of one host: both recognisers live in
    it, each hears the track, and the pool closes with the session."""
    flow = microphone_flow("shared-hosts", track.path, chunk_ms=100)
    for node in ("one", "two"):
        flow = flow.add(node, "speech", inputs={"audio": "mic.audio"}, grammar=str(GRAMMAR))
    settings = replace(FAST, speech=SpeechSettings(processes=1))
    bus = EventBus(history=10_000)
    session = FlowSession(flow.build(), tmp_path, settings=settings, bus=bus)
    await session.start()
    try:
        pool = session.services.shared(HostPool.for_settings)
        nodes = [session.node(node) for node in ("one", "two")]
        streams = [n._require_stream() for n in nodes if isinstance(n, SpeechNode)]
        recognizers = [s.recognizer for s in streams if isinstance(s.recognizer, HostedRecognizer)]
        assert len(recognizers) == 2
        assert all(r._pool is pool for r in recognizers)
        (pid,) = pool.pids()
        assert [r.host_pid for r in recognizers] == [pid, pid]
        assert await asyncio.wait_for(session.wait(until_idle=True), 60) == "idle"
    finally:
        await session.stop()
    heard = [e.data for e in bus.recent(0) if e.type == "transcript" and e.data["final"]]
    for node in ("one", "two"):
        assert [t["text"] for t in heard if t["node"] == node] == track.texts
    with pytest.raises(RuntimeError, match="pool is closed"):
        pool.acquire()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
