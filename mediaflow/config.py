"""Where mediaflow keeps its data, and the settings read from the environment.

Every command takes ``--data DIR``; without it ``MEDIAFLOW_DATA`` is used, and
without that a per-user directory (``$XDG_DATA_HOME/mediaflow`` or
``~/.local/share/mediaflow``). ``MEDIAFLOW_STORE`` may point the artifact store
at a service on another machine, the data directory then only caching it
(:class:`StoreSettings`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast
from urllib.parse import urlsplit


class ConfigError(ValueError):
    """A setting has a value mediaflow cannot use."""


def default_data_dir() -> Path:
    explicit = os.environ.get("MEDIAFLOW_DATA")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "mediaflow"


STORE_SETTINGS = (
    "unset, empty or 'local' (the store in the data directory), or the URL of an"
    " artifact service ('http://host:port' or 'https://host[:port]', optionally with a"
    " path prefix)"
)
"""What ``MEDIAFLOW_STORE`` may be, for messages."""


@dataclass(frozen=True)
class StoreSettings:
    """Where artifacts are stored (:func:`mediaflow.store.open_store` reads them).

    ``url``: None for the store in the data directory; else the base URL of an
    artifact service (``mediaflow serve`` on another machine) and the data
    directory only caches it (``MEDIAFLOW_STORE``). ``token``: sent to the
    service as ``Authorization: Bearer`` (``MEDIAFLOW_TOKEN``, the service's own).
    """

    url: str | None = None
    token: str | None = None

    @classmethod
    def from_env(cls) -> StoreSettings:
        """Raises :class:`ConfigError` naming ``MEDIAFLOW_STORE`` for a value it cannot use."""
        return cls(
            url=store_url(os.environ.get("MEDIAFLOW_STORE")),
            token=os.environ.get("MEDIAFLOW_TOKEN") or None,
        )


def env_secret(name: str) -> str | None:
    """The secret in environment variable ``name`` (a flow names it, as a webhook's
    ``secret_env``), or None when unset or empty. Never logged: the caller names the
    variable, not its value."""
    return os.environ.get(name) or None


def store_url(raw: str | None, *, name: str = "MEDIAFLOW_STORE") -> str | None:
    """The service URL a store setting names, normalised (no trailing ``/``), or None
    for the local store. Pure. Raises :class:`ConfigError` naming ``name`` otherwise."""
    setting = (raw or "").strip()
    if setting in ("", "local"):
        return None
    parts = urlsplit(setting)
    try:
        _ = parts.port  # parsing it is the check: a bad port raises ValueError
    except ValueError:
        raise ConfigError(f"{name}={raw!r} has a bad port; expected {STORE_SETTINGS}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name}={raw!r} is not a store: expected {STORE_SETTINGS}")
    if parts.username is not None or parts.query or parts.fragment:
        raise ConfigError(
            f"{name}={raw!r}: give the service's base URL without credentials, query or"
            " fragment (the token goes in MEDIAFLOW_TOKEN)"
        )
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path.rstrip('/')}"


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    """A float setting from the environment, refusing garbage with a clear message."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


SPEECH_PROCESSES_ENV = "MEDIAFLOW_SPEECH_PROCESSES"


def _cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class SpeechSettings:
    """How the speech nodes of one session share the machine's cores.

    ``processes``: the recogniser host processes they share
    (``MEDIAFLOW_SPEECH_PROCESSES``; one per core by default, see
    :mod:`mediaflow.nodes.speech_host`).
    """

    processes: int = field(default_factory=_cores)

    @classmethod
    def from_env(cls) -> SpeechSettings:
        """Raises :class:`ConfigError` (a ``ValueError``) naming the variable for a bad value."""
        return cls(processes=env_int(SPEECH_PROCESSES_ENV, _cores(), minimum=1))


SqliteSync = Literal["NORMAL", "FULL"]


def sqlite_sync() -> SqliteSync:
    """``MEDIAFLOW_SQLITE_SYNC``: the SQLite queue's ``synchronous``, NORMAL (default)
    or FULL (every commit survives power loss, at a cost). Raises
    :class:`~mediaflow.queue.QueueError` naming the variable for anything else."""
    raw = os.environ.get("MEDIAFLOW_SQLITE_SYNC", "").strip().upper() or "NORMAL"
    if raw not in ("NORMAL", "FULL"):
        # Imported here, not above: the queue package imports this module.
        from mediaflow.queue.items import QueueError

        raise QueueError(f"MEDIAFLOW_SQLITE_SYNC={raw!r} must be NORMAL or FULL")
    return cast(SqliteSync, raw)


@dataclass(frozen=True)
class EngineSettings:
    """What a flow session runs with; each field mirrors an environment variable.

    The defaults are the built-in ones: a session constructed without settings
    does not look at the environment. :meth:`from_env` reads the variables, once,
    at the process boundary (the command line, a benchmark's entry point).
    """

    max_deliveries: int = 5  # MEDIAFLOW_MAX_DELIVERIES
    max_attempts: int = 3  # MEDIAFLOW_MAX_ATTEMPTS: runs of one item in one process
    retry_base_s: float = 0.2  # MEDIAFLOW_RETRY_BASE_S: first backoff, doubled per attempt
    retry_max_s: float = 10.0  # MEDIAFLOW_RETRY_MAX_S
    lease_ms: int = 15_000  # MEDIAFLOW_LEASE_MS: a claim not touched for this long is reclaimed
    node_buffer: int = 256  # MEDIAFLOW_NODE_BUFFER: items held in memory per node
    backlog_interval_s: float = 1.0  # MEDIAFLOW_BACKLOG_INTERVAL_S
    degraded_samples: int = 5  # consecutive growing backlog samples before engine_degraded
    degraded_min_items: int = 1000  # MEDIAFLOW_DEGRADED_MIN_ITEMS
    trace_path: Path | None = None  # MEDIAFLOW_TRACE: a file each run appends its ticks to
    sqlite_sync: SqliteSync = "NORMAL"  # MEDIAFLOW_SQLITE_SYNC: the SQLite queue's durability
    store: StoreSettings = StoreSettings()  # MEDIAFLOW_STORE, MEDIAFLOW_TOKEN: where artifacts go
    # MEDIAFLOW_SPEECH_PROCESSES: the recogniser host processes (one per core by default)
    speech: SpeechSettings = field(default_factory=SpeechSettings)

    @property
    def turn_items(self) -> int:
        """How many values a source emits, or items a node runs, before it yields the
        event loop: half a line. A group commit then carries about a turn, and a
        reader in this process can take two turns' worth per turn, so it catches up
        after a hiccup instead of leaving every later item to be claimed from disk."""
        return max(1, self.node_buffer // 2)

    @classmethod
    def from_env(cls) -> EngineSettings:
        """Raises :class:`ConfigError` naming the variable it cannot use, and
        :class:`~mediaflow.queue.QueueError` for ``MEDIAFLOW_SQLITE_SYNC``."""
        d = cls()
        return cls(
            max_deliveries=env_int("MEDIAFLOW_MAX_DELIVERIES", d.max_deliveries, minimum=1),
            max_attempts=env_int("MEDIAFLOW_MAX_ATTEMPTS", d.max_attempts, minimum=1),
            retry_base_s=env_float("MEDIAFLOW_RETRY_BASE_S", d.retry_base_s),
            retry_max_s=env_float("MEDIAFLOW_RETRY_MAX_S", d.retry_max_s),
            lease_ms=env_int("MEDIAFLOW_LEASE_MS", d.lease_ms, minimum=100),
            node_buffer=env_int("MEDIAFLOW_NODE_BUFFER", d.node_buffer, minimum=1),
            backlog_interval_s=env_float(
                "MEDIAFLOW_BACKLOG_INTERVAL_S", d.backlog_interval_s, minimum=0.01
            ),
            degraded_samples=env_int("MEDIAFLOW_DEGRADED_SAMPLES", d.degraded_samples, minimum=2),
            degraded_min_items=env_int(
                "MEDIAFLOW_DEGRADED_MIN_ITEMS", d.degraded_min_items, minimum=0
            ),
            trace_path=_env_path("MEDIAFLOW_TRACE"),
            sqlite_sync=sqlite_sync(),
            store=StoreSettings.from_env(),
            speech=SpeechSettings.from_env(),
        )


def _env_path(name: str) -> Path | None:
    """The path in ``name`` (``~`` expanded), or None when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    return Path(raw).expanduser() if raw else None
