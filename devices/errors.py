"""Typed exceptions raised at the device boundary.

The connector layer keys its behaviour off these types:

- :class:`EndOfStream` is a normal outcome: a file or finite virtual source is done.
- :class:`DeviceLost` means a live device stopped answering (unplugged, server gone);
  the caller backs off (see :func:`devices.backoff.backoff_delays`) and reopens.
- :class:`DeviceNotFound` means nothing matches the spec now. Right after a
  :class:`DeviceLost` (the camera is still unplugged, the server still down) the caller
  keeps backing off and retrying; for a spec that never opened it is a configuration
  error. :class:`UnsupportedMode` is always a configuration error. Both messages list
  what is available. :class:`CredentialsRefused` is the :class:`DeviceNotFound` of a
  stream that refused the URL's user and password: fatal at start, retried after a
  loss (a camera that reboots may refuse logins for a moment).
- :class:`PortAudioMissing` means sound capture is impossible on this machine.
"""

from __future__ import annotations

from collections.abc import Sequence


class DeviceError(Exception):
    """Base class of every error raised by :mod:`devices`."""


class EndOfStream(DeviceError):
    """A finite source (file, finite virtual device) has delivered everything it had.

    Distinct from :class:`DeviceLost`: nothing is wrong and nothing should be retried.
    """


class DeviceNotFound(DeviceError):
    """No device matches a spec; ``available`` lists what does exist."""

    def __init__(self, spec: str, available: Sequence[str], *, reason: str = "") -> None:
        self.spec = spec
        self.available = list(available)
        listing = ", ".join(self.available) if self.available else "none"
        detail = f" ({reason})" if reason else ""
        super().__init__(f"no device matches {spec!r}{detail}; available: {listing}")


class AmbiguousDevice(DeviceNotFound):
    """A name matches more than one device; ``available`` lists the matches."""

    def __init__(self, spec: str, matches: Sequence[str]) -> None:
        super().__init__(spec, matches, reason="ambiguous, be more specific")


class CredentialsRefused(DeviceNotFound):
    """A stream refused the user and password its URL gives (or asked for some).

    ``spec`` is the URL without its password.
    """

    def __init__(self, spec: str, reason: str) -> None:
        super().__init__(spec, [], reason=reason)
        self.args = (
            f"{spec} refused the credentials ({reason}): check the user and password in the URL",
        )


class UnsupportedMode(DeviceError):
    """A device exists but does not offer the requested size, rate or pixel format."""

    def __init__(self, spec: str, requested: str, available: Sequence[str]) -> None:
        self.spec = spec
        self.requested = requested
        self.available = list(available)
        listing = "; ".join(self.available) if self.available else "none reported"
        super().__init__(f"{spec}: {requested} is not offered; available: {listing}")


class DeviceLost(DeviceError):
    """A live device stopped delivering (unplugged, driver error, network source gone).

    ``cause`` is the underlying exception (also chained as ``__cause__``). Reopening after
    a delay may succeed.
    """

    def __init__(self, spec: str, cause: BaseException) -> None:
        self.spec = spec
        self.cause = cause
        super().__init__(f"device {spec!r} lost: {cause!r}")
        self.__cause__ = cause


class PortAudioMissing(DeviceError):
    """The PortAudio shared library (or the ``sounddevice`` module) is not installed."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "PortAudio library not found: install libportaudio2 (Debian/Ubuntu) "
            "or portaudio (Homebrew)"
        )
        super().__init__(f"{message} [{detail}]" if detail else message)


class BridgeClosed(DeviceError):
    """The consumer closed the bridge; the producer should stop."""


class BridgeOverflow(DeviceError):
    """A bridge with policy ``"fail"`` was full when the producer offered an item."""
