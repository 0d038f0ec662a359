"""Between Python values and the Redis backend's script arguments and replies.

Pure: names and ids (dead letters' too), a commit's entries as the rows its
script appends, the flat replies of :mod:`.lua`'s
scripts turned into :class:`~mediaflow.queue.contract.WorkItem` s, latest values
and dead letters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias, cast

from mediaflow.queue.contract import DeadLetter, EmissionRun, NewItem, StreamKey, WorkItem
from mediaflow.queue.records import dumps, item_of_record


def stream_name(stream: StreamKey) -> str:
    return f"{stream.flow}/{stream.node}"


def entry_id(stream: StreamKey, seq: int) -> str:
    """The item's id for the contract: ``flow/node/seq`` (names never hold a ``/``)."""
    return f"{stream.flow}/{stream.node}/{seq}"


def split_entry_id(entry: str) -> tuple[str, str] | None:
    """``(stream name, Redis stream id)`` of an entry id, None if it is not one of ours."""
    name, _, seq = entry.rpartition("/")
    if not name or "/" not in name or not seq.isdigit():
        return None
    return name, f"{int(seq)}-0"


def stream_key(name: str) -> StreamKey:
    flow, _, node = name.rpartition("/")  # a flow's name may hold a "/", a node id not
    return StreamKey(flow, node)


AppendRow: TypeAlias = tuple[StreamKey, str, str, bool]
"""One item the ``ENQUEUE`` script appends: stream, kind, payload JSON, claim it?"""


def append_rows(batch: Sequence[EmissionRun | NewItem]) -> list[AppendRow]:
    """The items of a commit's ``batch``, in order. Raises ``ValueError`` for a
    run whose ``claim`` is outside ``0..len(values)``, ``TypeError`` or
    ``ValueError`` for a value or payload that is not JSON-serialisable."""
    rows: list[AppendRow] = []
    for entry in batch:
        if isinstance(entry, NewItem):
            rows.append((entry.stream, entry.kind, dumps(dict(entry.payload)), entry.claim))
            continue
        if not 0 <= entry.claim <= len(entry.values):
            raise ValueError(
                f"claim {entry.claim} is outside the run of {len(entry.values)} value(s)"
            )
        # Each payload is the run's fixed text around its value's JSON.
        head = dumps({"src": entry.src, "port": entry.port})[:-1] + ',"value":'
        tail = ',"at":' + dumps(entry.at) + "}"
        for index, value in enumerate(entry.values):
            rows.append((entry.stream, "emission", head + dumps(value) + tail, index < entry.claim))
    return rows


def ids_args(entry_ids: Sequence[str]) -> list[str]:
    args: list[str] = []
    for entry in entry_ids:
        parsed = split_entry_id(entry)
        if parsed is not None:
            args.extend(parsed)
    return args


def items_of(flat: Sequence[Any]) -> list[WorkItem]:
    """WorkItems from a script's flat reply: name, id, kind, payload, at, deliveries."""
    rows = [flat[i : i + 6] for i in range(0, len(flat), 6)]
    if not rows:
        return []
    payloads = json.loads("[" + ",".join(text(row[3]) for row in rows) + "]")
    items = []
    for row, payload in zip(rows, payloads, strict=True):
        name, rid = text(row[0]), text(row[1])
        seq = int(rid.partition("-")[0])
        stream = stream_key(name)
        items.append(
            WorkItem(
                entry_id(stream, seq),
                stream,
                cast(Any, text(row[2])),
                payload,
                seq,
                int(row[5]),
                float(text(row[4])),
            )
        )
    return items


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pairs(raw: Any) -> list[tuple[Any, Any]]:
    if isinstance(raw, dict):
        return list(raw.items())
    return [(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]


def latest_args(latest: Mapping[tuple[str, str, str], Any] | None) -> list[str]:
    args: list[str] = []
    for (flow, node, port), value in (latest or {}).items():
        args += [flow, f"{node}.{port}", dumps(value)]
    return args


def dead_letter_of(rid: Any, fields: Mapping[Any, Any]) -> DeadLetter:
    """A dead letter from its entry in ``P:dead:<flow>``: its id there, and its
    fields (``r`` record, ``why``, ``at``, ``n``)."""
    return DeadLetter(
        item_of_record(fields[b"r"]),
        text(fields[b"why"]),
        float(text(fields[b"at"])),
        f"{text(fields[b'n'])}-{text(rid)}",
    )


_DEAD_ID: Final = re.compile(r"([0-9]{1,19})-([0-9]{1,20})-([0-9]{1,20})")


def split_dead_id(dead_id: str) -> tuple[str, str] | None:
    """``(n, entry id in P:dead:<flow>)`` of a dead letter's id (``<n>-<ms>-<seq>``,
    as :func:`dead_letter_of` writes it), None for any other text (an entry id
    Redis would refuse included)."""
    found = _DEAD_ID.fullmatch(dead_id)
    if found is None:
        return None
    n, ms, seq = (int(part) for part in found.groups())
    if not (0 < n < 1 << 63 and ms < 1 << 64 and seq < 1 << 64):
        return None
    if f"{n}-{ms}-{seq}" != dead_id:  # one spelling per dead letter (no leading zeros)
        return None
    return str(n), f"{ms}-{seq}"
