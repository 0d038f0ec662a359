"""``PUT /artifacts`` and ``PUT /artifacts/{digest}``: a body streamed into the store.

The body goes through :meth:`ArtifactStore.save` as an async iterator, so the
store's own machinery does the work: a temp file in ``artifacts/tmp/`` that
hashes while it fills (worker threads, at most two 1 MiB batches in memory),
fsync, and an atomic link to the content address. Anything that goes wrong
while the body streams is raised *inside* that iterator, before the store
places the file, and the store removes the temp file on the way out:

* more bytes than ``MEDIAFLOW_MAX_UPLOAD`` (Content-Length is checked before
  reading; a chunked body is counted as it arrives): 413;
* a body whose sha256 is not the digest in the URL: 400;
* a client that disconnects mid-body (or sends less than its Content-Length): nothing stored;
* a full disk: 507 (the store raises :class:`StoreFull`).

Success is 201 with the reference JSON and ``Location: /artifacts/<digest>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import ClientPayloadError, web
from aiohttp.streams import StreamReader

from mediaflow.media import MediaError, is_digest
from mediaflow.server import auth, mediatypes
from mediaflow.server.artifacts import DIGEST_LEN, error
from mediaflow.server.state import STATE
from mediaflow.store import StoreFull

log = logging.getLogger("mediaflow.http")

META_HEADER = "X-Mediaflow-Meta"
MAX_META_BYTES = 8192
READ_CHUNK = 1 << 20


class UploadRefused(Exception):
    """Raised from the body iterator to abort a save; carries the HTTP answer."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


class BodyGone(Exception):
    """The client stopped sending before the body was complete."""


async def body_chunks(
    content: StreamReader, *, limit: int, declared: int | None, expected: str | None
) -> AsyncIterator[bytes]:
    """Yield the request body, enforcing ``limit`` and, at the end, ``expected``.

    Raises :class:`UploadRefused` (413, or 400 for a digest mismatch) and
    :class:`BodyGone`; both propagate out of the store's save, which then
    discards its temp file.
    """
    hasher = hashlib.sha256() if expected is not None else None
    received = 0
    try:
        async for chunk in content.iter_chunked(READ_CHUNK):
            received += len(chunk)
            if received > limit:
                raise UploadRefused(413, f"body exceeds {limit} bytes", close=True)
            if hasher is not None:
                hasher.update(chunk)
            yield chunk
    except (ClientPayloadError, ConnectionError) as exc:
        raise BodyGone(f"client went away after {received} bytes: {exc}") from exc
    if declared is not None and received != declared:
        raise BodyGone(f"got {received} of {declared} declared bytes")
    if hasher is not None and "sha256:" + hasher.hexdigest() != expected:
        raise UploadRefused(400, f"body does not match {expected}; nothing stored")


def parse_meta(raw: str | None) -> dict[str, Any]:
    """The ``X-Mediaflow-Meta`` header: a JSON object (no NaN/Infinity), at most 8 KiB.

    Raises :class:`UploadRefused` (400) with what is wrong.
    """
    if raw is None:
        return {}
    if len(raw) > MAX_META_BYTES:
        raise UploadRefused(400, f"{META_HEADER} is longer than {MAX_META_BYTES} bytes")

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        meta = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError) as exc:
        raise UploadRefused(400, f"{META_HEADER} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise UploadRefused(400, f"{META_HEADER} must be a JSON object")
    return meta


def _precheck(request: web.Request) -> tuple[str | None, str, dict[str, Any]]:
    """Validate everything known before the body: (expected digest, media type, meta)."""
    expected = request.match_info.get("digest")
    if expected is not None and (len(expected) != DIGEST_LEN or not is_digest(expected)):
        raise UploadRefused(400, "malformed digest: expected sha256:<64 lowercase hex>")
    media_type = request.headers.get("Content-Type") or mediatypes.FALLBACK
    if not mediatypes.storable(media_type):
        raise UploadRefused(
            415,
            "Content-Type must be image/*, audio/*, video/*, text/plain"
            " or application/octet-stream",
        )
    meta = parse_meta(request.headers.get(META_HEADER))
    limit = request.app[STATE].settings.max_upload
    declared = request.content_length
    if declared is not None and declared > limit:
        raise UploadRefused(413, f"Content-Length {declared} exceeds {limit} bytes", close=True)
    return expected, media_type, meta


def _refusal(exc: UploadRefused) -> web.Response:
    response = error(exc.status, exc.message)
    if exc.close:
        response.force_close()  # do not read (or linger over) a body we refused
    return response


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse before the client sends a byte it need not send.

    Runs before middlewares (aiohttp calls it while routing), so it checks auth too.
    """
    refused = auth.check(request, request.app[STATE].settings)
    if refused is not None:
        refused.force_close()
        return refused
    try:
        _precheck(request)
    except UploadRefused as exc:
        return _refusal(exc)
    if request.headers.get("Expect", "").lower() != "100-continue":
        return error(417, "only Expect: 100-continue is understood")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0
    return None


async def put_artifact(request: web.Request) -> web.StreamResponse:
    """Store the body; 201 with the reference JSON. See the module docstring for errors."""
    state = request.app[STATE]
    try:
        expected, media_type, meta = _precheck(request)
        chunks = body_chunks(
            request.content,
            limit=state.settings.max_upload,
            declared=request.content_length,
            expected=expected,
        )
        ref = await state.store.save(chunks, media_type, meta)
    except UploadRefused as exc:
        return _refusal(exc)
    except BodyGone as exc:
        log.info("upload from %s abandoned: %s", request.remote, exc)
        response = error(400, "incomplete body; nothing stored")
        response.force_close()
        return response
    except StoreFull as exc:
        log.error("upload refused, store full: %s", exc)
        return error(507, "artifact store is full; nothing stored")
    except MediaError as exc:
        return error(400, str(exc))
    return web.json_response(
        ref.to_json(), status=201, headers={"Location": f"/artifacts/{ref.digest}"}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_put("/artifacts", put_artifact, expect_handler=expect_continue)
    app.router.add_put(
        "/artifacts/{digest}", put_artifact, expect_handler=expect_continue, name="put_artifact"
    )
