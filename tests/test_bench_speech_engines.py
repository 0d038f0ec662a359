"""``python -m bench.speech --engines``: both speech engines side by side (issue 25).

The bench's pure parts (WER of normalised texts, "kept up", the K search, the
table) are checked on made-up numbers; one ``--quick`` run (one 3 s recording,
K = 1, both engines, real ``mediaflow run`` flows) proves the measurements parse
into a report of the right shape with sane numbers. Whether a machine keeps up
is the benchmark's question, not the test's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import pytest

from bench._lib.common import REPO_ROOT
from bench.speech.engines import search_k
from bench.speech.engines_flow import flow_text
from bench.speech.engines_judge import kept_up, latency_bound, table, text_wer


def test_wer_normalises_case_punctuation_hyphens_and_mister() -> None:
    refs = ["and mister john dashwood", "he was not an ill disposed young man"]
    hyps = ["And Mr. John Dashwood", "He was not an ill-disposed young man."]
    assert text_wer(refs, hyps) == 0.0
    assert text_wer(refs, ["and mister john", "he was not an ill disposed young man"]) == 1 / 12


def realtime(latencies: list[float], finals: list[int], stopped: bool = False) -> dict[str, Any]:
    return {
        "stopped": stopped,
        "deadline_s": 90.0,
        "finals_per_stream": finals,
        "latencies": latencies,
    }


def test_kept_up_needs_idle_every_final_and_bounded_latency() -> None:
    alone = realtime([0.5, 1.0], [2])
    assert latency_bound(alone["latencies"]) == 3.0
    assert kept_up(realtime([0.9, 2.5, 1.0, 2.9], [2, 2]), alone) == (True, "ok")
    assert not kept_up(realtime([0.9, 3.5, 1.0, 2.9], [2, 2]), alone)[0]  # a growing lag
    assert not kept_up(realtime([0.9, 1.0, 1.0], [2, 1]), alone)[0]  # a final missing
    assert not kept_up(realtime([0.9, 1.0], [2, 2], stopped=True), alone)[0]


@pytest.mark.parametrize("limit", [0, 1, 5, 9, 10, 17, 40])
@pytest.mark.parametrize("guess", [1, 3, 12, 64])
def test_search_k_finds_the_largest_passing_k(limit: int, guess: int) -> None:
    tried: list[int] = []

    def passes(k: int) -> bool:
        tried.append(k)
        return k <= limit

    good, bad = search_k(passes, guess, cap=32)
    if limit == 0:
        assert (good, bad) == (0, 1)
        return
    assert good <= limit
    assert bad is None or bad > limit
    assert bad is None or bad - good <= max(1, good // 8)  # bisected to 1/8
    assert len(tried) == len(set(tried))


def test_the_flow_file_has_a_pair_per_stream(tmp_path: Any) -> None:
    from mediaflow.flows import load_flow

    wavs = [tmp_path / "a.wav", tmp_path / "b.wav"]
    flow = tmp_path / "flow.toml"
    flow.write_text(flow_text(wavs, {"engine": "whisper"}, chunk_ms=20, realtime=True))
    spec = load_flow(flow)
    assert sorted(spec.nodes) == ["asr0", "asr1", "mic0", "mic1"]


def test_quick_run_reports_both_engines_with_sane_numbers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.speech", "--engines", "--quick", "--json"],
        cwd=REPO_ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["quick"] and report["engines"] == ["pocketsphinx", "whisper"]
    (run,) = report["runs"]
    for engine in report["engines"]:
        result = run[engine]
        wer = result["wer"]
        assert 0.0 <= wer["whole"] <= 1.0
        assert set(wer["pipeline"]) == {"100"}
        assert 0.0 <= wer["pipeline"]["100"] <= 1.0
        assert wer["texts"]["100"], f"{engine}: no final from the pipeline"
        cost = result["cost"]
        assert 0.0 < cost["bare_cpu_per_s"] < 5.0 and 0.0 < cost["pipeline_cpu_per_s"] < 5.0
        assert math.isclose(cost["ratio"], cost["pipeline_cpu_per_s"] / cost["bare_cpu_per_s"])
        ladder = result["realtime"]
        assert ladder["sustained_k"] == 1 and ladder["failed_k"] is None
        latency = ladder["k1"]["latency"]
        assert latency["n"] >= 1 and 0.0 < latency["p50"] <= latency["p95"] < 30.0
    text = table(report)
    assert "| streams sustained in real time, 50 % talk | 1 | 1 |" in text
    assert "WER, pipeline at 100 ms chunks" in text
