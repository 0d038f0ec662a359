"""A blocking client of the artifact service's ``/artifacts`` routes (``mediaflow serve``).

One implementation for every caller: codec threads call it directly through
``save_sync``, async code hops to it with ``asyncio.to_thread``. It uses the
stdlib's ``http.client``, so a worker thread needs no event loop.

- Bodies stream: a PUT sends the file in 1 MiB blocks, a GET hands the body to
  the caller, who reads it in pieces. Nothing reads a whole file into memory.
- Connections are kept alive and reused (a few idle ones are pooled); every
  request has a socket timeout.
- Every request is idempotent (a PUT is addressed by the body's digest), so a
  transport failure (refused, reset, timed out, an idle connection the server
  closed) is retried after a capped exponential backoff, ``attempts`` times in
  all, then raised as :class:`StoreUnreachable` naming the URL.
- Answers become typed errors naming the URL: 404 :class:`ArtifactNotFound`,
  507 :class:`StoreFull`, anything else unexpected (401, 413 ...)
  :class:`RemoteStoreError` with its ``status`` and the service's own words.
"""

from __future__ import annotations

import errno
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, TypeVar
from urllib.parse import urlsplit

from mediaflow.store.errors import (
    ArtifactNotFound,
    RemoteStoreError,
    StoreFull,
    StoreUnreachable,
)

T = TypeVar("T")

BLOCK = 1 << 20  # bytes per socket write of a PUT body
MAX_ERROR_BODY = 64 * 1024  # an error answer is read this far, for its message
IDLE_CONNECTIONS = 8  # kept open between requests; more than this are closed
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)  # socket-level failures and bad framing

# The service stores only these (mediaflow/server/mediatypes.py, `storable`); anything
# else travels as the fallback. The reference handed out keeps the caller's type.
_WIRE_TOP_LEVELS = frozenset({"image", "audio", "video"})
_WIRE_ESSENCES = frozenset({"text/plain", "application/octet-stream"})
FALLBACK_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; the n-th retry waits ``backoff_s * 2**(n-1)``, at most
    ``backoff_max_s``. The defaults give up after about 0.35 s of backoff."""

    attempts: int = 4
    backoff_s: float = 0.05
    backoff_max_s: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("backoff times must not be negative")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1-based)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 1)))


def wire_type(media_type: str) -> str:
    """The ``Content-Type`` to upload ``media_type`` with: itself if the service
    stores it, else ``application/octet-stream``."""
    essence = media_type.split(";", 1)[0].strip().lower()
    printable = media_type.isascii() and media_type.isprintable()
    if printable and (essence.split("/", 1)[0] in _WIRE_TOP_LEVELS or essence in _WIRE_ESSENCES):
        return media_type
    return FALLBACK_TYPE


class ServiceClient:
    """Talks to one artifact service at ``base_url`` (``http://host:port``, ``https://``,
    optionally with a path prefix). Thread-safe; every method blocks.

    ``token`` is sent as ``Authorization: Bearer`` on every request (writes need
    it when the service has one; reads too under ``MEDIAFLOW_LOCK_READS``).
    ``sleep`` is the backoff's sleep (tests pass a recording one).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL of an artifact service: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def url_for(self, digest: str) -> str:
        return f"{self.base_url}/artifacts/{digest}"

    # -- the three requests -----------------------------------------------------------------

    def put(self, digest: str, body: BinaryIO, size: int, media_type: str) -> None:
        """Upload ``size`` bytes from ``body`` (rewound before each attempt) as ``digest``.

        Returns once the service answered 201: it holds the bytes. Raises
        :class:`StoreFull` (507), :class:`RemoteStoreError` (401, 413, 415 ...),
        :class:`StoreUnreachable`.
        """
        headers = {"Content-Type": wire_type(media_type), "Content-Length": str(size)}

        def answer(response: http.client.HTTPResponse) -> None:
            if response.status not in (200, 201):
                raise _refusal("PUT", self.url_for(digest), digest, response)
            _read(response)  # the reference JSON: the caller already has it

        def rewind() -> BinaryIO:
            body.seek(0)
            return body

        self._exchange("PUT", digest, headers, answer, body=rewind)

    def has(self, digest: str) -> bool:
        """``HEAD``: whether the service holds ``digest``. Raises like :meth:`put`."""

        def answer(response: http.client.HTTPResponse) -> bool:
            _read(response)
            if response.status == 200:
                return True
            if response.status == 404:
                return False
            raise _refusal("HEAD", self.url_for(digest), digest, response, already_read=True)

        return self._exchange("HEAD", digest, {}, answer)

    def get(self, digest: str, receive: Callable[[Iterator[memoryview], str | None], T]) -> T:
        """``GET``: hand a 200 answer's body (as views of one reused 1 MiB buffer, each
        valid until the next is taken) and ``Content-Type`` to ``receive``, which must
        take every chunk. A connection lost mid-body is retried from the start, so
        ``receive`` undoes its own effects when the chunks raise; whatever else it
        raises propagates unretried.

        Raises :class:`ArtifactNotFound` (404), :class:`RemoteStoreError`,
        :class:`StoreUnreachable`.
        """

        def answer(response: http.client.HTTPResponse) -> T:
            if response.status != 200:
                raise _refusal("GET", self.url_for(digest), digest, response)
            return receive(_body_chunks(response), response.getheader("Content-Type"))

        return self._exchange("GET", digest, {}, answer)

    # -- one exchange, retried -------------------------------------------------------------

    def _exchange(
        self,
        method: str,
        digest: str,
        headers: dict[str, str],
        answer: Callable[[http.client.HTTPResponse], T],
        *,
        body: Callable[[], BinaryIO] | None = None,
    ) -> T:
        if self.token is not None:
            headers = {**headers, "Authorization": f"Bearer {self.token}"}
        target = f"{self._prefix}/artifacts/{digest}"
        failures = 0
        while True:
            connection = self._take()
            try:
                response = _send(connection, method, target, headers, body)
            except TRANSPORT_ERRORS as exc:
                failure: BaseException = exc
            else:
                try:
                    result = answer(response)
                except _Dropped as exc:
                    failure = exc.__cause__ or exc
                except BaseException:
                    connection.close()
                    raise
                else:
                    self._give_back(connection, response)
                    return result
            connection.close()
            self.close()  # the idle ones are likely as dead (the service restarted)
            failures += 1
            if failures >= self.retry.attempts:
                url = self.url_for(digest)
                raise StoreUnreachable(
                    f"artifact service unreachable: {method} {url} failed {failures} times;"
                    f" last: {_describe(failure)}",
                    url=url,
                ) from failure
            self._sleep(self.retry.delay(failures))

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.timeout_s, blocksize=BLOCK)

    def _give_back(
        self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse
    ) -> None:
        if not response.will_close:
            with self._lock:
                if len(self._idle) < IDLE_CONNECTIONS:
                    self._idle.append(connection)
                    return
        connection.close()

    def close(self) -> None:
        """Close the idle connections. Idempotent; the client stays usable."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _send(
    connection: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: dict[str, str],
    body: Callable[[], BinaryIO] | None,
) -> http.client.HTTPResponse:
    """Send one request and return the answer's head (its body is still to be read)."""
    try:
        connection.request(method, target, body=None if body is None else body(), headers=headers)
    except (BrokenPipeError, ConnectionResetError):
        if body is None:
            raise
        # A service that refuses a body (413 on its Content-Length, 401) answers and
        # closes without reading it: the answer sits in our receive buffer ahead of
        # the reset. Read it; if there is none, the original failure stands.
        try:
            return connection.getresponse()
        except TRANSPORT_ERRORS:
            pass
        raise
    return connection.getresponse()


