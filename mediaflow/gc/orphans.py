"""What a crash or an aborted save leaves on disk outside the rows: stray files, temp files.

- A file in the fan-out directories without a row (a crash between placing a
  file and recording it) is *adopted*: recorded as an octet-stream artifact
  saved at its mtime, so the ordinary rules then keep or collect it; a message
  may still name it, so it is never deleted on sight.
- Temp files: ``artifacts/tmp/part-*`` (saves and uploads in progress) and the
  nodes' scratch directories under ``<data>/tmp/`` (the recorder's clip
  folders), once untouched for ``temp_age_s``: a live writer touches them all
  the time.

Blocking; the sweep runs these in a worker thread.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from mediaflow.gc.gcdb import GcDb
from mediaflow.store import ArtifactStore
from mediaflow.store.files import sweep_parts

_HEX2 = re.compile(r"[0-9a-f]{2}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHECK = 500  # digests looked up per query


def artifact_files(artifacts_dir: Path) -> Iterator[tuple[str, str]]:
    """Every artifact file as (digest, path), directory by directory; nothing is statted."""
    for top in _subdirs(artifacts_dir):
        for leaf in _subdirs(top):
            try:
                names = os.listdir(leaf)
            except FileNotFoundError:
                continue
            for name in names:
                if _HEX64.fullmatch(name) is not None:
                    yield "sha256:" + name, os.path.join(leaf, name)


def _subdirs(path: Path | str) -> list[str]:
    try:
        return sorted(e.path for e in os.scandir(path) if e.is_dir() and _HEX2.fullmatch(e.name))
    except FileNotFoundError:
        return []


def adopt_strays(db: GcDb, store: ArtifactStore) -> tuple[int, int]:
    """Record every file that has no row; return (files seen, files adopted).

    Lookups run in pages without a lock, and only files without a row are
    statted; the adoption itself holds savers off and re-checks, so a save
    finishing meanwhile keeps its own row (its media type, its saved time).
    """
    seen = adopted = 0
    page: list[tuple[str, str]] = []
    for found in artifact_files(store.artifacts_dir):
        page.append(found)
        seen += 1
        if len(page) >= _CHECK:
            adopted += _adopt_page(db, store, page)
            page = []
    if page:
        adopted += _adopt_page(db, store, page)
    return seen, adopted


def _adopt_page(db: GcDb, store: ArtifactStore, page: list[tuple[str, str]]) -> int:
    missing = set(db.unrecorded([digest for digest, _ in page]))
    if not missing:
        return 0
    with store.save_lock.exclusive():
        still = set(db.unrecorded(sorted(missing)))
        rows = []
        for digest, path in page:
            if digest in still:
                try:
                    stat = os.lstat(path)
                except FileNotFoundError:
                    continue  # a crash cleanup took it
                rows.append((digest, stat.st_size, stat.st_mtime))
        return db.adopt(rows) if rows else 0


def sweep_temp(store: ArtifactStore, older_than_s: float, *, dry_run: bool = False) -> int:
    """Remove temp files and scratch folders untouched for ``older_than_s``; return how many."""
    if dry_run:
        return _count_stale(store, older_than_s)
    removed = sweep_parts(store.tmp_dir, older_than_s=older_than_s)
    cutoff = time.time() - older_than_s
    for entry in _scratch_entries(store.data_dir / "tmp"):
        if _newest_mtime(entry) < cutoff:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed


def _count_stale(store: ArtifactStore, older_than_s: float) -> int:
    cutoff = time.time() - older_than_s
    parts = [p for p in _entries(store.tmp_dir) if _newest_mtime(p) < cutoff]
    scratch = [p for p in _scratch_entries(store.data_dir / "tmp") if _newest_mtime(p) < cutoff]
    return len(parts) + len(scratch)


def _scratch_entries(tmp: Path) -> Iterator[Path]:
    """What the nodes' scratch directories (``<data>/tmp/<node>/``) hold."""
    for node_dir in _entries(tmp):
        if node_dir.is_dir() and not node_dir.is_symlink():
            yield from _entries(node_dir)


def _entries(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _newest_mtime(path: Path) -> float:
    """The latest mtime in a small tree (a clip folder): a writer inside keeps it fresh."""
    try:
        newest = path.lstat().st_mtime
    except FileNotFoundError:
        return float("inf")  # gone already: nothing to do
    if path.is_dir() and not path.is_symlink():
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
                except FileNotFoundError:
                    continue
    return newest
