"""The storage lifecycle as the HTTP server shows and protects it: a real server on a
real data directory. A sweep leaves an artifact alone while a response is sending
it; ``/metrics`` says what is stored, kept and swept; the event stream forwards the
GC events; the wall's strip sums evictions; ``mediaflow serve`` sweeps on a timer."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from mediaflow.gc import GcSettings, Sweeper, sweep_artifacts
from mediaflow.media import MediaRef
from mediaflow.queue import NewItem, StreamKey
from mediaflow.server import AppState, ServerSettings
from mediaflow.server.filecache import ArtifactCache
from mediaflow.store import ArtifactStore
from mediaflow.store.locks import try_delete_lock, unshare
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.gc_helpers import FakeClock, ref_payload
from tests.http_support import (
    HOST,
    random_bytes,
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
    wait_until,
)
from tests.test_http_api import read_events, scrape

if TYPE_CHECKING:
    from playwright.async_api import Page

HOUR_S = 3600.0
NO_GRACE = GcSettings(grace_s=0.0)
GC_EVENTS = ("artifact_evicted", "store_over_cap", "gc_swept", "gc_failed")


def save_old(data_dir: Path, data: bytes, *, age_s: float = 2 * HOUR_S) -> MediaRef:
    store = ArtifactStore(data_dir, clock=FakeClock(time.time() - age_s))
    try:
        return store.save_sync(data, "video/mp4")
    finally:
        store.close()


def serve_state(data_dir: Path, **gc: Any) -> AppState:
    return AppState.for_serve(
        data_dir, settings=ServerSettings(), gc_settings=GcSettings(**gc) if gc else None
    )


# -- an artifact being sent ------------------------------------------------------------


async def test_the_cache_shares_a_lock_while_a_transfer_uses_an_entry(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.save_sync(b"clip" * 1000, "video/mp4")
    cache = ArtifactCache(store, capacity=1)
    sweeper_fd = os.open(store.path_for(ref.digest), os.O_RDONLY)  # as a sweep opens it
    try:
        first = await cache.acquire(ref.digest)
        assert first is not None and first.shared
        second = cache.acquire_hit(ref.digest)
        assert second is first and first.refs == 2
        assert not try_delete_lock(sweeper_fd)
        cache.release(first)
        assert not try_delete_lock(sweeper_fd)  # one transfer still uses it
        cache.release(first)
        assert not first.shared and not first.file.closed  # cached, idle, unlocked
        assert try_delete_lock(sweeper_fd)
        unshare(sweeper_fd)
        # An entry opened while a sweep holds the file is served all the same.
        assert try_delete_lock(sweeper_fd)
        held = cache.acquire_hit(ref.digest)
        assert held is not None and not held.shared
        cache.release(held)
        unshare(sweeper_fd)
    finally:
        os.close(sweeper_fd)
        cache.close()
        store.close()


async def test_a_sweep_leaves_an_artifact_a_ranged_download_is_reading(
    tmp_path: Path, transfer_path: str
) -> None:
    """Unreferenced and past its grace, a large clip is being downloaded (a range,
    larger than the socket takes at once): the sweep skips it, the download
    completes byte-exact, and the next sweep after the download takes it."""
    big = random_bytes(16 << 20, seed=10)
    ref = save_old(tmp_path, big)
    start = 1000
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(
            f"GET /artifacts/{ref.digest} HTTP/1.1\r\nHost: x\r\nRange: bytes={start}-\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 206 ")
        body = await reader.readexactly(100_000)

        queue = served.state.queue
        assert queue is not None
        report = await sweep_artifacts(tmp_path, queue, settings=NO_GRACE)
        assert (report.deleted, report.skipped_sending) == (0, 1)
        assert served.state.store.exists(ref)

        body += await reader.read()
        writer.close()
        assert len(body) == len(big) - start
        assert hashlib.sha256(body).digest() == hashlib.sha256(big[start:]).digest()

        def released() -> bool:
            entry = served.state.cache.acquire_hit(ref.digest)
            assert entry is not None
            served.state.cache.release(entry)
            return entry.refs == 0 and not entry.shared

        await wait_until(released)
        report = await sweep_artifacts(tmp_path, queue, settings=NO_GRACE)
        assert (report.deleted, report.skipped_sending) == (1, 0)
        assert not served.state.store.exists(ref)


# -- /metrics --------------------------------------------------------------------------


async def test_metrics_say_what_is_stored_kept_and_swept(tmp_path: Path) -> None:
    garbage = save_old(tmp_path, b"g" * 1000)
    recording = save_old(tmp_path, b"r" * 3000, age_s=3 * HOUR_S)
    kept = save_old(tmp_path, b"k" * 2000)
    queued = save_old(tmp_path, b"q" * 4000)
    store = ArtifactStore(tmp_path)
    store.keep("run-1", recording.digest)
    store.keep("run-1", kept.digest)
    store.close()
    cap = 7000  # after the garbage goes, 9000 B stored: the oldest recording is evicted
    state = serve_state(tmp_path, max_bytes=cap)
    async with serve(tmp_path, state=state) as served:
        queue = served.state.queue
        assert queue is not None
        await queue.commit([NewItem(StreamKey("cams", "viewer"), "emission", ref_payload(queued))])
        report = await sweep_artifacts(
            tmp_path, queue, settings=GcSettings(max_bytes=cap), store=served.state.store
        )
        assert (report.deleted, report.evicted) == (1, 1)
        assert not served.state.store.exists(garbage)
        metrics = await scrape(served)

    def value(name: str) -> float:
        return metrics[(name, ())]

    assert value("mediaflow_artifacts_bytes") == 6000
    assert value("mediaflow_artifacts_count") == 2
    assert value("mediaflow_artifacts_kept_bytes") == 2000
    assert value("mediaflow_artifacts_kept_count") == 1
    assert value("mediaflow_artifacts_max_bytes") == cap
    assert value("mediaflow_gc_sweeps_total") == 1
    assert value("mediaflow_gc_deleted_total") == report.deleted
    assert value("mediaflow_gc_freed_bytes_total") == 4000
    assert value("mediaflow_gc_evicted_total") == 1
    assert value("mediaflow_gc_evicted_bytes_total") == 3000
    assert value("mediaflow_gc_last_sweep_timestamp_seconds") == pytest.approx(report.started_at)
    assert value("mediaflow_gc_last_sweep_duration_seconds") == pytest.approx(report.duration_s)


async def test_metrics_before_any_sweep_and_without_a_cap(tmp_path: Path) -> None:
    save_old(tmp_path, b"x" * 123)
    async with serve(tmp_path) as served:
        metrics = await scrape(served)
    names = {name for name, _ in metrics}
    assert metrics[("mediaflow_artifacts_bytes", ())] == 123
    assert metrics[("mediaflow_gc_sweeps_total", ())] == 0
    assert "mediaflow_artifacts_max_bytes" not in names
    assert "mediaflow_gc_last_sweep_timestamp_seconds" not in names


# -- events ----------------------------------------------------------------------------


async def test_the_event_stream_forwards_what_a_sweeper_publishes(tmp_path: Path) -> None:
    """A real cap watcher on the server's bus: its eviction and its over-cap warning
    reach an event-stream client that asked for the GC events."""
    old = save_old(tmp_path, b"o" * 3000, age_s=3 * HOUR_S)
    live = save_old(tmp_path, b"l" * 5000)
    async with serve(tmp_path, state=serve_state(tmp_path)) as served:
        queue = served.state.queue
        assert queue is not None
        await queue.commit([NewItem(StreamKey("cams", "viewer"), "emission", ref_payload(live))])
        async with served.client.get(
            served.url + "/api/events?types=" + ",".join(GC_EVENTS)
        ) as response:
            await asyncio.sleep(0.05)
            sweeper = Sweeper(
                tmp_path,
                queue,
                served.state.bus,
                GcSettings(interval_s=0.0, max_bytes=4000, cap_check_s=0.05),
            )
            sweeper.start()
            try:
                evicted, over = await read_events(response, 2, timeout=10)
            finally:
                await sweeper.stop()
            served.state.bus.publish("gc_failed", {"error": "OSError: disk on fire"})
            (failed,) = await read_events(response, 1)
    assert evicted["event"] == "artifact_evicted"
    assert {k: evicted["data"][k] for k in ("digest", "bytes", "why")} == {
        "digest": old.digest,
        "bytes": 3000,
        "why": "cap",
    }
    assert over["event"] == "store_over_cap"
    assert {k: over["data"][k] for k in ("stored_bytes", "max_bytes", "live_bytes")} == {
        "stored_bytes": 5000,
        "max_bytes": 4000,
        "live_bytes": 5000,
    }
    assert failed["event"] == "gc_failed" and failed["data"]["error"].endswith("on fire")


async def test_the_wall_sums_evictions_and_warns_over_the_cap(tmp_path: Path, page: Page) -> None:
    async with serve(tmp_path) as served:
        bus = served.state.bus
        await page.goto(served.url + "/")
        await page.wait_for_selector("#connection[data-state='live']", timeout=10_000)
        bus.publish("engine_degraded", {"flow": "cams", "backlog": 1234})
        for i in range(12):
            bus.publish(
                "artifact_evicted", {"digest": f"sha256:{i:064x}", "bytes": 3000, "why": "cap"}
            )
        for stored in (1_500_000, 1_200_000):  # the cap watcher says it again: one chip
            bus.publish(
                "store_over_cap",
                {"stored_bytes": stored, "max_bytes": 1_000_000, "live_bytes": 800_000},
            )
        bus.publish("gc_failed", {"error": "OSError: disk on fire"})
        await page.wait_for_selector(".chip[data-type='gc_failed']", timeout=5_000)
        await page.wait_for_function(
            """() => [...document.querySelectorAll(".chip[data-type='artifact_evicted']")]
                .some((c) => c.textContent.includes("evicted 12 artifacts (36.0 KB)"))""",
            timeout=5_000,
        )
        chips = await page.eval_on_selector_all(
            "#strip .chip",
            "(all) => all.map((c) => [c.dataset.type, c.dataset.level, c.textContent])",
        )
        assert [c[0] for c in chips] == [
            "gc_failed",
            "store_over_cap",
            "artifact_evicted",
            "engine_degraded",
        ], chips
        levels = {c[0]: c[1] for c in chips}
        assert levels["store_over_cap"] == "warn" and levels["gc_failed"] == "bad"
        over = next(c[2] for c in chips if c[0] == "store_over_cap")
        assert over.endswith("store over cap: 1.2 MB of 1.0 MB, 800.0 KB held by live references")
        assert page_errors(page) == []


# -- mediaflow serve --------------------------------------------------------------------


def gc_counters(text: str) -> dict[str, float]:
    return {
        row.split()[0]: float(row.split()[-1])
        for row in text.splitlines()
        if row.startswith("mediaflow_gc_") and " " in row
    }


async def test_serve_sweeps_on_a_timer_and_reports_it(tmp_path: Path) -> None:
    garbage = save_old(tmp_path, b"left behind by a crash")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLOW_", "ARTIFACT_"))}
    env["ARTIFACT_GC_INTERVAL_S"] = "0.2"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mediaflow", "serve", "--data", str(tmp_path), "--port", "0",
        stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
        assert line.startswith(f"mediaflow: serving on http://{HOST}:"), line
        url = line.split()[-1]
        deadline = time.monotonic() + 20
        async with aiohttp.ClientSession() as client:
            while True:  # until a sweep has finished and counted what it did
                async with client.get(url + "/metrics") as response:
                    counted = gc_counters(await response.text())
                if counted.get("mediaflow_gc_sweeps_total", 0) >= 1:
                    break
                assert time.monotonic() < deadline, "no sweep within 20 s"
                await asyncio.sleep(0.1)
        assert counted["mediaflow_gc_deleted_total"] == 1
        assert counted["mediaflow_gc_freed_bytes_total"] == garbage.size
        store = ArtifactStore(tmp_path)
        try:
            assert not store.exists(garbage)
        finally:
            store.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
