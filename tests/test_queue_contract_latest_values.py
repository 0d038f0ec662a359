"""The work-queue contract of a flow's state, run against every backend in
``QUEUE_BACKENDS`` like ``tests/test_queue_contract_delivery.py`` (same fixtures:
``queue``, ``queue_backend``): latest values (``put_latest``, ``latest``), and
``commit`` storing items, acking finished ones and recording latest values in one
transaction (``commit(items, claim_for=..., ack=..., latest=...)``), all or nothing.

Latest values are the flow's state ("what is the camera showing now"), read by the
server while workers write them: per ``(flow, node, port)``, the newest wins,
whichever call recorded it; any JSON value comes back as it went in (``None``
included: a value, not an absence); flows are kept apart whatever their names, in
their latest values as in their items, parking and dead letters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from mediaflow.queue import EmissionRun, LatestValues, NewItem, StreamKey, WorkQueue
from tests.conftest import QueueBackend
from tests.queue_contract_helpers import A, B, C, fill, ids, new, ns

ROLE = LatestValues
"""The role of the queue this module holds the contract of (see
``tests/test_queue_contract_roles.py``)."""

Latest = dict[tuple[str, str, str], Any]

REF = {
    "$ref": {
        "digest": "sha256:" + "0123456789abcdef" * 4,
        "media_type": "image/jpeg",
        "size": 48_213,
        "meta": {"source": "cam", "seq": 7, "pts": 0.5, "width": 1280, "height": 720},
    }
}

# Every kind of JSON value, and the corners of each: put under one port each.
VALUES: dict[str, Any] = {
    "ref": REF,
    "nested": {"x": [1, 2.5, None, True, 1 / 3, 2**70], "y": {"z": {"deep": [[], {}]}}},
    "list": [0.1, "two", [3], {"four": 4}],
    "text": "plain text",
    "unicode": "ünïcödé ✓ 🎥 中文",
    "escapes": 'é"\\\n\t\u2028\x00',
    "unicode_keys": {"ключ": "значение", "": 0, "🎥": [None]},
    "long_text": "a transcript " * 2_000,
    "empty_text": "",
    "third": 1 / 3,
    "sum": 0.1 + 0.2,
    "tiny": 1e-300,
    "huge": 1.7976931348623157e308,
    "negative_zero": -0.0,
    "float_one": 1.0,
    "int": 2**62,
    "int_min": -(2**63) + 1,
    "int_big": 2**63,
    "int_bigger": -(2**70),
    "zero": 0,
    "true": True,
    "false": False,
    "none": None,
    "empty_object": {},
    "empty_list": [],
}


def typed(value: Any) -> Any:
    """``value`` with each scalar tagged by its type (``True == 1`` and ``1.0 == 1``
    in Python; JSON keeps them apart) and floats by their bits (``-0.0 == 0.0``)."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


def of_flow(latest: Mapping[tuple[str, str, str], Any], flow: str) -> dict[tuple[str, str], Any]:
    """What ``latest(flow)`` answers after ``latest`` was recorded."""
    return {(node, port): value for (f, node, port), value in latest.items() if f == flow}


# -- latest values -------------------------------------------------------------


async def test_a_flow_without_latest_values_has_none(queue: WorkQueue) -> None:
    assert await queue.latest("f1") == {}

    await queue.put_latest({})

    assert await queue.latest("f1") == {}
    assert await queue.latest("never-seen") == {}


async def test_put_latest_records_each_node_and_port(queue: WorkQueue) -> None:
    latest: Latest = {
        ("f1", "cam", "image"): REF,
        ("f1", "cam", "video"): {"$ref": {**REF["$ref"], "media_type": "video/mp4"}},
        ("f1", "mic", "audio"): "chunk",
        ("f1", "asr", "text"): "hello",
        ("f1", "asr", "partial"): "hel",
        ("f1", "loud", "rms"): 0.25,
    }

    await queue.put_latest(latest)

    assert await queue.latest("f1") == of_flow(latest, "f1")


async def test_put_latest_keeps_the_newest_and_leaves_other_ports_alone(queue: WorkQueue) -> None:
    await queue.put_latest({("f1", "cam", "image"): 1, ("f1", "mic", "audio"): "a"})
    await queue.put_latest({("f1", "cam", "image"): 2})
    assert await queue.latest("f1") == {("cam", "image"): 2, ("mic", "audio"): "a"}

    # Another kind of value replaces it too; None is a value, not an absence.
    await queue.put_latest({("f1", "cam", "image"): {"n": 3}, ("f1", "mic", "audio"): None})
    assert await queue.latest("f1") == {("cam", "image"): {"n": 3}, ("mic", "audio"): None}

    await queue.put_latest({("f1", "mic", "audio"): [4]})
    assert await queue.latest("f1") == {("cam", "image"): {"n": 3}, ("mic", "audio"): [4]}


