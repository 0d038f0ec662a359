"""What the ``mediaflow gc`` tests (``tests/test_gc_cli_*.py``) share: the GC
variables cleared for every test (autouse), artifacts saved as if long ago, items
enqueued into a data directory, and the command run through ``cli.main``.

Import the autouse fixture by its function name (an imported autouse fixture
applies to every test of the importing module)::

    from tests.gc_cli_helpers import gc_defaults_fixture  # noqa: F401 - autouse fixture
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mediaflow import cli
from mediaflow.media import MediaRef
from mediaflow.queue import NewItem, SqliteQueue, StreamKey
from mediaflow.store import ArtifactStore
from tests.gc_helpers import FakeClock, ref_payload, run_async

HOUR_S = 3600.0
GC_VARIABLES = ("ARTIFACT_GC_INTERVAL_S", "ARTIFACT_GC_GRACE_S", "ARTIFACT_MAX_BYTES",
                "ARTIFACT_CAP_CHECK_S", "MEDIAFLOW_QUEUE")  # fmt: skip


@pytest.fixture(name="gc_defaults", autouse=True)
def gc_defaults_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, whatever the environment running the tests sets."""
    for name in GC_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def save_old(data_dir: Path, data: bytes, *, age_s: float = 2 * HOUR_S) -> MediaRef:
    """Save ``data`` as if ``age_s`` ago (past the default grace of an hour)."""
    store = ArtifactStore(data_dir, clock=FakeClock(time.time() - age_s))
    try:
        return store.save_sync(data, "image/jpeg")
    finally:
        store.close()


def enqueue(data_dir: Path, *items: NewItem, claim_for: str | None = None) -> None:
    async def put() -> None:
        queue = SqliteQueue.in_dir(data_dir)
        try:
            await queue.commit(list(items), claim_for=claim_for)
        finally:
            await queue.close()

    run_async(put())


def emission(flow: str, ref: MediaRef) -> NewItem:
    return NewItem(StreamKey(flow, "viewer"), "emission", ref_payload(ref))


def present(data_dir: Path, ref: MediaRef) -> bool:
    store = ArtifactStore(data_dir)
    try:
        return store.exists(ref)
    finally:
        store.close()


def gc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["gc", *args])
    out, err = capsys.readouterr()
    return code, out, err
