"""Schema, pragmas and SQL of the SQLite work queue (see :mod:`mediaflow.queue.sqlite`).

The layout is shaped by one cost: a commit costs about 4 µs plus 3-5 µs per
page it writes to the WAL. The hot path (enqueue one item claimed for its
consumer, later ack it in a batch) therefore writes two pages: the item's
table leaf and its leaf in the pending index. A group commit (``INSERT_RUN``)
appends a whole run of a stream's items to the same few leaves, and an ack of
consecutive items deletes one key range, so both cost a few µs per item.

- An item's id is ``stream_id << 44 | seq``. So a stream's items are one
  range of the table's primary key, in ``seq`` order; the stream and seq need
  no columns, and no index is needed to find a stream's oldest item. 44 bits
  of seq last 22 years at 25,000 items/s into one stream; 19 bits of stream id
  allow half a million streams.
- ``streams.next_seq`` is only a floor: the next seq of a stream is the larger
  of it and (its highest item's seq + 1), which one primary-key seek finds.
  Enqueue thus writes no stream row; whatever deletes items (ack, dead
  letter) first raises the floor past the stream's highest item, so a seq,
  and so an id, is never handed out twice. A rolled-back enqueue takes its
  seqs back with it, so seqs stay gap-free.
- ``state`` is 0 ready, 1 pending (claimed). Partial indexes, one per state,
  each hold only the items in that state: claim finds ready items of a
  stream, reclaim finds pending items by ``touched_at``, and the backlog
  counts each from its index alone. State 2 (delayed, by ``available_at``)
  is no longer written: the delay option had no caller and went (issue 26);
  its column and index stay so the file format, and ``SCHEMA_VERSION``, do
  not change.
- ``counters`` is one row, so a transaction bumps its counters with one
  UPDATE. "enqueued" needs no counter: it is the sum of the streams' next seqs.
  Counters of rarer events, added later, are rows of ``tallies``.
- A dead letter is a row of ``dead`` holding its item as one JSON record
  (:mod:`mediaflow.queue.records`); requeueing one inserts its item afresh at
  the end of its stream and deletes the row, in one transaction.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 4

SEQ_BITS: Final = 44
MAX_SEQ: Final = (1 << SEQ_BITS) - 1
MAX_STREAM_ID: Final = (1 << (63 - SEQ_BITS)) - 1

READY: Final = 0
PENDING: Final = 1


def span(sid: int) -> tuple[int, int]:
    """The id range of stream ``sid``'s items."""
    lo = sid << SEQ_BITS
    return lo, lo | MAX_SEQ


SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY,
    flow TEXT NOT NULL,
    node TEXT NOT NULL,
    next_seq INTEGER NOT NULL,
    UNIQUE (flow, node)
);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state INTEGER NOT NULL,
    available_at REAL,
    consumer TEXT,
    touched_at REAL,
    deliveries INTEGER NOT NULL,
    enqueued_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS items_ready ON items (state) WHERE state = 0;
