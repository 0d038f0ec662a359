"""The sinks bench's rules as a table, and one tiny real run of each mode.

``python -m bench.sinks`` takes minutes (the outages a minute each); here its judge is
checked on made-up arrivals (a repeat let through unmarked, or a gap, would make the
outage rows worthless), and each mode runs once in seconds through every step
(mosquitto, the receiver process, ``mediaflow run`` through a 3 s broker outage and
2 s of 500s) to prove the report has its numbers and every event arrived. Whether
the throughput meets its target on a busy machine is the bench's question, not the
test's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.sinks.judge import MARGIN, TARGET_MQTT, arrival, target_met
from bench.sinks.main import main
from bench.sinks.procs import mosquitto_binary
from tests.mqtt_broker import MISSING


@pytest.fixture(autouse=True)
def needs_mosquitto() -> None:
    if mosquitto_binary() is None:
        pytest.skip(MISSING)


@pytest.mark.parametrize(
    ("got", "ok", "why"),
    [
        ([(0, False), (1, False), (2, False)], True, "each once, in order"),
        ([(0, False), (1, False), (1, True), (2, False)], True, "a repeat marked"),
        ([(0, False), (1, False), (1, False), (2, False)], False, "a repeat unmarked"),
        ([(0, False), (2, False)], False, "one missing"),
        ([(0, False), (2, False), (1, False)], False, "out of order"),
        ([(0, False), (1, False), (0, True), (2, False)], True, "an earlier one sent again"),
    ],
)
def test_arrival(got: list[tuple[int, bool]], ok: bool, why: str) -> None:
    assert arrival(3, got).ok is ok, why


def test_unverified_signatures_fail_the_arrival() -> None:
    assert not arrival(1, [(0, False)], verified=False).ok


@pytest.mark.parametrize(
    ("ratios", "said"),
    [
        ([TARGET_MQTT + MARGIN + 0.01] * 3, "MET"),
        ([TARGET_MQTT + MARGIN / 2] * 3, "MET WITHOUT MARGIN"),
        ([TARGET_MQTT + 0.2, TARGET_MQTT - 0.01, TARGET_MQTT + 0.2], "NOT MET"),
        ([TARGET_MQTT + 0.2], "MET in every run (fewer than 3 runs)"),
        ([None, 1.0, 1.0], "NOT MEASURED"),
    ],
)
def test_the_target_counts_only_with_margin(ratios: list[float | None], said: str) -> None:
    assert target_met(ratios).startswith(said)


def test_one_tiny_throughput_run_has_every_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--runs", "1", "--n", "300", "--webhook-n", "100", "--dir", str(tmp_path), "--json"])
    body = json.loads(capsys.readouterr().out)
    (run,) = body["runs"]
    for part, keys in (("mqtt", ("flow", "raw", "raw_window", "ratio")),
                       ("webhook", ("flow", "raw", "ratio"))):  # fmt: skip
        for key in keys:
            assert isinstance(run[part][key], float) and run[part][key] > 0, (part, key)
    assert body["verdict"].startswith(("MET", "NOT MET"))


def test_one_tiny_outage_run_delivers_every_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--outage", "--runs", "1", "--outage-s", "3", "--receiver-outage-s", "2"]
    argv += ["--warmup-s", "1", "--live-s", "1", "--post-s", "1", "--dir", str(tmp_path)]
    assert main([*argv, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    (run,) = body["runs"]
    broker, receiver = run["broker"], run["receiver"]
    assert broker["all_arrived"] and broker["dead_letters"] == 0, broker
    assert broker["emitted"] == 20 * 6 and broker["retries"] > 0
    for key in ("rss_growth_mib", "rss_steady_growth_mib", "rss_outage_extra_mib"):
        assert isinstance(broker[key], float), (key, broker)
    assert receiver["all_arrived"] and receiver["all_verified"], receiver
    assert receiver["answers"].get("500", 0) > 0 and receiver["retries"] > 0
