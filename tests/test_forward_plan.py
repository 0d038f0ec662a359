"""The forwarder's decisions (mediaflow.forward.plan) and settings, without a link."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaflow.config import ConfigError
from mediaflow.forward.plan import (
    CURSOR_NODE,
    IDLE_WAIT_S,
    LINK_CHECK_EVERY_S,
    PROBE_EVERY_S,
    Outage,
    Probe,
    RateBudget,
    Retry,
    choose_shed,
    cursor_values,
    idle_wait,
    link_check_due,
    pause_after,
    plan_batch,
    probed,
    read_cursors,
    shared_items,
    step_while_down,
    uploads_to_forget,
)
from mediaflow.forward.settings import ForwardSettings
from mediaflow.queue.contract import NewItem, StreamKey, WorkItem
from mediaflow.queue.sqlite import SqliteQueue


def item(node: str, seq: int) -> WorkItem:
    payload = {"src": "mic.audio", "port": "audio", "value": seq, "at": 1.0}
    return WorkItem(f"{node}-{seq}", StreamKey("f", node), "emission", payload, seq, 1, 0.0)


def test_a_batch_sends_what_is_past_each_cursor_in_seq_order() -> None:
    items = [item("b", 2), item("a", 3), item("a", 1), item("a", 2), item("b", 1)]
    batch = plan_batch(items, {"a": 1})
    assert [(i.stream.node, i.seq) for i in batch.send] == [("a", 2), ("a", 3), ("b", 1), ("b", 2)]
    assert [(i.stream.node, i.seq) for i in batch.already] == [("a", 1)]
    assert batch.cursors == {"a": 3, "b": 2}


def test_items_all_below_their_cursor_move_nothing() -> None:
    batch = plan_batch([item("a", 1), item("a", 2)], {"a": 5})
    assert batch.send == () and len(batch.already) == 2 and batch.cursors == {}


def test_cursors_round_trip_through_latest_values_per_box() -> None:
    written = cursor_values("f", "box1", {"a": 7, "b": 2})
    assert written == {("f", CURSOR_NODE, "box1/a"): 7, ("f", CURSOR_NODE, "box1/b"): 2}
    latest = {(node, port): value for (_flow, node, port), value in written.items()}
    latest[(CURSOR_NODE, "box2/a")] = 99  # another box forwarding the same flow
    latest[("mic", "audio")] = 3  # an ordinary port
    assert read_cursors(latest, "box1") == {"a": 7, "b": 2}
    assert read_cursors(latest, "box2") == {"a": 99}


def test_shared_items_keep_the_payload_and_stay_unclaimed() -> None:
    (new,) = shared_items([item("a", 4)])
    assert new.stream == StreamKey("f", "a") and new.kind == "emission"
    assert new.payload == item("a", 4).payload and new.claim is False


def test_pauses_double_from_a_fifth_of_a_second_to_five() -> None:
    assert [pause_after(n) for n in (1, 2, 3, 4, 5, 6, 9)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_a_link_that_went_away_is_probed_and_used_as_soon_as_it_answers() -> None:
    outage = Outage(failures=6, failed_at=100.0)  # the doubling would wait 5 s now
    assert step_while_down(outage, None, 100.0) == Probe(PROBE_EVERY_S)
    outage = probed(outage, False)
    assert outage.away
    assert step_while_down(outage, False, 100.5) == Probe(PROBE_EVERY_S)
    back = probed(outage, True)
    assert back.away, "once away, the outage stays one"
    assert step_while_down(back, True, 101.0) == Retry(0.0), "not 4 s later"


def test_rounds_that_fail_while_probes_answer_keep_the_doubling() -> None:
    outage = probed(Outage(failures=3, failed_at=100.0), True)  # 0.8 s after the 3rd
    assert not outage.away
    assert step_while_down(outage, True, 100.5) == Retry(pytest.approx(0.3))
    assert step_while_down(outage, True, 101.0) == Retry(0.0)


def test_an_idle_forwarder_waits_long_unless_the_newest_values_are_due() -> None:
    heard = 10.0  # the link answered just now
    assert idle_wait(10.0, latest_at=9.99, latest_skipped=False, link_seen_at=heard) == IDLE_WAIT_S
    assert idle_wait(10.0, 9.9, latest_skipped=True, link_seen_at=heard) == pytest.approx(0.15)
    assert idle_wait(10.0, latest_at=5.0, latest_skipped=True, link_seen_at=heard) == 0.0


def test_an_idle_forwarder_asks_the_link_when_it_has_not_heard_from_it() -> None:
    assert LINK_CHECK_EVERY_S > IDLE_WAIT_S, "asking the link is rarer than looking locally"
    heard = 10.0 - LINK_CHECK_EVERY_S + 0.3  # due in 0.3 s
    assert idle_wait(10.0, latest_at=9.99, latest_skipped=False, link_seen_at=heard) == (
        pytest.approx(0.3)
    )
    assert not link_check_due(10.0, heard)
    assert link_check_due(10.3, heard)
    assert idle_wait(20.0, latest_at=9.99, latest_skipped=False, link_seen_at=heard) == 0.0


def test_uploads_are_remembered_a_minute_and_at_most_ten_thousand() -> None:
    uploaded = {f"d{n}": float(n) for n in range(100)}  # one a second, oldest first
    assert uploads_to_forget(uploaded, 100.0) == 41  # taken 60 s ago or more
    assert uploads_to_forget(uploaded, 50.0) == 0
    many = {f"d{n}": 0.0 for n in range(10_005)}
    assert uploads_to_forget(many, 1.0) == 5


def test_the_budget_lets_a_second_through_then_paces() -> None:
    budget = RateBudget(1000, allowance=1000.0, at=0.0)
    assert budget.wait_for(600, 0.0) == 0.0
    assert budget.wait_for(600, 0.0) == pytest.approx(0.2)  # 200 bytes short at 1000 B/s
    assert budget.wait_for(100, 1.0) == 0.0  # a second later the debt is paid and more
    quiet = RateBudget(1000, allowance=0.0, at=0.0)
    assert quiet.wait_for(0, 60.0) == 0.0 and quiet.allowance == 1000.0  # capped at 1 s


def test_forwarding_is_off_without_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MEDIAFLOW_FORWARD_QUEUE", "MEDIAFLOW_FORWARD_STORE"):
        monkeypatch.delenv(name, raising=False)
    assert ForwardSettings.from_env() is None


def test_forward_settings_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAFLOW_FORWARD_QUEUE", "redis://hub:6379/0")
    monkeypatch.setenv("MEDIAFLOW_FORWARD_STORE", "http://hub:8080/")
    monkeypatch.setenv("MEDIAFLOW_FORWARD_MAX_BPS", "2MB")
    monkeypatch.setenv("MEDIAFLOW_TOKEN", "s3cret")
    monkeypatch.delenv("MEDIAFLOW_QUEUE", raising=False)
    monkeypatch.delenv("MEDIAFLOW_STORE", raising=False)
    settings = ForwardSettings.from_env()
    assert settings is not None
    assert settings.queue_url == "redis://hub:6379/0"
    assert (settings.store.url, settings.store.token) == ("http://hub:8080", "s3cret")
    assert settings.max_bps == 2_000_000


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MEDIAFLOW_FORWARD_QUEUE": "redis://hub/0"}, "MEDIAFLOW_FORWARD_STORE"),
        ({"MEDIAFLOW_FORWARD_STORE": "http://hub:8080"}, "MEDIAFLOW_FORWARD_QUEUE"),
        (
            {"MEDIAFLOW_FORWARD_QUEUE": "redis://hub/0", "MEDIAFLOW_FORWARD_STORE": "local"},
            "MEDIAFLOW_FORWARD_STORE",
        ),
        (
            {
                "MEDIAFLOW_FORWARD_QUEUE": "redis://hub/0",
                "MEDIAFLOW_FORWARD_STORE": "http://hub:8080",
                "MEDIAFLOW_FORWARD_MAX_BPS": "fast",
            },
            "MEDIAFLOW_FORWARD_MAX_BPS",
        ),
        (
            {
                "MEDIAFLOW_FORWARD_QUEUE": "redis://hub/0",
                "MEDIAFLOW_FORWARD_STORE": "http://hub:8080",
                "MEDIAFLOW_QUEUE": "redis://hub/0",
            },
            "MEDIAFLOW_QUEUE",
        ),
        (
            {
                "MEDIAFLOW_FORWARD_QUEUE": "redis://hub/0",
                "MEDIAFLOW_FORWARD_STORE": "http://hub:8080",
                "MEDIAFLOW_STORE": "http://hub:8080",
            },
            "MEDIAFLOW_STORE",
        ),
    ],
)
def test_forward_settings_refuse_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name in (
        "MEDIAFLOW_FORWARD_QUEUE",
        "MEDIAFLOW_FORWARD_STORE",
        "MEDIAFLOW_FORWARD_MAX_BPS",
        "MEDIAFLOW_QUEUE",
        "MEDIAFLOW_STORE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=named):
        ForwardSettings.from_env()


def ref_item(node: str, seq: int, size: int, enqueued_at: float) -> WorkItem:
    ref = {"digest": "sha256:" + f"{seq:064x}", "media_type": "audio/wav", "size": size}
    payload = {"src": "mic.audio", "port": "audio", "value": {"$ref": ref}, "at": 1.0}
    return WorkItem(f"{node}-{seq}", StreamKey("f", node), "emission", payload, seq, 1, enqueued_at)


def test_giving_way_takes_the_oldest_until_enough_bytes() -> None:
    items = [ref_item("a", 3, 100, 3.0), ref_item("b", 1, 100, 1.0), ref_item("a", 2, 100, 2.0)]
    items.append(item("a", 1))  # no artifact: frees nothing, kept
    assert [(i.stream.node, i.seq) for i in choose_shed(items, 150)] == [("b", 1), ("a", 2)]
    assert choose_shed(items, 0) == []
    assert len(choose_shed(items, 10_000)) == 3


async def test_the_journal_counts_the_bytes_its_waiting_items_reference(tmp_path: Path) -> None:
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    try:
        forwarded, other = StreamKey("f", "a"), StreamKey("f", "b")
        sizes = [100, 250, 0]
        payloads = [ref_item("a", n, size, 1.0).payload for n, size in enumerate(sizes)]
        payloads.append(item("a", 9).payload)  # a plain value references nothing
        await queue.commit([NewItem(forwarded, "emission", p, claim=False) for p in payloads])
        await queue.commit([NewItem(other, "emission", payloads[0], claim=False)])
        assert await queue.waiting_bytes([forwarded]) == 350
        assert await queue.waiting_bytes([forwarded, other]) == 450
        assert await queue.waiting_bytes([StreamKey("f", "none")]) == 0
        (claimed,) = await queue.claim("forward:box", {forwarded: 1})
        assert await queue.waiting_bytes([forwarded]) == 350  # claimed is not yet acked
        await queue.ack([claimed.entry_id])
        assert await queue.waiting_bytes([forwarded]) == 250
    finally:
        await queue.close()
