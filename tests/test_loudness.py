"""The loudness node: dBFS of known signals, and a beep through a lavfi microphone (as
fast as it decodes) into ``use = "loudness"`` in a real flow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mediaflow import FlowBuilder
from mediaflow.nodes.loudness import LEVEL_FLOOR_DB, LoudnessNode, dbfs
from mediaflow.timeline import TimelineEvent
from tests.connector_helpers import FlowResult, MediaSink, run_flow
from tests.event_helpers import ValueSink, noted_events

CHUNK = 0.1  # the microphone's default chunk_ms
SINE = "sin(2*PI*440*t)"


def tone(expression: str, duration: float) -> str:
    return f"lavfi:aevalsrc=exprs='{expression}':s=16000:d={duration}"


async def listen(
    tmp_path: Path, device: str, **options: Any
) -> tuple[FlowResult, list[float], list[dict[str, Any]]]:
    """Run microphone -> loudness until idle: the chunks, the levels and the events."""
    flow = (
        FlowBuilder("listen")
        .add("mic", "microphone", device=device, realtime=False)
        .add("loud", "loudness", inputs={"audio": "mic.audio"}, **options)
        .add("sink", MediaSink, inputs={"audio": "mic.audio"})
        .add("levels", ValueSink, inputs={"level": "loud.level"})
        .add("events", ValueSink, inputs={"event": "loud.event"})
    )
    result = await run_flow(flow, tmp_path, timeout=60)
    return result, ValueSink.take("levels", "level"), ValueSink.take("events", "event")


def test_dbfs_of_known_signals() -> None:
    t = np.arange(16000) / 16000
    sine = np.round(32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    assert dbfs(sine) == pytest.approx(-3.0103, abs=0.001)
    assert dbfs((sine // 10).astype(np.int16)) == pytest.approx(-23.0103, abs=0.01)
    square = np.where(sine >= 0, 32767, -32768).astype(np.int16)
    assert dbfs(square) == pytest.approx(0.0, abs=0.001)
    stereo = np.stack([sine, np.zeros_like(sine)], axis=1)  # one channel of two: half power
    assert dbfs(stereo) == pytest.approx(-6.0206, abs=0.001)
    assert dbfs(np.zeros(160, dtype=np.int16)) == LEVEL_FLOOR_DB
    assert dbfs(np.zeros(0, dtype=np.int16)) == LEVEL_FLOOR_DB
    assert dbfs(np.ones(160, dtype=np.int16)) == pytest.approx(-90.31, abs=0.01)
    assert dbfs(np.ones(160, dtype=np.int16), floor=-80) == -80


async def test_levels_per_chunk_follow_the_amplitude(tmp_path: Path) -> None:
    """A full-scale sine for 1 s, half of it for 1 s, then silence."""
    expression = f"if(lt(t,1),{SINE},if(lt(t,2),0.5*{SINE},0))"
    result, levels, _ = await listen(tmp_path, tone(expression, 3))
    assert len(levels) == len(result.port("audio")) == 30
    assert levels[:10] == pytest.approx([-3.01] * 10, abs=0.02)
    assert levels[10:20] == pytest.approx([-9.03] * 10, abs=0.02)
    # The chunk at 2.0 s starts with the last sample of the half sine (t = 2 is not < 2).
    assert levels[21:] == [LEVEL_FLOOR_DB] * 9


async def test_a_beep_gives_one_event(tmp_path: Path) -> None:
    """A 1 s beep from 2 s, then a 50 ms click at 4.5 s, shorter than ``min_length_s``."""
    expression = f"if(between(t,2,3)+between(t,4.5,4.55),{SINE},0)"
    result, levels, events = await listen(tmp_path, tone(expression, 7))
    chunks = result.port("audio")
    t0 = chunks[0].ref.meta["captured_at"]
    assert [(e["type"], e["phase"], e["source"]) for e in events] == [
        ("loudness", "start", "mic"),
        ("loudness", "end", "mic"),
    ]
    start, end = events
    assert start["start"] == end["start"] and start["end"] is None
    assert end["start"] - t0 == pytest.approx(2.0, abs=CHUNK)
    assert end["end"] - t0 == pytest.approx(3.0, abs=CHUNK)
    assert end["score"] == pytest.approx(-3.01, abs=0.02) == max(levels)
    assert end["snapshot"] is None and end["zone"] is None
    assert levels[45] > -30  # the click was loud, only too short
    (noted,) = noted_events(tmp_path, "listen")
    assert (noted.node, noted.event) == ("loud", TimelineEvent.from_json(end))
    assert [e.data["phase"] for e in result.of_type("loudness")] == ["start", "end"]


async def test_a_lower_threshold_and_no_minimum_hear_the_click_too(tmp_path: Path) -> None:
    expression = f"if(between(t,2,3),{SINE},if(between(t,4.5,4.55),0.01*{SINE},0))"
    _, _, events = await listen(
        tmp_path, tone(expression, 7), threshold_db=-50, min_length_s=0, cooldown_s=0.5
    )
    assert [e["phase"] for e in events] == ["start", "end"] * 2
    # 1 % of full scale (-43.01 dBFS) for half of its chunk (-3 dB more).
    assert events[3]["score"] == pytest.approx(-46.02, abs=0.05)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold_db": 3}, "threshold_db"),
        ({"threshold_db": -200}, "threshold_db"),
        ({"min_length_s": -0.1}, "min_length_s"),
        ({"cooldown_s": 0}, "cooldown_s"),
    ],
)
def test_options_out_of_range_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoudnessNode(**options)
