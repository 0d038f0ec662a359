"""The bench's side channel to the Redis server of ``--queue``: fresh key prefixes,
cleaning up after a measurement, and what the server says it spent.

Synchronous redis-py, from the bench's parent process only (between children,
never while one is measured, except :class:`ScriptLog`, which the server keeps
by itself). The server's counters are server-wide: another client of the same
Redis during a run shows up in them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._lib.common import Json
from mediaflow.queue import queue_target

# Enough for every script call of a profiled run (a few per 128 emissions).
SLOWLOG_LEN = 200_000


@dataclass(frozen=True)
class RedisTarget:
    """The server of ``--queue``: its URL without a key prefix."""

    url: str

    @classmethod
    def parse(cls, setting: str) -> RedisTarget:
        """Raises ``UnsupportedQueue`` (a ``ValueError``) for anything but a Redis URL."""
        target = queue_target(setting, Path("."), name="--queue")
        if target.backend != "redis":
            raise ValueError(f"--queue {setting!r}: the bench measures a Redis queue here")
        return cls(target.url)

    def with_prefix(self, kind: str) -> tuple[str, str]:
        """A fresh key prefix for one measurement, and the queue URL naming it."""
        prefix = f"bench-{kind}-{uuid.uuid4().hex[:10]}"
        joiner = "&" if "?" in self.url else "?"
        return prefix, f"{self.url}{joiner}prefix={prefix}"

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)


def server_info(target: RedisTarget) -> Json:
    with target.client() as r:
        info = r.info("server")
        return {"version": info.get("redis_version"), "port": info.get("tcp_port")}


def forget_prefix(target: RedisTarget, prefix: str) -> int:
    """Delete every key under ``prefix:``; returns how many."""
    deleted = 0
    with target.client() as r:
        batch: list[str] = []
        for key in r.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(r.unlink(*batch))
                batch = []
        if batch:
            deleted += int(r.unlink(*batch))
    return deleted


def commandstats(target: RedisTarget) -> dict[str, tuple[int, int]]:
    """``{command: (calls, usec)}`` from ``INFO commandstats`` (commands a script
    runs are counted too, under their own names)."""
    with target.client() as r:
        raw = r.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in raw.items()
    }


def commandstats_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    out = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if calls > c0:
            out[name] = (calls - c0, usec - u0)
    return out


class ScriptLog:
    """Server time per Lua script: SLOWLOG with a threshold of 0 logs every command
    with its duration and arguments (``EVALSHA <sha> ...``). The server's
    settings are restored on exit. For a profiling run only: it costs the server
    a little per command."""

    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        self.per_script: dict[str, tuple[int, int]] = {}
        self.other: dict[str, tuple[int, int]] = {}
        self.truncated = False

    @contextmanager
    def recording(self) -> Iterator[ScriptLog]:
        with self.target.client() as r:
            saved = r.config_get("slowlog-*")
            r.config_set("slowlog-max-len", SLOWLOG_LEN)
            r.config_set("slowlog-log-slower-than", 0)
            r.slowlog_reset()
            try:
                yield self
                entries = r.slowlog_get(SLOWLOG_LEN)
            finally:
                for key, value in saved.items():
                    r.config_set(key, value)
                r.slowlog_reset()
        self.truncated = len(entries) >= SLOWLOG_LEN
        for entry in entries:
            command = entry["command"]
            words = command.split() if isinstance(command, str) else command.decode().split()
            verb = words[0].upper() if words else "?"
            if verb == "EVALSHA" and len(words) > 1:
                table, name = self.per_script, words[1]
            else:
                table, name = self.other, verb
            calls, usec = table.get(name, (0, 0))
            table[name] = (calls + 1, usec + int(entry["duration"]))

    def named(self, names: dict[str, str]) -> dict[str, tuple[int, int]]:
        """:attr:`per_script` (keyed by each script's SHA1) keyed by ``names[sha]``
        (the queue operation that sends it, which the measured child reports), else
        by the SHA1's first 8 digits."""
        out: dict[str, tuple[int, int]] = {}
        for sha, (calls, usec) in self.per_script.items():
            name = names.get(sha, sha[:8])
            c0, u0 = out.get(name, (0, 0))
            out[name] = (c0 + calls, u0 + usec)
        return out
