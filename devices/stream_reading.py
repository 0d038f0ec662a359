"""Demuxing a source on its producer thread: retries, losses and clean messages.

Shared by the decoding input (:mod:`devices.video_input`) and the packet input
(:mod:`devices.packet_input`). A live source's failure becomes
:class:`~devices.errors.DeviceLost` so the caller backs off and reopens; a camera
whose stream simply ends is lost too (cameras never end). FFmpeg's errors quote the
URL they failed on, credentials included: the error a caller sees (and logs, and
publishes) is rewritten without them (:func:`clean_error`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import av
import av.error

from devices.bridge import FrameBridge
from devices.errors import CredentialsRefused, DeviceLost, DeviceNotFound
from devices.redact import public_url, scrub, secrets_of
from devices.video_spec import ENDLESS_KINDS, SourceKind

RETRY_SLEEP_S = 0.01  # after EAGAIN from a non-blocking device read
# A read that failed after this share of the read timeout without a packet timed out.
TIMED_OUT = 0.9


class Demuxer(Protocol):
    """What is demuxed: PyAV's ``InputContainer``, or a test's wrapper around one."""

    def demux(self, *args: Any) -> Iterator[av.Packet[Any]]: ...


class StreamError(Exception):
    """A source's error, retold without the credentials its message quoted."""


def clean_error(exc: BaseException, url: str) -> BaseException:
    """``exc`` itself when its text cannot hold a secret of ``url``, else a
    :class:`StreamError` with the same story and no password (its type's name first)."""
    if not secrets_of(url) and "@" not in str(exc):
        return exc
    text = scrub(str(exc), url)
    if text == str(exc):
        return exc
    return StreamError(f"{type(exc).__name__}: {text}")


def unreachable(spec: str, exc: BaseException) -> DeviceNotFound:
    """The error for a stream URL that could not be opened: :class:`CredentialsRefused`
    when the server refused the login (401, 403), else :class:`DeviceNotFound`; both
    name the URL without its password and give FFmpeg's reason without it either."""
    reason = exc.strerror if isinstance(exc, av.FFmpegError) and exc.strerror else str(exc)
    reason = scrub(reason, spec)
    name = public_url(spec)
    if isinstance(exc, av.error.HTTPUnauthorizedError | av.error.HTTPForbiddenError):
        return CredentialsRefused(name, reason)
    return DeviceNotFound(name, [], reason=reason)


def demux_or_lost(
    container: Demuxer,
    streams: Sequence[Any],
    bridge: FrameBridge[Any],
    *,
    live: bool,
    kind: SourceKind,
    spec: str,
    url: str,
    read_timeout_s: float | None = None,
) -> Iterator[av.Packet[Any]]:
    """``container``'s packets of ``streams`` until the end. Runs on the producer thread.

    EAGAIN (a device with no frame ready) waits briefly, or returns once ``bridge`` is
    closed. A live source's error raises :class:`DeviceLost` naming ``spec`` (the
    source without its password), with its cause cleaned of ``url``'s credentials; a
    file's error is raised as it is. A camera (``ENDLESS_KINDS``) that ends is lost. A
    stream that sent nothing for ``read_timeout_s`` is lost with a ``TimeoutError``
    saying so (FFmpeg's own outcome then is an interrupt, a bare I/O error, or the end
    of the stream).
    """
    demux = container.demux(list(streams))
    last = time.monotonic()
    while True:
        try:
            packet = next(demux)
        except StopIteration:
            break
        except av.error.BlockingIOError:
            # EAGAIN: no frame ready yet; the generator is spent, start a new one.
            if bridge.wait_closed(RETRY_SLEEP_S):
                return
            demux = container.demux(list(streams))
            continue
        except Exception as exc:
            if not live:
                raise
            cause = clean_error(exc, url)
            waited = time.monotonic() - last
            if read_timeout_s is not None and waited >= read_timeout_s * TIMED_OUT:
                cause = TimeoutError(f"nothing received for {read_timeout_s:g} s")
            raise DeviceLost(spec, cause) from cause
        last = time.monotonic()
        yield packet
    waited = time.monotonic() - last
    if live and read_timeout_s is not None and waited >= read_timeout_s * TIMED_OUT:
        # FFmpeg's RTSP reader may end the stream when the wait is cut short.
        cause = TimeoutError(f"nothing received for {read_timeout_s:g} s")
        raise DeviceLost(spec, cause) from cause
    if kind in ENDLESS_KINDS:
        raise DeviceLost(spec, EOFError("the camera stopped delivering frames"))
