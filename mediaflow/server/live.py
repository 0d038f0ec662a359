"""``/live/{flow}/{node}``: a camera of this process, live, for HLS players and the wall.

- ``GET /live/{flow}/{node}.m3u8``: the HLS media playlist of the feed's window
  (:mod:`mediaflow.live.playlist`): groups of pictures as segments, their parts as
  ``EXT-X-PART``, each segment with its capture time as ``EXT-X-PROGRAM-DATE-TIME``.
  Blocking reloads hold the answer until what the player asks for exists:
  ``?_HLS_msn=M[&_HLS_part=N]`` (low-latency HLS: segment ``M`` finished, or its part
  ``N``; up to three target durations), ``?after=SEQ`` (the wall: a part newer than
  ``SEQ``; up to two parts' length).
- ``GET /live/{flow}/{node}/init.mp4``: the init segment (``ftyp`` + ``moov``).
- ``GET /live/{flow}/{node}/{seq}.m4s``: one part (``moof`` + ``mdat``); 404 once it
  left the window (a player that fell that far behind reloads the playlist and
  starts again at its first part).
- ``GET /live/{flow}/{node}/segment/{msn}.m4s``: one finished segment, its parts back
  to back; 404 before it is finished and once a part of it left the window.

The feeds live in the state's :class:`~mediaflow.live.hub.LiveHub` (the session's):
a camera with H.264 segments in this process has one, with the sound of its
``live_audio`` node as a second track (encoded while somebody reads the feed, silent
otherwise). Reads follow the server's
read lock like every other route. Answers are never cached: they change every part.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mediaflow.live.hub import LiveFeed, LiveHub
from mediaflow.live.parts import LivePart
from mediaflow.live.playlist import media_playlist, part_target, window
from mediaflow.server.artifacts import error
from mediaflow.server.state import STATE

PLAYLIST_TYPE = "application/vnd.apple.mpegurl"
NO_STORE = {"Cache-Control": "no-store"}
LISTED_S = 4.0  # the playlist lists at least this much, from a keyframe part


def _feed(request: web.Request) -> LiveFeed | web.Response:
    flow, node = request.match_info["flow"], request.match_info["node"]
    feed = request.app[STATE].live.feed(flow, node)
    if feed is None:
        return error(404, f"no live feed of {flow}/{node} in this process")
    feed.touch()  # a player is reading: its sound is encoded while it does
    if feed.init is None:
        return error(503, f"{flow}/{node} has no encoded frame yet", {"Retry-After": "1"})
    return feed


def _reload_query(
    request: web.Request,
) -> tuple[int | None, int | None, int | None] | web.Response:
    """``after``, ``_HLS_msn`` and ``_HLS_part`` as whole numbers (None where absent),
    or the 400 that refuses them."""
    numbers: list[int | None] = []
    for name in ("after", "_HLS_msn", "_HLS_part"):
        raw = request.query.get(name)
        if raw is not None and (not raw.isdigit() or len(raw) > 18):
            return error(400, f"{name} must be a whole number; got {raw!r}")
        numbers.append(None if raw is None else int(raw))
    after, msn, hls_part = numbers
    if hls_part is not None and msn is None:
        return error(400, "_HLS_part needs _HLS_msn")
    return after, msn, hls_part


def _reached(msn: int, part: int | None) -> Callable[[LivePart], bool]:
    """Whether the newest part shows segment ``msn`` finished (or its part ``part``)."""
    if part is None:
        return lambda newest: newest.segment > msn
    return lambda newest: (newest.segment, newest.index) >= (msn, part)


async def playlist(request: web.Request) -> web.Response:
    feed = _feed(request)
    if isinstance(feed, web.Response):
        return feed
    asked = _reload_query(request)
    if isinstance(asked, web.Response):
        return asked
    after, msn, hls_part = asked
    if msn is not None:
        newest = feed.parts[-1].segment if feed.parts else 0
        if msn > newest + 2:  # RFC 8216bis 6.2.5.2: too far in the future
            return error(400, f"_HLS_msn={msn} is more than two segments past {newest}")
        await feed.wait_until(_reached(msn, hls_part), 3 * max(1.0, feed.keyframe_s))
    if after is not None:
        await feed.wait_newer(after, feed.part_s * 2)
    parts = feed.parts
    shown = window(parts, math.ceil(LISTED_S / feed.part_s))
    if not shown:
        return error(503, "no part a player can start at yet", {"Retry-After": "1"})
    node = request.match_info["node"]
    text = media_playlist(
        shown,
        init_uri=f"{node}/init.mp4",
        part_uri=lambda part: f"{node}/{part.seq}.m4s",
        segment_uri=lambda number: f"{node}/segment/{number}.m4s",
        part_target_s=part_target(max(feed.part_s, *(p.duration_s for p in parts))),
        target_s=feed.keyframe_s,
    )
    return web.Response(text=text, content_type=PLAYLIST_TYPE, headers=NO_STORE)


async def init(request: web.Request) -> web.Response:
    feed = _feed(request)
    if isinstance(feed, web.Response):
        return feed
    assert feed.init is not None
    return web.Response(body=feed.init, content_type="video/mp4", headers=NO_STORE)


def _numbered(request: web.Request, key: str, what: str) -> int | web.Response:
    """The path's ``key`` as a number, or the 400 that refuses it."""
    raw = request.match_info[key]
    if not raw.isdigit():
        return error(400, f"a {what} is named by its number; got {raw!r}")
    return int(raw)


