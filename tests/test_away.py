"""The decisions of riding out an outage (mediaflow.engine.away) and what the
reducer does with a run that failed only because a dependency was away: tables."""

from __future__ import annotations

import errno
import math

import pytest

from mediaflow.engine.away import (
    PAUSE_MAX_S,
    Outage,
    Wait,
    away_from,
    on_failed,
    on_landed,
    pause_s,
    waited,
    without_userinfo,
)
from mediaflow.engine.commands import (
    DeadLetterCommand,
    PublishEventCommand,
    ReleaseCommand,
    WakeAtCommand,
)
from mediaflow.engine.ticks import ItemsArrivedTick, NodeFinishedTick, StopTick, TimerTick
from mediaflow.queue.contract import QueueError, QueueUnavailable, StreamKey
from mediaflow.store import ArtifactNotFound, RemoteStoreError, StoreFull, StoreUnreachable
from tests.reduce_helpers import ASR, CAM, LIMITS, acks, fresh, item, run, starts

URL = "http://store:8080/artifacts/sha256:00"

AWAY_TABLE: list[tuple[BaseException, str | None]] = [
    (StoreUnreachable("no answer", url=URL), "store"),
    (RemoteStoreError("bad gateway", url=URL, status=502), "store"),
    (RemoteStoreError("unavailable", url=URL, status=503), "store"),
    (RemoteStoreError("gateway timeout", url=URL, status=504), "store"),
    (QueueUnavailable("redis unreachable"), "queue"),
    # Not away: an operator or the node must act, waiting does not help.
    (RemoteStoreError("refused", url=URL, status=401), None),
    (RemoteStoreError("too large", url=URL, status=413), None),
    (StoreFull(errno.ENOSPC, "artifact service full", URL), None),
    (StoreFull(errno.ENOSPC, "artifact store full", "/data"), None),
    (ArtifactNotFound("sha256:00"), None),
    (QueueError("queue closed"), None),
    (ConnectionRefusedError(), None),  # raised by a node itself: its own business
    (ValueError("bad chunk"), None),
]


@pytest.mark.parametrize(("error", "away"), AWAY_TABLE, ids=lambda v: repr(v)[:40])
def test_which_failures_mean_a_dependency_is_away(error: BaseException, away: str | None) -> None:
    assert away_from(error) == away


@pytest.mark.parametrize(
    ("failures", "pause"),
    [(1, 0.2), (2, 0.4), (3, 0.8), (5, 3.2), (6, PAUSE_MAX_S), (40, PAUSE_MAX_S)],
)
def test_the_pause_doubles_and_caps(failures: int, pause: float) -> None:
    assert pause_s(failures) == pytest.approx(pause)


def test_an_outage_is_told_once_when_it_begins_and_once_when_it_ends() -> None:
    outage, began = on_failed(Outage(), tried_at=9.0, now=10.0)
    assert began and outage == Outage(since=10.0)
    outage, began = on_failed(outage, tried_at=11.0, now=12.0)
    assert not began and outage.since == 10.0
    outage, away_s = on_landed(outage, now=15.5)
    assert away_s == 5.5 and outage == Outage(since=None, ended_at=15.5)
    outage, away_s = on_landed(outage, now=16.0)
    assert away_s is None, "a save while the store answers tells nothing"


def test_a_try_begun_during_the_last_outage_begins_no_new_one() -> None:
    """Two saves of one node were waiting; one lands, the other's try (begun before
    that) fails afterwards: still the old outage."""
    back = Outage(ended_at=20.0)
    outage, began = on_failed(back, tried_at=19.0, now=20.5)
    assert not began and outage == back
    outage, began = on_failed(back, tried_at=20.1, now=20.5)
    assert began and outage == Outage(since=20.5, ended_at=20.0)


def test_a_fresh_outage_state_knows_of_no_earlier_outage() -> None:
    assert Outage().since is None and Outage().ended_at == -math.inf


@pytest.mark.parametrize(
    ("text", "public"),
    [
        ("http://store:8080", "http://store:8080"),
        ("https://user:s3cret@store/prefix", "https://user@store/prefix"),
        (
            "StoreUnreachable: PUT http://u:p@h:1/artifacts/x failed",
            "StoreUnreachable: PUT http://u@h:1/artifacts/x failed",
        ),
    ],
)
def test_nothing_told_of_an_outage_carries_a_password(text: str, public: str) -> None:
    assert without_userinfo(text) == public


# -- the reducer: a run that failed only because a dependency was away ------------------


def away(stream: StreamKey, head: str, *, done: int = 0, what: str = "store") -> NodeFinishedTick:
    """The batch headed by ``head`` failed at item ``done`` only because ``what`` was away."""
    return NodeFinishedTick(stream, head, done, "StoreUnreachable: no answer", what)


