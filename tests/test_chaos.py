"""Chaos, short: real file sources killed mid-capture lose nothing, on SQLite and Redis.

The short version of ``python -m bench.chaos`` (see :mod:`bench.chaos.run` for the
flow and the schedule): a file microphone (a generated WAV) and a file camera (lavfi's
``testsrc2`` in an MP4), both paced in real time, into a consumer slower than the
microphone that logs every delivery's PCM, and the recorder. ``mediaflow run`` is a
subprocess, SIGKILLed at seeded random points while the sources capture and started
again each time (it resumes the run). On Redis a ``mediaflow worker`` shares the work,
and the victims are the run, the worker and Redis itself (appendonly, restarted on
its port). Afterwards:

* every chunk the source emitted (its committed latest seq) reached the consumer;
* the consumer's bytes (first deliveries, in seq order) are the WAV's, exactly;
* a chunk seen twice was marked a redelivery; first deliveries came in order;
* every clip the recorder kept decodes whole, video and audio.

About 20 s per backend: a 15 s stream of 20 ms chunks, four kills.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.chaos.run import ChaosPlan, run_chaos
from tests.redis_server import RedisServer

CHUNKS = 750


def short(backend: str, seed: int) -> ChaosPlan:
    """A 15 s stream of 20 ms chunks, four kills, leases of 1.5 s."""
    return ChaosPlan(
        backend=backend, seed=seed, chunks=CHUNKS, chunk_ms=20, kills=4, lease_ms=1500,
        timeout_s=150.0,
    )  # fmt: skip


def summary(report: dict[str, Any]) -> str:
    kills = ", ".join(f"{k['at_s']:.1f}s {k['victim']}@{k['seq']}" for k in report["kills"])
    return (
        f"seed {report['plan']['seed']}; kills {kills}\n"
        f"deliveries {report['deliveries']}\nclips {report['clips']}\n"
        f"exits: run {report['run_exit']}, worker {report['worker_exit']}, "
        f"unexpected {report['unexpected_exits']}\nlogged {report['log_problems']}"
    )


def assert_survived(report: dict[str, Any]) -> None:
    why = summary(report)
    got, clips = report["deliveries"], report["clips"]
    assert all(k["capturing"] for k in report["kills"]), f"a kill missed the capture\n{why}"
    assert got["emitted"] == got["expected"] == CHUNKS, why
    assert got["lost"] == 0 and got["unknown"] == 0, why
    differ = got["first_differing_seq"]
    assert got["bytes_equal"], f"the consumer's bytes differ from seq {differ}\n{why}"
    assert got["discontinuities"] == 0, why
    assert got["unmarked_duplicates"] == 0 and got["differing_bytes"] == 0, why
    assert got["out_of_order"] == 0, why
    assert got["dead_letters"] == 0 and report["dead_letters"] == [], why
    assert clips["kept"] > 0 and clips["playable"] == clips["with_audio"] == clips["kept"], why
    assert report["run_exit"] == 0 and report["unexpected_exits"] == [], why
    assert report["log_problems"] == [], why
    assert report["ok"], why


@pytest.mark.slow
def test_a_run_killed_while_capturing_loses_nothing_on_sqlite(tmp_path: Path) -> None:
    report = run_chaos(short("sqlite", 11), tmp_path / "chaos")
    assert_survived(report)
    # The consumer is always busy: each kill of the run cut a chunk's work short.
    assert report["deliveries"]["redelivered"] > 0, summary(report)


@pytest.mark.slow
def test_run_worker_and_redis_killed_while_capturing_lose_nothing(
    tmp_path: Path, durable_redis_server: RedisServer
) -> None:
    report = run_chaos(short("redis", 5), tmp_path / "chaos", redis=durable_redis_server)
    assert {k["victim"] for k in report["kills"]} == {"run", "worker", "redis"}
    assert_survived(report)
    assert report["worker_exit"] == 0, summary(report)