CREATE INDEX IF NOT EXISTS items_pending ON items (state, touched_at) WHERE state = 1;
CREATE INDEX IF NOT EXISTS items_delayed ON items (state, available_at) WHERE state = 2;
CREATE TABLE IF NOT EXISTS parked (
    flow TEXT PRIMARY KEY,
    steps INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow TEXT NOT NULL,
    item TEXT NOT NULL,
    reason TEXT NOT NULL,
    dead_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_by_flow ON dead (flow, id);
CREATE TABLE IF NOT EXISTS counters (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    acked INTEGER NOT NULL DEFAULT 0,
    dead_lettered INTEGER NOT NULL DEFAULT 0,
    redelivered INTEGER NOT NULL DEFAULT 0
);
INSERT OR IGNORE INTO counters (id) VALUES (1);
CREATE TABLE IF NOT EXISTS tallies (
    name TEXT PRIMARY KEY,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS latest (
    flow TEXT NOT NULL,
    node TEXT NOT NULL,
    port TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (flow, node, port)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    flow TEXT NOT NULL,
    node TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (flow, node)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS members (
    flow TEXT NOT NULL,
    consumer TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (flow, consumer)
) WITHOUT ROWID;
"""

SCAN_CACHE: Final = "PRAGMA cache_size = -128"
"""The page cache (128 KiB) of a connection opened for one pass over the items (the
sweep's live digests, an edge box's backlog bytes): a pass reads each page once,
and SQLite's default of 2 MiB a connection let a journal grown through an outage
leave each worker thread's allocator holding as much as the last pass read."""

PUT_LATEST: Final = (
    "INSERT INTO latest (flow, node, port, value) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (flow, node, port) DO UPDATE SET value = excluded.value"
)
LATEST_OF_FLOW: Final = "SELECT node, port, value FROM latest WHERE flow = ?"

ADD_STREAM: Final = "INSERT OR IGNORE INTO streams (flow, node, next_seq) VALUES (?, ?, 1)"
STREAM_ID: Final = "SELECT id FROM streams WHERE flow = ? AND node = ?"
STREAM_KEY: Final = "SELECT flow, node FROM streams WHERE id = ?"

# The highest id in a stream's range [?1, ?2]: a reverse seek, not a scan
# (MAX(id) with a range would scan the range).
_TOP = "(SELECT id FROM items WHERE id BETWEEN ?1 AND ?2 ORDER BY id DESC LIMIT 1)"

# Of stream ?3 (ids ?1..?2): the next seq, whether any item is ready, whether
# its flow is parked. claim_for may claim new items at once only when that
# keeps the stream's order: nothing older ready, flow not parked.
STREAM_STATE: Final = f"""
SELECT MAX(s.next_seq, COALESCE({_TOP} - ?1 + 1, 1)),
       EXISTS (SELECT 1 FROM items WHERE state = 0 AND id BETWEEN ?1 AND ?2),
       EXISTS (SELECT 1 FROM parked WHERE flow = s.flow)
FROM streams AS s WHERE s.id = ?3
"""

INSERT_ITEM: Final = """
INSERT INTO items (id, kind, payload, state, available_at, consumer, touched_at, deliveries,
                   enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# A run of emissions (see Transactions.commit): a row per element of the JSON
# array ?2, ids from ?1 up; the first ?5 claimed for ?6 (state 1 = PENDING,
# else 0 = READY), all enqueued at ?7. An element is the value's JSON (an
# object, array, integer or null, handed back as such) or a string holding it,
# pasted as is (see rows.values_json), between ?3 and ?4.
INSERT_RUN: Final = """
INSERT INTO items (id, kind, payload, state, available_at, consumer, touched_at, deliveries,
                   enqueued_at)
SELECT ?1 + key, 'emission', ?3 || COALESCE(value, 'null') || ?4,
       key < ?5, NULL, CASE WHEN key < ?5 THEN ?6 END, CASE WHEN key < ?5 THEN ?7 END,
       key < ?5, ?7
FROM json_each(?2)
"""

# Before deleting items of stream ?3: raise its floor past its highest item.
# Only a deletion that takes the stream's highest item (ids up to ?4 go) can
# lower the next seq: while a newer item stays, the streams row is left
# unwritten (one page less per commit on the enqueue+ack path).
KEEP_FLOOR: Final = f"""
UPDATE streams SET next_seq = {_TOP} - ?1 + 1
WHERE id = ?3 AND next_seq <= {_TOP} - ?1 AND {_TOP} <= ?4
"""

CLAIM: Final = """
UPDATE items SET state = 1, consumer = ?1, touched_at = ?2, deliveries = deliveries + 1
WHERE id IN (SELECT id FROM items WHERE state = 0 AND id BETWEEN ?3 AND ?4 ORDER BY id LIMIT ?5)
RETURNING id, kind, payload, deliveries, enqueued_at
"""

# Ids come as ranges of consecutive ids (see rows.id_ranges): one
# primary-key range per run of a batch, not one statement per item.
ACK: Final = "DELETE FROM items WHERE id BETWEEN ? AND ? AND state = 1"
DELETE_ITEMS: Final = "DELETE FROM items WHERE id BETWEEN ? AND ?"
TOUCH: Final = "UPDATE items SET touched_at = ? WHERE id = ? AND state = 1 AND consumer = ?"
RELEASE: Final = "UPDATE items SET state = 0, consumer = NULL WHERE id = ? AND state = 1"
RELEASE_UNSTARTED: Final = (
    "UPDATE items SET state = 0, consumer = NULL, deliveries = MAX(deliveries - 1, 0) "
    "WHERE id = ? AND state = 1"
)
RELEASE_CONSUMER: Final = (
    "UPDATE items SET state = 0, consumer = NULL WHERE state = 1 AND consumer = ?"
)

# Leases (see mediaflow.queue.sqlite.leases).
JOIN_MEMBER: Final = (
    "INSERT INTO members (flow, consumer, expires_at) VALUES (?, ?, ?) "
    "ON CONFLICT (flow, consumer) DO UPDATE SET expires_at = excluded.expires_at"
)
LEAVE_MEMBER: Final = "DELETE FROM members WHERE flow = ? AND consumer = ?"
RENEW_LEASE: Final = (
    "UPDATE leases SET expires_at = ? WHERE flow = ? AND node = ? AND holder = ? AND expires_at > ?"
)
TAKE_LEASE: Final = """
INSERT INTO leases (flow, node, holder, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (flow, node) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.expires_at <= ?5 OR leases.holder = excluded.holder
"""
DROP_LEASE: Final = "DELETE FROM leases WHERE flow = ? AND node = ? AND holder = ?"
DROP_LEASES_OF: Final = "DELETE FROM leases WHERE flow = ? AND holder = ?"
DROP_ALL_LEASES_OF: Final = "DELETE FROM leases WHERE holder = ?"
DROP_ALL_MEMBERSHIPS_OF: Final = "DELETE FROM members WHERE consumer = ?"
LIVE_LEASES: Final = "SELECT node, holder FROM leases WHERE flow = ? AND expires_at > ?"
LEASED_ELSEWHERE: Final = (
    "SELECT 1 FROM leases WHERE flow = ? AND node = ? AND holder != ? AND expires_at > ?"
)
LIVE_MEMBERS: Final = (
    "SELECT consumer FROM members WHERE flow = ? AND expires_at > ? ORDER BY consumer"
)
# Items of stream ids ?1..?2 pending to anyone: a lease's earlier holder's, and the
# taker's own (a lease it lost, lapsed unrenewed, and takes again: what it dropped
# from memory then runs first, in order).
HAND_BACK: Final = (
    "UPDATE items SET state = 0, consumer = NULL WHERE id BETWEEN ?1 AND ?2 AND state = 1"
)

RECLAIM_TO_READY: Final = """
UPDATE items SET state = 0, consumer = NULL
WHERE state = 1 AND touched_at <= ?
RETURNING id, kind, payload, deliveries, enqueued_at
"""
# A dead letter's id (its DeadLetter.id, in decimal) is its row id: AUTOINCREMENT
# never hands one out twice, even after the newest rows are deleted.
INSERT_DEAD: Final = "INSERT INTO dead (flow, item, reason, dead_at) VALUES (?, ?, ?, ?)"
DEAD_ALL: Final = "SELECT item, reason, dead_at, id FROM dead ORDER BY id DESC LIMIT ?"
DEAD_OF_FLOW: Final = (
    "SELECT item, reason, dead_at, id FROM dead WHERE flow = ? ORDER BY id DESC LIMIT ?"
)
DEAD_BY_ID: Final = "SELECT item, reason, dead_at, id FROM dead WHERE id = ? AND flow = ?"
DELETE_DEAD: Final = "DELETE FROM dead WHERE id = ? AND flow = ?"

# (stream id, state, count, oldest id) from the partial indexes alone.
BACKLOG: Final = " UNION ALL ".join(
    f"SELECT id >> {SEQ_BITS}, {state}, COUNT(*), MIN(id) FROM items "
    f"WHERE state = {state} GROUP BY 1"
    for state in (READY, PENDING)
)
ENQUEUED_AT: Final = "SELECT enqueued_at FROM items WHERE id = ?"

PARKED: Final = "SELECT flow, steps FROM parked"
PARK: Final = """
INSERT INTO parked (flow, steps) VALUES (?, NULL) ON CONFLICT (flow) DO UPDATE SET steps = NULL
"""
PARK_STEPS: Final = (
    "INSERT INTO parked (flow, steps) VALUES (?1, ?2) ON CONFLICT (flow) DO UPDATE SET steps = ?2"
)
SET_STEPS: Final = "UPDATE parked SET steps = ? WHERE flow = ?"
UNPARK: Final = "DELETE FROM parked WHERE flow = ?"

ADD_ACKED: Final = "UPDATE counters SET acked = acked + ? WHERE id = 1"
ADD_DEAD: Final = "UPDATE counters SET dead_lettered = dead_lettered + 1 WHERE id = 1"
ADD_REDELIVERED: Final = "UPDATE counters SET redelivered = redelivered + ? WHERE id = 1"
# Counters added after the counters row was laid out, one row each (so adding one
# needs no ALTER TABLE): "requeued" (dead letters put back).
ADD_TALLY: Final = (
    "INSERT INTO tallies (name, n) VALUES (?, ?) "
    "ON CONFLICT (name) DO UPDATE SET n = n + excluded.n"
)
TALLIES: Final = "SELECT name, n FROM tallies"

_STREAM_TOP = (
    f"(SELECT i.id FROM items AS i WHERE i.id BETWEEN s.id << {SEQ_BITS} "
    f"AND (s.id << {SEQ_BITS}) + {MAX_SEQ} ORDER BY i.id DESC LIMIT 1)"
)
STATS: Final = f"""
SELECT (SELECT COALESCE(SUM(MAX(s.next_seq, COALESCE({_STREAM_TOP} - (s.id << {SEQ_BITS}) + 1, 1))
                            - 1), 0)
        FROM streams AS s),
       acked, dead_lettered, redelivered,
       (SELECT COUNT(*) FROM items WHERE state = 0)
       + (SELECT COUNT(*) FROM items WHERE state = 1)
       + (SELECT COUNT(*) FROM items WHERE state = 2)
FROM counters WHERE id = 1
"""

# -- storage lifecycle (see WorkQueue.live_digests, trim_dead_letters, forget_flow) --

# Keyset pages of everything that may hold a reference, read in one snapshot.
LIVE_ITEMS: Final = "SELECT id, payload FROM items WHERE id > ? ORDER BY id LIMIT ?"
LIVE_DEAD: Final = "SELECT id, item || reason FROM dead WHERE id > ? ORDER BY id LIMIT ?"
LIVE_LATEST_FIRST: Final = (
    "SELECT flow, node, port, value FROM latest ORDER BY flow, node, port LIMIT ?"
)
LIVE_LATEST_AFTER: Final = (
    "SELECT flow, node, port, value FROM latest WHERE (flow, node, port) > (?, ?, ?) "
    "ORDER BY flow, node, port LIMIT ?"
)

DEAD_FLOWS: Final = "SELECT DISTINCT flow FROM dead"
# The id of a flow's ?2-th newest dead letter (0-based): older ones go.
DEAD_NTH_NEWEST: Final = "SELECT id FROM dead WHERE flow = ? ORDER BY id DESC LIMIT 1 OFFSET ?"
# At most ?3 rows a transaction, so a large trim never holds the file for long.
TRIM_DEAD_OF_FLOW: Final = """
DELETE FROM dead WHERE id IN (
    SELECT id FROM dead WHERE flow = ?1 AND id < ?2 ORDER BY id LIMIT ?3
)
"""
TRIM_DEAD_BEFORE: Final = """
DELETE FROM dead WHERE id IN (SELECT id FROM dead WHERE dead_at < ?1 ORDER BY id LIMIT ?2)
"""

STREAMS_OF_FLOW: Final = "SELECT id FROM streams WHERE flow = ?"
COUNT_IN_RANGE: Final = "SELECT COUNT(*) FROM items WHERE id BETWEEN ? AND ?"
FORGET_LATEST: Final = "DELETE FROM latest WHERE flow = ?"
FORGET_DEAD: Final = "DELETE FROM dead WHERE flow = ?"
