"""An edge machine: ``mediaflow run`` in a child process with ``MEDIAFLOW_STORE``
pointing at an artifact service (``mediaflow serve``, another child), the queue on
Redis, and a data directory of its own, so the two share nothing on disk.

Needs ``mediaflow run`` to hand ``FlowSession`` the store settings it read
(``EngineSettings.store``), and the session to open its store with them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.redis_server import RedisServer
from tests.store_service import REPO, TOKEN, start_service, stored_digests
from tests.test_cli import mediaflow

# A virtual camera (JPEGs and 1 s video segments), a virtual microphone, a node that
# reads every chunk back, and a recorder that holds segments and keeps its clips.
FLOW = """
[flow]
name = "edge"

[[node]]
id = "cam"
connector = "camera"
device = "lavfi:testsrc2=size=160x120:rate=10"
fps = 5
segment_s = 1

[[node]]
id = "mic"
connector = "microphone"
device = "lavfi:sine=frequency=440:sample_rate=16000"
chunk_ms = 100

[[node]]
id = "meter"
use = "levels:Loudness"
inputs = { audio = "mic.audio" }

[[node]]
id = "rec"
use = "recorder"
clip_s = 1
inputs = { video = "cam.video", audio = "mic.audio" }
"""
DIGEST = re.compile(rb"sha256:[0-9a-f]{64}")


def digests_in_redis(redis: RedisServer) -> set[str]:
    """Every digest any key of the queue mentions (streams, hashes, sets, strings)."""
    found: set[bytes] = set()
    for key in redis.command("KEYS", "*"):
        kind = redis.command("TYPE", key)
        reply = {
            "stream": ("XRANGE", key, "-", "+"),
            "hash": ("HGETALL", key),
            "zset": ("ZRANGE", key, "0", "-1"),
            "set": ("SMEMBERS", key),
            "list": ("LRANGE", key, "0", "-1"),
            "string": ("GET", key),
        }[kind]
        found |= set(DIGEST.findall(repr(redis.command(*reply)).encode()))
    return {digest.decode() for digest in found}


def test_an_edge_run_leaves_every_referenced_artifact_on_the_service(
    tmp_path: Path, fresh_redis: RedisServer
) -> None:
    shutil.copy(REPO / "samples" / "levels.py", tmp_path / "levels.py")
    flow = tmp_path / "edge.toml"
    flow.write_text(FLOW)
    edge = tmp_path / "edge"
    service = start_service(tmp_path)
    try:
        result = mediaflow(
            "run", str(flow), "--for", "3", "--jsonl", "--data", str(edge),
            env={
                "MEDIAFLOW_STORE": service.url,
                "MEDIAFLOW_TOKEN": TOKEN,
                "MEDIAFLOW_QUEUE": fresh_redis.url,
            },
        )  # fmt: skip
    finally:
        service.stop()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and " ERROR " not in result.stderr
    refs = [
        (line["node"], line["port"], line["value"]["digest"])
        for line in map(json.loads, result.stdout.splitlines())
        if isinstance(line["value"], dict) and "digest" in line["value"]
    ]
    assert {("cam", "image"), ("cam", "video"), ("mic", "audio")} <= {(n, p) for n, p, _ in refs}
    emitted = {digest for _, _, digest in refs}
    queued = digests_in_redis(fresh_redis)
    assert queued, "the run's items are on Redis"
    on_service = service.stored_digests()
    assert emitted | queued <= on_service, "a referenced artifact is missing on the service"
    cached = stored_digests(edge)
    assert cached, "the edge caches what it saved"
    assert cached <= on_service, "the edge holds an artifact the service lacks"
    assert not (edge / "queue.sqlite3").exists()