@pytest.mark.parametrize("second", ["put_latest", "commit items", "commit runs"])
@pytest.mark.parametrize("first", ["put_latest", "commit items", "commit runs"])
async def test_the_newest_value_wins_whichever_call_recorded_it(
    queue: WorkQueue, first: str, second: str
) -> None:
    async def record(how: str, value: Any) -> None:
        latest: Latest = {("f1", "cam", "image"): value}
        if how == "put_latest":
            await queue.put_latest(latest)
        elif how == "commit items":
            await queue.commit([new(A, value["n"])], latest=latest)
        else:
            await queue.commit([EmissionRun(A, "cam.image", "in", [value], 0.0)], latest=latest)

    await record(first, {"n": 1})
    await record(second, {"n": 2})

    assert await queue.latest("f1") == {("cam", "image"): {"n": 2}}


async def test_latest_values_of_every_json_kind_come_back_as_they_went_in(
    queue: WorkQueue,
) -> None:
    await queue.put_latest({("f1", "node", port): value for port, value in VALUES.items()})

    got = await queue.latest("f1")

    assert got == {("node", port): value for port, value in VALUES.items()}
    assert typed(got) == {("node", port): typed(value) for port, value in VALUES.items()}


async def test_nan_and_infinity_latest_values_come_back(queue: WorkQueue) -> None:
    values = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "rms": {"rms": math.nan}}
    await queue.put_latest({("f1", "loud", port): value for port, value in values.items()})

    got = await queue.latest("f1")

    assert math.isnan(got["loud", "nan"]) and math.isnan(got["loud", "rms"]["rms"])
    assert (got["loud", "inf"], got["loud", "-inf"]) == (math.inf, -math.inf)


# Names a backend might confuse: prefixes of one another, separators of keys,
# glob patterns, unicode. Flow names are any non-empty string (a flow file's
# [flow] name); node and port names are [A-Za-z_][A-Za-z0-9_-]*.
FLOWS = ["f", "f1", "f10", "f1:cam", "f1/cam", "f*", "f?", "[f]1", "désk ✓", "a b"]


async def test_latest_keeps_flows_apart(queue: WorkQueue) -> None:
    latest: Latest = {}
    for i, flow in enumerate(FLOWS):
        latest[flow, "cam", "image"] = {"flow": flow}
        latest[flow, f"n{i}", "out"] = i
    # Node and port names that join alike with a dash or an underscore.
    latest["f1", "a-b", "c"] = "a-b.c"
    latest["f1", "a", "b-c"] = "a.b-c"
    latest["f1", "a_b", "c"] = "a_b.c"
    latest["f1", "a", "b_c"] = "a.b_c"

    await queue.put_latest(latest)

    for flow in FLOWS:
        assert await queue.latest(flow) == of_flow(latest, flow), flow
    assert await queue.latest("f2") == {}


async def test_latest_values_are_shared_by_every_handle(queue_backend: QueueBackend) -> None:
    writer, reader = queue_backend.open(), queue_backend.open()

    await writer.put_latest({("f1", "cam", "image"): 1})
    assert await reader.latest("f1") == {("cam", "image"): 1}

    await writer.commit([new(A, 0)], latest={("f1", "cam", "image"): 2})
    assert await reader.latest("f1") == {("cam", "image"): 2}


async def test_latest_values_survive_close_and_reopen(queue_backend: QueueBackend) -> None:
    first = queue_backend.open()
    await first.put_latest({("f1", "cam", "image"): REF, ("f2", "mic", "audio"): "a"})
    await first.commit([new(A, 0)], latest={("f1", "asr", "text"): "hello"})
    await first.commit([], latest={("f1", "loud", "rms"): 0.5})
    await first.close()

    second = queue_backend.open()

    assert await second.latest("f1") == {
        ("cam", "image"): REF,
        ("asr", "text"): "hello",
        ("loud", "rms"): 0.5,
    }
    assert await second.latest("f2") == {("mic", "audio"): "a"}
    assert ns(await second.claim("c", {A: 5})) == [0]


# -- commit with acks and latest values ----------------------------------------