def _refusal(
    method: str,
    url: str,
    digest: str,
    response: http.client.HTTPResponse,
    *,
    already_read: bool = False,
) -> Exception:
    """The typed error for an answer that is not a success."""
    status = response.status
    if status == 404:
        return ArtifactNotFound(digest, where=f"the artifact service ({url})")
    detail = "" if already_read else _error_text(response)
    said = f"{status} {response.reason}" + (f": {detail}" if detail else "")
    if status == 507:
        return StoreFull(
            errno.ENOSPC, f"artifact service full ({said}); nothing was stored there", url
        )
    advice = {
        401: "; set MEDIAFLOW_TOKEN to the service's token",
        403: "; set MEDIAFLOW_TOKEN to the service's token",
        413: "; the service's MEDIAFLOW_MAX_UPLOAD is lower than this artifact",
    }.get(status, "")
    return RemoteStoreError(
        f"artifact service refused {method} {url}: {said}{advice}", url=url, status=status
    )


def _error_text(response: http.client.HTTPResponse) -> str:
    """The service's ``{"error": ...}`` message, or the start of whatever it sent.

    Best effort: the status is the answer, and a service that refused a body may
    have reset the connection right after sending it.
    """
    try:
        raw = response.read(MAX_ERROR_BODY)
    except TRANSPORT_ERRORS:
        return ""
    try:
        message = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        message = None
    if isinstance(message, str):
        return message
    return raw[:200].decode("utf-8", "replace").strip()


class _Dropped(Exception):
    """The connection failed while an answer's body was read (``__cause__``): retried."""


def _read(response: http.client.HTTPResponse, amount: int | None = None) -> bytes:
    try:
        return response.read(amount)
    except TRANSPORT_ERRORS as exc:
        raise _Dropped from exc


def _body_chunks(response: http.client.HTTPResponse) -> Iterator[memoryview]:
    """The body in views of one reused buffer; a short body raises (``IncompleteRead``)."""
    view = memoryview(bytearray(BLOCK))
    while True:
        try:
            count = response.readinto(view)
        except TRANSPORT_ERRORS as exc:
            raise _Dropped from exc
        if not count:
            return
        yield view[:count]


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
