"""The SQLite queue's statement parameters (``mediaflow.queue.sqlite.rows``): pure
functions, tested as tables. What SQLite then makes of them is tested through
the queue (``tests/test_queue_contract_delivery_commit.py``, ``tests/test_queue_sqlite_file.py``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from mediaflow.queue import EmissionRun, StreamKey
from mediaflow.queue.sqlite.rows import IdRange, batch_rows, id_ranges, parse_ids, values_json

A = StreamKey("f", "a")
TOP = str(1 << 63)  # one past the largest SQLite integer


@pytest.mark.parametrize(
    ("entry_ids", "ranges"),
    [
        ([], []),
        (["5"], [(5, 5)]),
        (["1", "2", "3"], [(1, 3)]),
        (["3", "1", "2", "2"], [(1, 3)]),  # any order, repeats: still one range
        (["1", "3"], [(1, 1), (3, 3)]),
        (["7", "1", "2", "5", "4"], [(1, 2), (4, 5), (7, 7)]),
        (["x", "5", "6", "not an id"], [(5, 6)]),
        (["0", "-1", "1", TOP, str((1 << 63) - 1)], [(1, 1), ((1 << 63) - 1, (1 << 63) - 1)]),
        (["x", "y"], []),
    ],
)
def test_id_ranges(entry_ids: list[str], ranges: list[IdRange]) -> None:
    assert id_ranges(entry_ids) == ranges
    assert parse_ids(entry_ids) == [(i,) for first, last in ranges for i in range(first, last + 1)]


@pytest.mark.parametrize(
    ("values", "as_text"),
    [
        # What SQLite hands back as the value itself goes as it is ...
        ([{"a": 1.5}, [1, True], None, 7, -(2**63) + 1, (2**63) - 1], []),
        # ... anything else as a string holding its JSON.
        ([{"a": 1}, 1 / 3, "text", True, False, 2**63, -(2**63), 2.0], [1, 2, 3, 4, 5, 6, 7]),
        ([math.inf, -math.inf, math.nan, {"a": 1}], [0, 1, 2]),
        # NaN or infinity inside a value: SQLite parses neither, so all go as text.
        ([{"rms": math.nan}, 1, None], [0, 1, 2]),
        ([[math.inf], {"a": 1}], [0, 1]),
    ],
)
def test_values_json_sends_as_text_what_sqlite_would_not_give_back(
    values: list[Any], as_text: list[int]
) -> None:
    array = json.loads(values_json(values))  # strict JSON: no NaN in the array itself

    assert [i for i, element in enumerate(array) if isinstance(element, str)] == as_text
    decoded = [json.loads(e) if i in as_text else e for i, e in enumerate(array)]
    assert json.dumps(decoded) == json.dumps(values)  # NaN != NaN: compare the texts
    assert [type(v) for v in decoded] == [type(v) for v in values]


def test_values_json_takes_any_sequence() -> None:
    assert json.loads(values_json(({"a": 1}, [2]))) == [{"a": 1}, [2]]
    assert json.loads(values_json(range(3))) == [0, 1, 2]


@pytest.mark.parametrize("bad", [object(), {1j: 0}, {"x": {1, 2}}])
def test_values_json_refuses_what_is_not_json(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        values_json([{"ok": 1}, bad])


def test_run_rows_drop_empty_runs_and_frame_each_payload() -> None:
    at = 1_700_000_000.1234567
    full = EmissionRun(A, "cam.image", "in\u00e9", [{"n": 1}, "x"], at, claim=2)

    [(run, array, head, tail)] = batch_rows([EmissionRun(A, "cam.image", "in", [], at), full])

    assert run is full
    elements = json.loads(array)
    payloads = [json.loads(head + json.dumps(e) + tail) for e in elements[:1]]
    payloads.append(json.loads(head + elements[1] + tail))
    assert payloads == [
        {"src": "cam.image", "port": "in\u00e9", "value": {"n": 1}, "at": at},
        {"src": "cam.image", "port": "in\u00e9", "value": "x", "at": at},
    ]


@pytest.mark.parametrize("claim", [-1, 3])
def test_run_rows_refuse_a_claim_outside_the_run(claim: int) -> None:
    with pytest.raises(ValueError, match=f"not {claim}"):
        batch_rows([EmissionRun(A, "cam.image", "in", [1, 2], 0.0, claim)])
