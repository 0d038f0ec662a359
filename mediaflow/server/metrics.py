"""``GET /metrics``: Prometheus text, from a registry of this app's own.

Most numbers already exist somewhere and are read at scrape time by one
custom collector (no second bookkeeping to drift): the queue's backlog per
stream and its lifetime counters, the runners' finished items, the bus's
event counts, the store's totals (bytes and count stored, a row the store
keeps current; and kept, a sum over the keeps, not over every artifact), what
sweeps did (the store's persisted GC counters, so the sweeps of every process
sharing the data directory show here), the bytes each transfer path sent.
Three are kept here because nothing else keeps them: HTTP answers by
method, route and status (from ``on_response_prepare``), the emit-to-start
latency histogram, fed per item from the runner's latency window (see
:func:`observe_latencies`), and the capture losses the connectors report on
the bus (``frames_skipped``, ``audio_overflow``: running totals per stage).

The per-item paths are plain dict and list increments: a Prometheus
``Histogram.observe`` takes a lock and costs several times more, which the
engine would pay on every item.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mediaflow.queue import QueueError, QueueStats, StreamBacklog, StreamKey
from mediaflow.server.live import live_metrics
from mediaflow.server.state import AppState
from mediaflow.store.metadata import GcCounters, StoreTotals

if TYPE_CHECKING:
    from mediaflow.engine.events import Event
    from mediaflow.engine.session import FlowSession


# Emit-to-start latency, seconds: sub-millisecond (claimed at enqueue) to a long backlog.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0)  # fmt: skip
SCRAPE_TIMEOUT_S = 2.0
# Bus events whose integer fields are running totals of capture losses, and the media.
CAPTURE_LOSS_EVENTS = {"frames_skipped": "video", "audio_overflow": "audio"}
_NOT_A_STAGE = frozenset({"flow", "node", "device", "total", "new"})


class LatencyHistogram:
    """Cumulative-at-scrape bucket counts per (flow, node). Loop thread only."""

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self._counts: dict[tuple[str, str], list[int]] = {}
        self._sums: dict[tuple[str, str], float] = {}

    def observe(self, flow: str, node: str, seconds: float) -> None:
        key = (flow, node)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0] * (len(self.buckets) + 1)
            self._sums[key] = 0.0
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self._sums[key] += seconds

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "mediaflow_emit_to_start_seconds",
            "Time from an emission to the start of the node run that reads it",
            labels=["flow", "node"],
        )
        for (flow, node), counts in self._counts.items():
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric([flow, node], buckets, self._sums[(flow, node)])
        return family


def observe_latencies(session: FlowSession, callback: Callable[[str, float], None]) -> None:
    """Call ``callback(node, seconds)`` for every latency the session's runner records."""
    session.observe_latency(callback)


@dataclass
class Snapshot:
    """Facts fetched asynchronously just before a scrape renders."""

    backlog: dict[StreamKey, StreamBacklog] = field(default_factory=dict)
    stats: QueueStats | None = None
    queue_up: bool = False
    store: StoreTotals | None = None
    gc: GcCounters | None = None