async def part(request: web.Request) -> web.Response:
    feed = _feed(request)
    if isinstance(feed, web.Response):
        return feed
    seq = _numbered(request, "seq", "part")
    if isinstance(seq, web.Response):
        return seq
    found = feed.part(seq)
    if found is None:
        return error(404, f"part {seq} is not in the live window")
    return web.Response(body=found.data, content_type="video/iso.segment", headers=NO_STORE)


async def segment(request: web.Request) -> web.Response:
    feed = _feed(request)
    if isinstance(feed, web.Response):
        return feed
    number = _numbered(request, "msn", "segment")
    if isinstance(number, web.Response):
        return number
    found = feed.segment(number)
    if found is None:
        return error(404, f"segment {number} is not finished, or not all in the live window")
    body = b"".join(part.data for part in found)
    return web.Response(body=body, content_type="video/iso.segment", headers=NO_STORE)


def live_metrics(hub: LiveHub) -> Iterator[Metric]:
    """What ``/metrics`` says of ``hub``'s live feeds and their sound."""
    watched = GaugeMetricFamily(
        "mediaflow_live_watched",
        "1 while a player reads the camera's live stream (its sound is encoded)",
        labels=["flow", "node"],
    )
    frames = CounterMetricFamily(
        "mediaflow_live_frames", "Encoded frames the live feed took", labels=["flow", "node"]
    )
    for (flow, node), feed in sorted(hub.feeds().items()):
        watched.add_metric([flow, node], int(feed.watched))
        frames.add_metric([flow, node], feed.frames)
    encoded = CounterMetricFamily(
        "mediaflow_live_sound_encoded_frames",
        "AAC frames encoded for live streams (silence costs none)",
        labels=["flow", "node"],
    )
    dropped = CounterMetricFamily(
        "mediaflow_live_sound_dropped_chunks",
        "Microphone chunks left out of live streams: the encoder fell behind",
        labels=["flow", "node"],
    )
    for (flow, node), sound in sorted(hub.sounds().items()):
        encoded.add_metric([flow, node], sound.encoded)
        dropped.add_metric([flow, node], sound.dropped)
    yield from (watched, frames, encoded, dropped)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/live/{flow}/{node}.m3u8", playlist)
    app.router.add_get("/live/{flow}/{node}/init.mp4", init)
    app.router.add_get("/live/{flow}/{node}/{seq}.m4s", part)
    app.router.add_get("/live/{flow}/{node}/segment/{msn}.m4s", segment)