@pytest.mark.parametrize("claim_for", ["c", None])
async def test_enqueue_stores_acks_and_records_latest_values_in_one_call(
    queue: WorkQueue, claim_for: str | None
) -> None:
    await fill(queue, A, 4)
    done = await queue.claim("c", {A: 4})
    assert await queue.ack(ids(done[:1])) == 1
    latest: Latest = {("f1", "b", "out"): {"n": 7}, ("f2", "c", "image"): REF}

    stored = await queue.commit(
        [new(B, 7), new(C, 8)],
        claim_for=claim_for,
        # Acked already, repeated, unknown: only the pending ones count.
        ack=[*ids(done[:3]), done[1].entry_id, "not-an-id"],
        latest=latest,
    )

    claimed = 1 if claim_for else 0
    assert [(i.stream, i.payload, i.seq, i.deliveries) for i in stored] == [
        (B, {"n": 7}, 1, claimed),
        (C, {"n": 8}, 1, claimed),
    ]
    assert await queue.touch("c", ids(done)) == 1  # done[3]
    assert await queue.touch("c", ids(stored)) == 2 * claimed
    assert await queue.latest("f1") == {("b", "out"): {"n": 7}}
    assert await queue.latest("f2") == {("c", "image"): REF}
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked, stats.backlog) == (6, 3, 3)
    expected = [] if claim_for else [7, 8]
    assert ns(await queue.claim("other", {B: 5, C: 5})) == expected


@pytest.mark.parametrize("what", ["acks", "latest", "both", "neither"])
async def test_enqueue_of_no_items_with_acks_or_latest_values(queue: WorkQueue, what: str) -> None:
    await fill(queue, A, 2)
    done = await queue.claim("c", {A: 2})
    ack = ids(done) if what in ("acks", "both") else []
    latest: Latest = {("f1", "a", "out"): 1} if what in ("latest", "both") else {}

    assert await queue.commit([], claim_for="c", ack=ack, latest=latest) == []

    assert await queue.touch("c", ids(done)) == 2 - len(ack)
    assert await queue.latest("f1") == of_flow(latest, "f1")
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked, stats.backlog) == (2, len(ack), 2 - len(ack))


NOT_JSON = object()


@pytest.mark.parametrize(
    "failing",
    [
        "a payload",  # the second item's
        "a latest value",
        "a latest value, no items",
    ],
)
async def test_a_failing_enqueue_writes_neither_its_items_acks_nor_latest_values(
    queue: WorkQueue, failing: str
) -> None:
    await queue.put_latest({("f1", "a", "out"): "before"})
    await fill(queue, A, 2)
    held = await queue.claim("c", {A: 2})
    items = [new(B, 0), NewItem(B, "emission", {"bad": NOT_JSON if failing == "a payload" else 1})]
    latest: Latest = {("f1", "a", "out"): "after", ("f2", "c", "out"): 1}
    if failing.startswith("a latest value"):
        latest["f1", "b", "out"] = {"bad": [NOT_JSON]}

    with pytest.raises((TypeError, ValueError)):
        await queue.commit(
            [] if failing.endswith("no items") else items,
            claim_for="me",
            ack=ids(held),
            latest=latest,
        )

    assert await queue.touch("c", ids(held)) == 2  # not acked
    assert await queue.latest("f1") == {("a", "out"): "before"}
    assert await queue.latest("f2") == {}
    stats = await queue.stats()
    assert (stats.enqueued, stats.acked, stats.backlog) == (2, 0, 2)
    assert await queue.claim("me", {B: 5}) == []
    assert not any(b.total for s, b in (await queue.backlog()).items() if s != A)
    # Nothing half-done: the queue goes on as before.
    assert [i.seq for i in await fill(queue, B, 1)] == [1]


# -- flow names ------------------------------------------------------------------


async def test_flows_named_alike_keep_their_items_parking_and_dead_letters_apart(
    queue: WorkQueue,
) -> None:

    streams = [StreamKey(flow, "n") for flow in ["a", "a/b", "a:b", "a*", "á"]]
    for count, stream in enumerate(streams, start=1):
        await fill(queue, stream, count)
    await queue.commit([new(StreamKey("a/b", "m"), 0)])

    assert {s: b.ready for s, b in (await queue.backlog()).items() if b.total} == {
        **{stream: count for count, stream in enumerate(streams, start=1)},
        StreamKey("a/b", "m"): 1,
    }
    assert {f: n for f, n in (await queue.backlog_flows()).items() if n} == {
        "a": 1, "a/b": 3, "a:b": 3, "a*": 4, "á": 5
    }  # fmt: skip

    await queue.park("a/b")
    got = await queue.claim("c", dict.fromkeys([*streams, StreamKey("a/b", "m")], 10))

    assert await queue.parked() == {"a/b": None}
    assert sorted({i.stream.flow for i in got}) == ["a", "a*", "a:b", "á"]
    await queue.dead_letter(next(i for i in got if i.stream.flow == "a*"), "poison")
    assert [d.item.stream.flow for d in await queue.dead_letters("a*")] == ["a*"]
    assert await queue.dead_letters("a") == []
