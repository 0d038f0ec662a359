"""The edge bench's rules on made-up looks, and one tiny real run of it.

``python -m bench.edge`` takes many minutes; here its judge is checked on looks made
up to the second (a catch-up found in the wrong place would make the headline
worthless), and one run with a 3 s outage goes through every step (Redis, the
service, the box, the same flow without forwarding) to prove the report has its
numbers and every item arrived. Whether the numbers meet the target on a busy
machine is the bench's question, not the test's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.edge.judge import TARGET, catch_up, figures, verdict
from bench.edge.main import main
from bench.edge.report import ROWS
from bench.edge.run import ForwardRun, SteadyRun, Window
from bench.edge.watch import Look

LIVE = 15  # items a second


def look(t: float, emitted: int, forwarded: int | None, age: float | None = 0.3) -> Look:
    return Look(t, t * 0.1, t * 0.5, 100 << 20, emitted, forwarded, None, None, age)


def made_up_run() -> ForwardRun:
    """Live 0-10 s, the link down 10-20 s, back at 20 s, forwarding again from 21 s
    at 160 items/s (about 11x live) until caught up near 22.2 s, then live to 25 s."""
    looks = []
    forwarded = 0
    for tenth in range(0, 251):
        t = tenth / 10
        emitted = int(LIVE * t)
        if t < 10:
            forwarded = max(0, emitted - 2)
        elif t <= 21:
            pass  # the link is down, then the box has not retried yet
        else:
            forwarded = min(emitted - 1, forwarded + 16)
        age = None if 10 <= t < 21 else (1.0 if 21 < t <= 22 else 0.3)
        looks.append(look(t, emitted, forwarded, age))
    marks = {"start": 0.0, "live": 2.0, "live_end": 10.0, "down": 10.0, "down_end": 20.0}
    marks["up"] = 20.0
    return ForwardRun(
        looks=looks,
        marks=marks,
        live=Window(8.0, 1.6, 4.0),
        exit_status=0,
        emitted={"frames": list(range(125)), "chunks": list(range(250))},
        arrived={"frames": 125, "chunks": 250},
        log_lines={"link_down": 1, "link_back": 1},
    )


def test_the_catch_up_runs_from_the_first_forward_to_the_backlog_of_live() -> None:
    run = made_up_run()
    found = catch_up(run)
    assert found is not None
    resume, done = (run.looks[i].t for i in found)
    assert resume == 21.0  # the last look before the count moved
    assert 22.0 <= done <= 22.6  # back to the 2 items live left waiting


def test_figures_of_a_made_up_run() -> None:
    got = figures(made_up_run(), Window(8.0, 0.8, 4.0))
    assert got["live_rate"] == pytest.approx(LIVE, rel=0.02)
    assert got["catch_up_rate"] == pytest.approx(160, rel=0.1)
    assert got["catch_up_x"] == pytest.approx(160 / LIVE, rel=0.1)
    assert got["resume_lag_s"] == pytest.approx(1.0)
    assert got["live_age_p50"] == pytest.approx(0.3) and got["catch_up_age_p95"] == 1.0
    assert got["cpu_per_camera"] == pytest.approx(0.1) and got["cpu_x"] == pytest.approx(2.0)
    assert got["all_arrived"] and got["rss_growth_mib"] == 0
    assert got["rss_steady_growth_mib"] is None  # no steady peer given


def test_the_outage_costs_what_it_grows_beyond_the_box_with_the_link_up() -> None:
    # The forwarding box stays at 100 MiB through its outage; the peer grows 3 MiB.
    marks = {"start": 0.0, "live_end": 10.0, "down_end": 20.0}
    grows = [
        Look(t, 0.0, 0.0, rss << 20, None, None, None, None, None)
        for t, rss in ((10.0, 100), (20.0, 103))
    ]
    got = figures(made_up_run(), Window(8.0, 0.8, 4.0), SteadyRun(grows, marks))
    assert got["rss_steady_growth_mib"] == 3.0 and got["rss_outage_extra_mib"] == -3.0


def test_the_verdict_needs_every_item_and_the_target_in_every_run() -> None:
    good = {"all_arrived": True, "catch_up_x": TARGET + 1}
    assert verdict([good] * 3) == "MET"
    assert verdict([good, {**good, "catch_up_x": TARGET - 0.1}, good]).startswith("NOT MET")
    assert verdict([good, {**good, "all_arrived": False}, good]) == "NOT MET: items missing"


def test_one_tiny_run_reports_every_number_and_every_item_arrived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--outage-s", "3", "--runs", "1", "--live-s", "3", "--warmup-s", "2"]
    argv += ["--post-s", "4", "--size", "160x120", "--dir", str(tmp_path), "--json"]
    main(argv)
    body = json.loads(capsys.readouterr().out)
    (run,) = body["runs"]
    assert run["all_arrived"], run
    assert run["emitted"]["frames"] >= 10 and run["emitted"]["chunks"] >= 80
    assert set(ROWS_KEYS) <= set(run)
    numbers = ("catch_up_x", "catch_up_rate", "live_rate", "cpu_per_camera", "rss_growth_mib")
    for key in (*numbers, "rss_steady_growth_mib", "rss_outage_extra_mib"):
        assert isinstance(run[key], float), (key, run)
    (raw,) = body["raw"]
    assert raw["log_lines"] == {"link_down": 1, "link_back": 1}
    assert body["verdict"].startswith(("MET", "NOT MET: catch-up"))


ROWS_KEYS = [key for _, key, _ in ROWS]
