"""``GET`` and ``HEAD /artifacts/{digest}``: decide first (:mod:`.ranges`), act second.

The digest is checked against ``sha256:<64 lowercase hex>`` before any path
is formed, so no request can name a file outside the store. Every answer
about an artifact carries its ETag (the digest), ``Accept-Ranges: bytes``,
``X-Content-Type-Options: nosniff``, ``Content-Security-Policy: sandbox``
(an artifact opened directly can run nothing) and immutable caching.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict

from mediaflow.media import is_digest
from mediaflow.server import mediatypes
from mediaflow.server.filecache import OpenArtifact
from mediaflow.server.header_block import HeaderBlock
from mediaflow.server.ranges import Outcome, decide
from mediaflow.server.state import STATE, AppState
from mediaflow.server.transfer import SpanResponse

DIGEST_LEN = len("sha256:") + 64
IMMUTABLE = "max-age=31536000, immutable"
BAD_TYPE = "type must be image/*, audio/*, video/* or application/octet-stream"


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON error body ``{"error": message}`` (bodies are dropped for HEAD by aiohttp)."""
    return web.json_response({"error": message}, status=status, headers=headers)


def artifact_handler(state: AppState) -> Handler:
    """The handler of ``GET``/``HEAD /artifacts/{digest}`` for ``state``; see DESIGN.md "HTTP"."""
    cache = state.cache

    async def get_artifact(request: web.Request) -> web.StreamResponse:
        digest = request.match_info["digest"]
        override = None
        if "?" in request.raw_path:
            override = request.query.get("type")
            if override is not None and not mediatypes.servable(override):
                return error(400, BAD_TYPE)
        # An open artifact's digest was checked when it was opened.
        entry = cache.acquire_hit(digest)
        if entry is None:
            # len() first: is_digest's `$`-free fullmatch is exact; the length check is cheaper.
            if len(digest) != DIGEST_LEN or not is_digest(digest):
                return error(400, "malformed digest: expected sha256:<64 lowercase hex>")
            entry = await cache.acquire(digest)
            if entry is None:
                return error(404, f"no artifact {digest}")
        try:
            return _answer(request, state, entry, override)
        except BaseException:
            cache.release(entry)
            raise

    return get_artifact


async def answer_stored(
    request: web.Request, state: AppState, digest: str, extra: Sequence[tuple[str, str]] = ()
) -> web.StreamResponse:
    """Answer ``request`` with the stored artifact ``digest`` as ``GET /artifacts`` would
    (ranges, validators, caching), with ``extra`` headers; 404 if it is gone."""
    entry = await state.cache.acquire(digest)
    if entry is None:
        return error(404, f"no artifact {digest}")
    try:
        return _answer(request, state, entry, None, extra)
    except BaseException:
        state.cache.release(entry)
        raise


def _answer(
    request: web.Request,
    state: AppState,
    entry: OpenArtifact,
    override: str | None,
    extra: Sequence[tuple[str, str]] = (),
) -> web.StreamResponse:
    """Build the response; the entry's reference passes to a :class:`SpanResponse` or
    is released here."""
    facts = entry.facts
    decision = decide(request.method, request.headers, facts, time.time())
    fixed = entry.fixed_headers or _fixed_headers(state, entry)
    if extra:
        fixed = HeaderBlock((*fixed.pairs, *extra))
    outcome = decision.outcome
    if outcome is Outcome.FULL or outcome is Outcome.PARTIAL:
        settings = state.settings
        return SpanResponse(
            status=decision.status,
            content_type=override or entry.served_type,
            content_range=decision.content_range(facts.size),
            fixed=fixed,
            cache=state.cache,
            entry=entry,
            start=decision.start,
            length=decision.length,
            sendfile=settings.sendfile,
            inline_max=settings.inline_max,
            stats=state.transfers,
        )
    state.cache.release(entry)
    headers: CIMultiDict[str] = CIMultiDict(fixed.pairs)
    if outcome is Outcome.NOT_MODIFIED:
        # RFC 9110 15.4.5: a 304 carries the validators and caching a 200 would have.
        return web.Response(status=304, headers=headers)
    content_range = decision.content_range(facts.size)
    if content_range is not None:
        headers["Content-Range"] = content_range
    headers["Content-Type"] = "application/json"
    message = (
        "range not satisfiable"
        if outcome is Outcome.RANGE_NOT_SATISFIABLE
        else "precondition failed"
    )
    return web.Response(status=decision.status, headers=headers, text=f'{{"error": "{message}"}}')


def _fixed_headers(state: AppState, entry: OpenArtifact) -> HeaderBlock:
    private = state.settings.lock_reads  # behind a token, shared caches must not keep it
    entry.fixed_headers = HeaderBlock(
        (
            ("ETag", entry.etag),
            ("Last-Modified", entry.last_modified),
            ("Accept-Ranges", "bytes"),
            ("Cache-Control", ("private, " if private else "public, ") + IMMUTABLE),
            ("X-Content-Type-Options", "nosniff"),
            ("Content-Security-Policy", "sandbox"),
        )
    )
    return entry.fixed_headers


def add_routes(app: web.Application) -> None:
    # HEAD is answered by the GET route (aiohttp adds it), with the same decision.
    app.router.add_get("/artifacts/{digest}", artifact_handler(app[STATE]), name="artifact")
