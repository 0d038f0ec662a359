"""Forwarding settings, and how the process boundary reads them from the environment
(:meth:`ForwardSettings.from_env`), each refusing a value it cannot use in one line."""

from __future__ import annotations

import os
from dataclasses import dataclass

from mediaflow.config import ConfigError, StoreSettings, store_url
from mediaflow.gc.settings import env_bytes
from mediaflow.queue import REDIS_SCHEMES

QUEUE_ENV = "MEDIAFLOW_FORWARD_QUEUE"
STORE_ENV = "MEDIAFLOW_FORWARD_STORE"
MAX_BPS_ENV = "MEDIAFLOW_FORWARD_MAX_BPS"


@dataclass(frozen=True)
class ForwardSettings:
    """Where an edge box forwards what it captured (:mod:`mediaflow.forward`).

    ``queue_url``: the shared work queue (``MEDIAFLOW_FORWARD_QUEUE``,
    ``redis://…``); ``store``: the artifact service and its token
    (``MEDIAFLOW_FORWARD_STORE``, ``MEDIAFLOW_TOKEN``); ``max_bps``: at most
    this many bytes of artifacts a second while catching up
    (``MEDIAFLOW_FORWARD_MAX_BPS``; None, the default: as fast as the link goes).
    """

    queue_url: str
    store: StoreSettings
    max_bps: int | None = None

    @classmethod
    def from_env(cls) -> ForwardSettings | None:
        """None when ``MEDIAFLOW_FORWARD_QUEUE`` is unset (this box does not forward).

        Raises :class:`ConfigError` naming the variable: a forward queue without a
        forward store or the other way round, a store that is not a service URL,
        a bad rate, or ``MEDIAFLOW_QUEUE`` / ``MEDIAFLOW_STORE`` also naming a
        remote one (an edge box journals and stores locally: that is what lets
        it ride out the link).
        """
        queue = os.environ.get(QUEUE_ENV, "").strip()
        store = os.environ.get(STORE_ENV, "").strip()
        if not queue and not store:
            return None
        if not queue or not store:
            given, missing = (QUEUE_ENV, STORE_ENV) if queue else (STORE_ENV, QUEUE_ENV)
            raise ConfigError(f"{given} is set but {missing} is not: forwarding needs both")
        url = store_url(store, name=STORE_ENV)
        if url is None:
            raise ConfigError(f"{STORE_ENV}={store!r} must name an artifact service (http://…)")
        if os.environ.get("MEDIAFLOW_QUEUE", "").strip().startswith(REDIS_SCHEMES):
            raise _must_stay_local("MEDIAFLOW_QUEUE")
        if store_url(os.environ.get("MEDIAFLOW_STORE")) is not None:
            raise _must_stay_local("MEDIAFLOW_STORE")
        return cls(
            queue_url=queue,
            store=StoreSettings(url=url, token=os.environ.get("MEDIAFLOW_TOKEN") or None),
            max_bps=env_bytes(MAX_BPS_ENV),
        )


def _must_stay_local(name: str) -> ConfigError:
    return ConfigError(
        f"{name} must stay local on a box that forwards ({QUEUE_ENV} is set): it"
        " journals and stores here, and forwards when the link answers"
    )
