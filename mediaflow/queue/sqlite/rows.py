"""Statement parameters of the SQLite work queue, built from what callers pass.

Pure functions, run on the caller's side of a transaction (never while the
file is locked), so that a bad argument raises before anything is written:

- entry ids become integers, or ranges of consecutive ones (an ack of a batch
  is one ``DELETE ... BETWEEN`` instead of one per item);
- latest values become rows;
- a dead letter's id becomes its row id (an id that is not one is simply not
  found);
- an :class:`~mediaflow.queue.contract.EmissionRun` becomes ONE JSON array of
  its values, plus the text its items' payloads start and end with: SQLite
  then builds one row per element itself (``json_each``), so the values are
  encoded by one ``json`` call per run, not one per item;
- a :class:`~mediaflow.queue.contract.NewItem` becomes its payload's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from mediaflow.queue.contract import EmissionRun, NewItem
from mediaflow.queue.records import dumps

_dumps_strict: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
"""Compact JSON that SQLite's JSON functions can parse (no NaN, no infinities)."""

_ID_END: Final = 1 << 63  # SQLite integers are 64-bit signed
_INT_END: Final = 1 << 63  # integers SQLite's JSON reads back exactly: |n| below this

IdRange: TypeAlias = tuple[int, int]
"""The first and last of consecutive entry ids."""

RunRow: TypeAlias = tuple[EmissionRun, str, str, str]
"""A run as :meth:`Transactions.commit <mediaflow.queue.sqlite.tx.Transactions.commit>`
takes it: the run, its values as one JSON array (see :func:`values_json`), and
the text before and after each value's JSON in its items' payloads."""

ItemRow: TypeAlias = tuple[NewItem, str]
"""A single item as :meth:`Transactions.commit` takes it: the item and its payload's JSON."""


def _sorted_ids(entry_ids: Sequence[str]) -> list[int]:
    """The distinct ids among ``entry_ids``, ascending; ids this backend never
    issued are dropped (unknown ids are ignored by contract)."""
    try:
        ids = sorted(set(map(int, entry_ids)))  # the common case: every one an id
    except ValueError:
        found: set[int] = set()
        for entry_id in entry_ids:
            try:
                found.add(int(entry_id))
            except ValueError:
                continue
        ids = sorted(found)
    if ids and (ids[0] <= 0 or ids[-1] >= _ID_END):
        ids = [i for i in ids if 0 < i < _ID_END]
    return ids


def parse_ids(entry_ids: Sequence[str]) -> list[tuple[int]]:
    """Entry ids as statement parameters, once each, ascending (see :func:`id_ranges`)."""
    return [(i,) for i in _sorted_ids(entry_ids)]


def id_ranges(entry_ids: Sequence[str]) -> list[IdRange]:
    """Entry ids as ``(first, last)`` ranges of consecutive ids, ascending.

    Ids are exact (``stream_id << 44 | seq``), so a range stands for precisely
    the ids it spans: ``id BETWEEN first AND last`` touches no other item.
    Ids this backend never issued are dropped.
    """
    whole = _one_range(entry_ids)
    if whole is not None:
        return [whole]
    ids = _sorted_ids(entry_ids)
    if not ids:
        return []
    ranges: list[IdRange] = []
    first = last = ids[0]
    for entry in ids:
        if entry > last + 1:
            ranges.append((first, last))
            first = entry
        last = entry
    ranges.append((first, last))
    return ranges


def _one_range(entry_ids: Sequence[str]) -> IdRange | None:
    """``(first, last)`` if ``entry_ids`` are exactly the ids ``first..last``,
    in any order, repeats allowed; else None. The common case (a batch of one
    stream's items) thus needs no sort."""
    try:
        ids = set(map(int, entry_ids))
    except ValueError:
        return None
    if not ids:
        return None
    first, last = min(ids), max(ids)
    if last - first + 1 == len(ids) and first > 0 and last < _ID_END:
        return first, last
    return None


def dead_row_id(dead_id: str) -> int | None:
    """The row id a dead letter's id names (the id is the row id in decimal, as
    :func:`~mediaflow.queue.sqlite.tx.dead_letter_of_row` writes it), None for
    any other text."""
    if not (0 < len(dead_id) <= 19 and dead_id.isascii() and dead_id.isdigit()):
        return None
    row_id = int(dead_id)
    return row_id if 0 < row_id < _ID_END and str(row_id) == dead_id else None


def latest_rows(
    latest: Mapping[tuple[str, str, str], Any] | None,
) -> list[tuple[str, str, str, str]]:
    """``(flow, node, port, value JSON)`` rows. Raises ``TypeError`` or
    ``ValueError`` for a value that is not JSON-serialisable."""
    if not latest:
        return []
    return [(flow, node, port, dumps(value)) for (flow, node, port), value in latest.items()]


def batch_rows(batch: Sequence[EmissionRun | NewItem]) -> list[RunRow | ItemRow]:
    """A commit's batch, in order, as rows: each run that holds values with its
    texts (see :data:`RunRow`), each item with its payload's JSON.

    Raises ``ValueError`` for a run whose ``claim`` is outside
    ``0..len(values)``, and ``TypeError`` or ``ValueError`` for a value or
    payload that is not JSON-serialisable.
    """
    rows: list[RunRow | ItemRow] = []
    for run in batch:
        if isinstance(run, NewItem):
            payload = run.payload
            rows.append((run, dumps(payload if isinstance(payload, dict) else dict(payload))))
            continue
        values = run.values
        if not 0 <= run.claim <= len(values):
            raise ValueError(
                f"claim must be between 0 and the {len(values)} value(s) of the run "
                f"{run.src} -> {run.stream}, not {run.claim}"
            )
        if not values:
            continue
        head = f'{{"src":{dumps(run.src)},"port":{dumps(run.port)},"value":'
        tail = f',"at":{dumps(run.at)}}}'  # float repr: exact, where SQLite would round
        rows.append((run, values_json(values), head, tail))
    return rows


def values_json(values: Sequence[Any]) -> str:
    """One JSON array with an element per value, for ``json_each``.

    SQLite gives an object, an array, a null or a 64-bit integer element back
    as JSON that decodes to the value itself, so those go as they are. Any
    other value goes as a string holding its JSON (one more encode for that
    value), pasted into its payload unparsed: at the top level SQLite would
    round a float to 15 digits and turn booleans into 0 and 1. And as SQLite
    parses no NaN or infinity, a value holding one anywhere sends every value
    as text, stored just as :func:`dumps` writes it.
    """
    array: Sequence[Any] = values if isinstance(values, list | tuple) else list(values)
    for value in array:
        kind = type(value)  # inlined _as_is: this loop runs once per emitted value
        if kind is dict or kind is list or value is None:
            continue
        if kind is int and -_INT_END < value < _INT_END:
            continue
        array = [v if _as_is(v) else dumps(v) for v in array]
        break
    try:
        return _dumps_strict(array)
    except ValueError:
        # A NaN or an infinity (or a circular value, which raises again here).
        return _dumps_strict([dumps(v) for v in values])


def _as_is(value: Any) -> bool:
    kind = type(value)
    return (
        kind is dict
        or kind is list
        or value is None
        or (kind is int and -_INT_END < value < _INT_END)
    )
