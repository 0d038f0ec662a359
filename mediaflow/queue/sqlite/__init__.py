"""The embedded work-queue backend: one SQLite file in the data directory.

:class:`SqliteQueue` (:mod:`.queue`) decides when and where each operation
runs; :mod:`.db` owns the connection and the move off the loop while another
process holds the file; :mod:`.tx` is each operation as one transaction, with
:mod:`.leases`, :mod:`.dead` (an operator's dead letters) and
:mod:`.lifecycle` / :mod:`.live` (trimming, forgetting, the digests GC keeps);
:mod:`.rows` builds statement parameters and :mod:`.schema` holds the SQL.
"""

from __future__ import annotations

from mediaflow.queue.sqlite.db import SyncMode
from mediaflow.queue.sqlite.queue import DB_FILENAME, TRIM_CHUNK, SqliteQueue

__all__ = ["DB_FILENAME", "TRIM_CHUNK", "SqliteQueue", "SyncMode"]
