"""What the store tests (``tests/test_store_*.py``) share: a store in a temp
directory (the ``store`` fixture) and what they look at in it, its placed files,
its temp files and its rows.

Import the fixture by its function name, which differs from the fixture name so
that a test's ``store`` argument does not shadow an import::

    from tests.store_support import store_fixture  # noqa: F401 - the store fixture
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediaflow.store import ArtifactStore

MiB = 1 << 20
OCTETS = "application/octet-stream"


@pytest.fixture(name="store")
def store_fixture(tmp_path: Path) -> Iterator[ArtifactStore]:
    with ArtifactStore(tmp_path / "data") as s:
        yield s


def artifact_files(store: ArtifactStore) -> list[Path]:
    """Every placed artifact file (temp files excluded)."""
    return sorted(
        p for p in store.artifacts_dir.rglob("*") if p.is_file() and store.tmp_dir not in p.parents
    )


def temp_files(store: ArtifactStore) -> list[Path]:
    return sorted(store.tmp_dir.iterdir()) if store.tmp_dir.exists() else []


def row_count(store: ArtifactStore) -> int:
    with sqlite3.connect(store.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM artifacts").fetchone()[0])


def write_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes in 1 MiB pieces; return their digest."""
    hasher = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(size // MiB):
            piece = os.urandom(MiB)
            hasher.update(piece)
            out.write(piece)
    return "sha256:" + hasher.hexdigest()
