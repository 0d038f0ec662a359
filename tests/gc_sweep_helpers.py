"""What the sweep tests (``tests/test_gc_sweep_*.py``) share: a data directory on a
fake clock (the ``env`` fixture), its run records (``state``), blobs saved in age
order and dead letters.

Import the fixtures by their function names, which differ from the fixture names
so that a test's ``env`` argument does not shadow an import::

    from tests.gc_sweep_helpers import env_fixture  # noqa: F401 - the env fixture
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mediaflow.engine.state_store import StateStore
from mediaflow.media import MediaRef
from tests.gc_helpers import GcEnv, close_env, open_env

DAY_S = 86400.0
KB = 1000


@pytest.fixture(name="env")
async def env_fixture(tmp_path: Path) -> AsyncIterator[GcEnv]:
    opened = open_env(tmp_path / "data")
    yield opened
    await close_env(opened)


@pytest.fixture(name="state")
def state_fixture(env: GcEnv) -> Iterator[StateStore]:
    opened = StateStore(env.data_dir)
    yield opened
    opened.close()


def blob(name: str, size: int = KB) -> bytes:
    """``size`` bytes that differ by ``name``."""
    seed = name.encode()
    return (seed * (size // len(seed) + 1))[:size]


async def save_in_turn(env: GcEnv, names: list[str]) -> list[MediaRef]:
    """Save one blob per name, a second apart, so their age order is the list's."""
    refs = []
    for name in names:
        refs.append(await env.save(blob(name)))
        env.clock.advance(1)
    return refs


async def dead_letter(env: GcEnv, ref: MediaRef) -> None:
    """Root ``ref`` in a dead letter: an emission carrying it, claimed and given up."""
    await env.queue.dead_letter(await env.claim(ref), "decoder crashed")
