"""``GET /api/recordings/{flow}/{node}/export.mp4?start=&end=``: one MP4 of a recorded range.

The range is exported once (:mod:`mediaflow.timeline.export`, in a worker thread:
packets copied, never re-encoded), saved in the store, and answered like any
artifact: its digest as ETag, single ranges, ``If-Range``, so a player's range
requests after the first read the same bytes. Asked again while that artifact is
stored, with the same clips in the range, it is not exported again; asks that
arrive together share one export. An export is not kept as a recording: garbage
collection takes it after its grace period (``ARTIFACT_GC_GRACE_S``).

Headers beside the artifact's: ``X-Mediaflow-Begins-At`` (the wall-clock time,
seconds since the epoch, of the file's time 0), ``X-Mediaflow-Gaps`` (a JSON list of
``[start, end]`` wall-clock spans of the range no clip covers, closed up in the file,
not filled) and ``Content-Disposition`` with a file name.

Refusals: 400 for a malformed or missing time or a range too long; 404 for a
recorder that recorded nothing there (or whose clips were all evicted); 409 for
clips that cannot be joined into one MP4 (WebM, a change of codec or size).
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Final

from aiohttp import web

from mediaflow.server.artifacts import answer_stored, error
from mediaflow.server.recordings import names, time_range
from mediaflow.server.state import STATE, AppState
from mediaflow.timeline import (
    CannotExport,
    ExportError,
    ExportOptions,
    ExportResult,
    NothingRecorded,
    export_recording,
)
from mediaflow.timeline.times import iso

log = logging.getLogger("mediaflow.http")

REMEMBERED: Final = 64  # exports whose digest is remembered, newest first
ExportKey = tuple[str, str, float, float, tuple[str, ...]]  # flow, node, range, clips
Made = tuple[str, dict[str, str]]  # the export's digest, and the headers beside it


class Exports:
    """The exports of one app: what was exported (bounded) and what is being exported."""

    def __init__(self, state: AppState, options: ExportOptions) -> None:
        self.state = state
        self.options = options
        self._done: OrderedDict[ExportKey, Made] = OrderedDict()
        self._running: dict[ExportKey, asyncio.Future[Made]] = {}

    async def digest_of(self, flow: str, node: str, start: float, end: float) -> Made:
        """The stored export of the range and its headers, exporting it if needed.
        Raises the :class:`ExportError` family, ``OSError`` and FFmpeg's errors."""
        index = self.state.timeline
        clips = await asyncio.to_thread(index.clips, flow, node, start, end)
        key = (flow, node, start, end, tuple(clip.ref.digest for clip in clips))
        done = self._done.get(key)
        if done is not None and await asyncio.to_thread(self.state.store.exists, done[0]):
            self._done.move_to_end(key)
            return done
        running = self._running.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Made] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            made = await self._export(flow, node, start, end)
        except asyncio.CancelledError:
            future.cancel()  # the asker went away: those sharing it ask again
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(made)
            self._done[key] = made
            while len(self._done) > REMEMBERED:
                self._done.popitem(last=False)
            return made
        finally:
            del self._running[key]

    async def _export(self, flow: str, node: str, start: float, end: float) -> Made:
        store = self.state.store
        folder = store.data_dir / "tmp" / "exports"
        folder.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            out = Path(scratch) / "export.mp4"
            result: ExportResult = await asyncio.to_thread(
                export_recording,
                self.state.timeline,
                store,
                flow,
                node,
                start,
                end,
                out,
                options=self.options,
            )
            meta = {"flow": flow, "node": node, **result.to_json()}
            ref = await store.save(out, "video/mp4", meta)
        log.info(
            "exported %s/%s %s to %s: %.1f s of video, %d gap(s), %d bytes in %.2f s",
            flow, node, iso(start), iso(end), result.duration, len(result.gaps),
            result.size, time.monotonic() - began,
        )  # fmt: skip
        name = f"{flow}-{node}-{iso(result.begins_at).replace(':', '')}.mp4"
        headers = {
            "X-Mediaflow-Begins-At": f"{result.begins_at:.6f}",
            "X-Mediaflow-Gaps": json.dumps([[a, b] for a, b in result.gaps]),
            "Content-Disposition": f'inline; filename="{name}"',
        }
        return ref.digest, headers


EXPORTS: web.AppKey[Exports] = web.AppKey("mediaflow_exports", Exports)


async def export_mp4(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        flow, node = names(request, "flow", "node")
        if "start" not in request.query or "end" not in request.query:
            raise ValueError("an export needs both start and end")
        start, end = time_range(request.query, time.time())
    except ValueError as exc:
        return error(400, str(exc))
    try:
        digest, headers = await request.app[EXPORTS].digest_of(flow, node, start, end)
    except NothingRecorded as exc:
        return error(404, str(exc))
    except CannotExport as exc:
        return error(409, str(exc))
    except ExportError as exc:  # the range itself: malformed or too long
        return error(400, str(exc))
    return await answer_stored(request, state, digest, tuple(headers.items()))


def add_routes(app: web.Application) -> None:
    state = app[STATE]
    app[EXPORTS] = Exports(state, ExportOptions(max_span_s=state.settings.export_max_s))
    app.router.add_get("/api/recordings/{flow}/{node}/export.mp4", export_mp4)