def test_a_wait_begins_once_and_counts_its_tries() -> None:
    first = waited(None, "mqtt", 10.0)
    assert first == Wait("mqtt", 10.0, 1)  # a new wait: told
    assert waited(first, "mqtt", 12.0) == Wait("mqtt", 10.0, 2)  # the same, one try longer
    assert waited(Wait("mqtt", 10.0, 5), "store", 20.0) == Wait("store", 20.0, 1)


def test_an_away_failure_costs_no_attempt_and_is_never_dead_lettered() -> None:
    """Far more failures than max_attempts (3), each retried after a wait that
    grows to the cap, with the same attempt number; then it succeeds."""
    state, commands = run(fresh(), ItemsArrivedTick((item(ASR, 1), item(ASR, 2))), now=0.0)
    assert starts(commands) == [("asr", (1, 2), 1)]
    now, waits = 0.0, []
    for _ in range(6):
        state, commands = run(state, away(ASR, "asr-1-1"), now=now)
        assert not [c for c in commands if isinstance(c, DeadLetterCommand)]
        (wake,) = [c for c in commands if isinstance(c, WakeAtCommand)]
        (retry,) = [c for c in commands if isinstance(c, PublishEventCommand)]
        assert retry.event_type == "cascade_retry"
        assert retry.data["attempt"] == 1 and retry.data["away"] == "store"
        waits.append(wake.at - now)
        now = wake.at
        state, commands = run(state, TimerTick(), now=now)
        assert starts(commands) == [("asr", (1,), 1)], "the same attempt, again"
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]  # LIMITS: base 1 s, max 4 s
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", 1), now=now)
    assert acks(commands) == [("asr-1-1",)]
    assert starts(commands) == [("asr", (2,), 1)]


def test_an_away_failure_keeps_the_attempts_a_real_failure_cost() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)), now=0.0)
    state, _ = run(state, NodeFinishedTick(ASR, "asr-1-1", 0, "boom"), now=0.0)  # attempt 1
    state, commands = run(state, TimerTick(), now=1.0)
    assert starts(commands) == [("asr", (1,), 2)]
    state, _ = run(state, away(ASR, "asr-1-1", what="queue"), now=1.0)  # attempt 2, away
    state, commands = run(state, TimerTick(), now=2.0)
    assert starts(commands) == [("asr", (1,), 2)]
    state, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", 0, "boom"), now=2.0)
    assert [c for c in commands if isinstance(c, DeadLetterCommand)] == []  # attempt 2 of 3
    state, _ = run(state, TimerTick(), now=10.0)
    _, commands = run(state, NodeFinishedTick(ASR, "asr-1-1", 0, "boom"), now=10.0)
    assert [c.item.seq for c in commands if isinstance(c, DeadLetterCommand)] == [1]


def test_an_away_failure_mid_batch_acks_what_went_before() -> None:
    items = tuple(item(ASR, s) for s in (1, 2, 3))
    state, _ = run(fresh(), ItemsArrivedTick(items), now=0.0)
    state, commands = run(state, away(ASR, "asr-1-1", done=2), now=0.0)
    assert acks(commands) == [("asr-1-1", "asr-2-1")]
    assert WakeAtCommand(LIMITS.retry_base_s) in commands
    _, commands = run(state, TimerTick(), now=LIMITS.retry_base_s)
    assert starts(commands) == [("asr", (3,), 1)]


def test_a_source_that_ended_because_a_dependency_was_away_is_started_again() -> None:
    """Past max_attempts: a source brought back each time, never dead-lettered."""
    source = item(CAM, 1, kind="source")
    state, _ = run(fresh(), ItemsArrivedTick((source,)), now=0.0)
    now = 0.0
    for _ in range(LIMITS.max_attempts + 2):
        state, commands = run(state, away(CAM, source.entry_id), now=now)
        assert not [c for c in commands if isinstance(c, DeadLetterCommand)]
        now += 100.0
        state, commands = run(state, TimerTick(), now=now)
        assert starts(commands) == [("cam", (1,), 1)]


def test_an_away_failure_while_stopping_hands_the_item_back() -> None:
    state, _ = run(fresh(), ItemsArrivedTick((item(ASR, 1),)), now=0.0)
    state, _ = run(state, StopTick(), now=0.0)
    _, commands = run(state, away(ASR, "asr-1-1"), now=0.0)
    assert ReleaseCommand(("asr-1-1",), started=True) in commands
    assert not [c for c in commands if isinstance(c, WakeAtCommand | DeadLetterCommand)]