class Metrics(Collector):
    """This app's registry and its one collector."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = LatencyHistogram()
        self.http: Counter[tuple[str, str, int]] = Counter()
        # (flow, node, device, media, stage) -> the latest running total reported
        self.capture_losses: dict[tuple[str, str, str, str, str], int] = {}
        self.snapshot = Snapshot()
        self._watched: set[int] = set()
        self._lock = asyncio.Lock()
        self.registry.register(self)

    def watch(self, session: FlowSession) -> None:
        """Feed the latency histogram from a started session (once per session)."""
        if not session.started or id(session) in self._watched:
            return
        self._watched.add(id(session))
        flow = session.spec.name
        observe = self.latency.observe
        observe_latencies(session, lambda node, seconds: observe(flow, node, seconds))

    def on_event(self, event: Event) -> None:
        """Keep the capture-loss totals a connector reports (a bus listener)."""
        media = CAPTURE_LOSS_EVENTS.get(event.type)
        if media is None:
            return
        data = event.data
        where = (str(data.get("flow", "")), str(data.get("node", "")), str(data.get("device", "")))
        for stage, value in data.items():
            if stage not in _NOT_A_STAGE and type(value) is int:  # not a flag
                self.capture_losses[(*where, media, stage)] = value

    def count_response(self, method: str, route: str, status: int) -> None:
        self.http[(method, route, status)] += 1

    async def refresh(self) -> None:
        state = self.state
        snapshot = Snapshot()
        if state.queue is not None:
            try:
                snapshot.backlog = await asyncio.wait_for(state.queue.backlog(), SCRAPE_TIMEOUT_S)
                snapshot.stats = await asyncio.wait_for(state.queue.stats(), SCRAPE_TIMEOUT_S)
                snapshot.queue_up = True
                state.queue_watch.answered()
            except (QueueError, TimeoutError) as exc:
                state.queue_watch.failed("the metrics", exc)
        snapshot.store, snapshot.gc = await asyncio.to_thread(_store_facts, state)
        self.snapshot = snapshot

    async def render(self) -> bytes:
        async with self._lock:  # one scrape at a time renders the snapshot it fetched
            await self.refresh()
            return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        yield from self._queue_metrics()
        yield from self._engine_metrics()
        yield from self._store_metrics()
        yield from self._server_metrics()
        yield from self._forward_metrics()
        yield from live_metrics(self.state.live)

    def _queue_metrics(self) -> Iterator[Metric]:
        snap = self.snapshot
        yield GaugeMetricFamily(
            "mediaflow_queue_up", "1 if the work queue answered this scrape", value=snap.queue_up
        )
        items = GaugeMetricFamily(
            "mediaflow_queue_backlog_items",
            "Unacked items waiting per consumer stream, by state",
            labels=["flow", "node", "state"],
        )
        age = GaugeMetricFamily(
            "mediaflow_queue_oldest_age_seconds",
            "Age of the oldest unacked item per consumer stream",
            labels=["flow", "node"],
        )
        now = time.time()
        for stream, backlog in sorted(snap.backlog.items()):
            for name in ("ready", "pending", "delayed"):
                items.add_metric([stream.flow, stream.node, name], getattr(backlog, name))
            if backlog.oldest_enqueued_at is not None:
                age.add_metric(
                    [stream.flow, stream.node], max(0.0, now - backlog.oldest_enqueued_at)
                )
        yield items
        yield age
        if snap.stats is not None:
            for name, help_text in (
                ("enqueued", "Items enqueued"),
                ("acked", "Items delivered and acknowledged"),
                ("redelivered", "Deliveries after the first (crash or lease expiry)"),
                ("dead_lettered", "Items dead-lettered"),
            ):
                yield CounterMetricFamily(
                    f"mediaflow_queue_{name}", help_text, value=getattr(snap.stats, name)
                )

    def _engine_metrics(self) -> Iterator[Metric]:
        finished = CounterMetricFamily(
            "mediaflow_items_finished", "Node runs finished by this process", labels=["flow"]
        )
        started = CounterMetricFamily(
            "mediaflow_node_items_started",
            "Items that reached a node's run (emit-to-start latency recorded)",
            labels=["flow", "node"],
        )
        for name, session in sorted(self.state.sessions.items()):
            if not session.started:
                continue
            snapshot = session.snapshot()
            finished.add_metric([name], snapshot.finished_items)
            for node, total in sorted(snapshot.started_items.items()):
                started.add_metric([name, node], total)
        yield finished
        yield started
        yield self.latency.family()
        events = CounterMetricFamily(
            "mediaflow_events", "Events published on the bus, by type", labels=["type"]
        )
        for event_type, count in sorted(self.state.bus.counts.items()):
            events.add_metric([event_type], count)
        yield events
        losses = CounterMetricFamily(
            "mediaflow_capture_losses",
            "Frames or audio a device produced that never reached the flow, by stage "
            "(video: capture, jpeg, video lanes; audio: overflows, dropped)",
            labels=["flow", "node", "device", "media", "stage"],
        )
        for labels, total in sorted(self.capture_losses.items()):
            losses.add_metric(list(labels), total)
        yield losses

    def _store_metrics(self) -> Iterator[Metric]:
        totals = self.snapshot.store
        if totals is not None:
            for name, help_text, value in (
                ("bytes", "Bytes of artifacts recorded in the store", totals.bytes),
                ("count", "Artifacts recorded in the store", totals.count),
                ("kept_bytes", "Bytes of artifacts under an unexpired keep (recordings, "
                 "holds)", totals.kept_bytes),
                ("kept_count", "Artifacts under an unexpired keep", totals.kept_count),
            ):  # fmt: skip
                yield GaugeMetricFamily(f"mediaflow_artifacts_{name}", help_text, value=value)
        gc_settings = self.state.gc_settings
        if gc_settings is not None and gc_settings.max_bytes is not None:
            yield GaugeMetricFamily(
                "mediaflow_artifacts_max_bytes",
                "The disk cap on the store (ARTIFACT_MAX_BYTES)",
                value=gc_settings.max_bytes,
            )
        counters = self.snapshot.gc
        if counters is None:
            return
        for name, help_text, value in (
            ("sweeps", "Sweeps of the store, by any process", counters.sweeps),
            ("deleted", "Artifacts deleted by sweeps, evictions included", counters.deleted),
            ("freed_bytes", "Bytes freed by sweeps", counters.freed_bytes),
            ("evicted", "Artifacts evicted under the cap or by retention", counters.evicted),
            ("evicted_bytes", "Bytes evicted under the cap or by retention",
             counters.evicted_bytes),
        ):  # fmt: skip
            yield CounterMetricFamily(f"mediaflow_gc_{name}", help_text, value=value)
        if counters.last_sweep_at is not None:
            yield GaugeMetricFamily(
                "mediaflow_gc_last_sweep_timestamp_seconds",
                "When the last sweep finished (Unix time)",
                value=counters.last_sweep_at,
            )
        if counters.last_sweep_s is not None:
            yield GaugeMetricFamily(
                "mediaflow_gc_last_sweep_duration_seconds",
                "How long the last sweep took",
                value=counters.last_sweep_s,
            )

    def _forward_metrics(self) -> Iterator[Metric]:
        """How an edge box's forwarding goes, per flow it forwards."""
        statuses = {flow: status() for flow, status in self.state.forwarding.items()}
        if not statuses:
            return
        gauges = {
            "link_up": "1 if the shared queue and the artifact service answered last time",
            "backlog_items": "Items waiting on this box to be forwarded",
            "backlog_seconds": "Age of the oldest item waiting on this box to be forwarded",
            "backlog_bytes": "Bytes of the artifacts of the items waiting to be forwarded",
            "last_forward_timestamp_seconds": "When items were last forwarded (Unix time)",
        }
        counters = {
            "items": "Items forwarded to the shared queue",
            "bytes": "Bytes of artifacts uploaded to the artifact service",
            "lost_items": "Items not forwarded: their artifacts were evicted from this box",
        }
        values = {
            flow: {
                "link_up": 1.0 if s.link_up else 0.0,
                "backlog_items": s.backlog_items,
                "backlog_seconds": s.backlog_seconds,
                "backlog_bytes": s.backlog_bytes,
                "last_forward_timestamp_seconds": s.last_forward_at or 0.0,
                "items": s.forwarded_items,
                "bytes": s.forwarded_bytes,
                "lost_items": s.lost_items,
            }
            for flow, s in statuses.items()
        }
        for name, help_text in gauges.items():
            gauge = GaugeMetricFamily(f"mediaflow_forward_{name}", help_text, labels=["flow"])
            for flow, row in values.items():
                gauge.add_metric([flow], row[name])
            yield gauge
        for name, help_text in counters.items():
            counter = CounterMetricFamily(f"mediaflow_forward_{name}", help_text, labels=["flow"])
            for flow, row in values.items():
                counter.add_metric([flow], row[name])
            yield counter

    def _server_metrics(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "mediaflow_http_requests",
            "HTTP responses by method, route and status",
            labels=["method", "route", "status"],
        )
        for (method, route, status), count in sorted(self.http.items()):
            requests.add_metric([method, route, str(status)], count)
        yield requests
        sent = CounterMetricFamily(
            "mediaflow_http_artifact_bytes_sent",
            "Artifact body bytes sent, by transfer path",
            labels=["path"],
        )
        transfers = self.state.transfers
        for name in ("inline", "direct", "resumed", "chunked"):
            sent.add_metric([name], getattr(transfers, name))
        yield sent


def _store_facts(state: AppState) -> tuple[StoreTotals, GcCounters]:
    """The store's totals and GC counters. Blocking: call it in a worker thread."""
    return state.store.totals(), state.store.gc_counters()


METRICS: web.AppKey[Metrics] = web.AppKey("mediaflow_metrics", Metrics)
"""The app's :class:`Metrics`, set by the app factory next to its state."""


async def scrape(request: web.Request) -> web.StreamResponse:
    metrics = request.app.get(METRICS)
    if metrics is None:
        return web.json_response({"error": "metrics are not set up"}, status=503)
    body = await metrics.render()
    return web.Response(
        body=body, headers={"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", scrape)
