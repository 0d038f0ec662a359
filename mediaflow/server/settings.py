"""The HTTP service's settings, each mirroring an environment variable.

Read once at startup (:meth:`ServerSettings.from_env`); a value mediaflow
cannot use raises :class:`~mediaflow.config.ConfigError` naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mediaflow.config import ConfigError, env_float, env_int
from mediaflow.timeline.cut import DEFAULT_MAX_SPAN_S
from mediaflow.timeline.export import MAX_SPAN_ENV

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_UPLOAD = 4 << 30  # 4 GiB
DAY_S = 24 * 3600.0


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1 or 0)")


@dataclass(frozen=True)
class ServerSettings:
    """Tunables of the HTTP service.

    ``token``: with it, every mutating request needs ``Authorization: Bearer``
    (``MEDIAFLOW_TOKEN``); ``lock_reads`` puts reads behind it too
    (``MEDIAFLOW_LOCK_READS=1``; a browser then opens ``/?token=...`` once).
    ``cors_origins``: origins allowed to read across sites (``MEDIAFLOW_CORS_ORIGINS``,
    comma-separated; ``*`` for any); empty means CORS is off.
    ``max_upload``: largest artifact a PUT may store, bytes (``MEDIAFLOW_MAX_UPLOAD``).
    ``sendfile``: zero-copy transfers (``MEDIAFLOW_SENDFILE=0`` forces chunked reads).
    ``link_default_s`` / ``link_max_s``: lifetime of a wall link when its maker does
    not say, and the longest allowed (``MEDIAFLOW_LINK_DEFAULT_S``,
    ``MEDIAFLOW_LINK_MAX_S``); ``link_history``: digests remembered per port for
    links (``MEDIAFLOW_LINK_HISTORY``); see :mod:`mediaflow.server.links`.
    """

    token: str | None = None
    lock_reads: bool = False
    cors_origins: tuple[str, ...] = ()
    max_upload: int = DEFAULT_MAX_UPLOAD
    sendfile: bool = True
    heartbeat_s: float = 15.0  # MEDIAFLOW_SSE_HEARTBEAT_S: SSE comment lines keep proxies open
    open_files: int = 256  # MEDIAFLOW_OPEN_FILES: artifacts kept open between requests
    inline_max: int = 16 * 1024  # MEDIAFLOW_INLINE_MAX: bodies up to this size go in one write
    link_default_s: float = DAY_S
    link_max_s: float = 30 * DAY_S
    link_history: int = 1024
    export_max_s: float = DEFAULT_MAX_SPAN_S  # MEDIAFLOW_EXPORT_MAX_S: the longest export
    whep_max_viewers: int = 10

    def __post_init__(self) -> None:
        if self.lock_reads and not self.token:
            raise ConfigError("MEDIAFLOW_LOCK_READS=1 needs MEDIAFLOW_TOKEN to be set")
        if self.token is not None and not self.token.strip():
            raise ConfigError("MEDIAFLOW_TOKEN is set but empty")
        if self.max_upload < 0:
            raise ConfigError("MEDIAFLOW_MAX_UPLOAD must not be negative")
        if not 1 <= self.link_default_s <= self.link_max_s:
            raise ConfigError(
                "MEDIAFLOW_LINK_DEFAULT_S must be at least 1 and at most MEDIAFLOW_LINK_MAX_S"
            )
        if self.link_history < 1:
            raise ConfigError("MEDIAFLOW_LINK_HISTORY must be at least 1")

    @classmethod
    def from_env(cls) -> ServerSettings:
        d = cls()
        origins = tuple(
            o.strip().rstrip("/")
            for o in os.environ.get("MEDIAFLOW_CORS_ORIGINS", "").split(",")
            if o.strip()
        )
        link_max_s = env_float("MEDIAFLOW_LINK_MAX_S", d.link_max_s, minimum=1)
        return cls(
            token=os.environ.get("MEDIAFLOW_TOKEN") or None,
            lock_reads=_env_flag("MEDIAFLOW_LOCK_READS", d.lock_reads),
            cors_origins=origins,
            max_upload=env_int("MEDIAFLOW_MAX_UPLOAD", d.max_upload),
            sendfile=_env_flag("MEDIAFLOW_SENDFILE", d.sendfile),
            heartbeat_s=env_float("MEDIAFLOW_SSE_HEARTBEAT_S", d.heartbeat_s, minimum=0.01),
            open_files=env_int("MEDIAFLOW_OPEN_FILES", d.open_files, minimum=1),
            inline_max=env_int("MEDIAFLOW_INLINE_MAX", d.inline_max),
            # A lower MEDIAFLOW_LINK_MAX_S alone lowers the default with it.
            link_default_s=env_float(
                "MEDIAFLOW_LINK_DEFAULT_S", min(d.link_default_s, link_max_s), minimum=1
            ),
            link_max_s=link_max_s,
            link_history=env_int("MEDIAFLOW_LINK_HISTORY", d.link_history, minimum=1),
            export_max_s=env_float(MAX_SPAN_ENV, d.export_max_s, minimum=1.0),
            whep_max_viewers=env_int("MEDIAFLOW_WHEP_MAX_VIEWERS", d.whep_max_viewers),
        )
