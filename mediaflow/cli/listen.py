"""``--host`` and ``--port``, shared by ``serve``, ``run`` and ``demo``, and the
lines a command prints once its server listens."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mediaflow.server import ServerSettings

log = logging.getLogger("mediaflow.cli")


def _default_host() -> str:
    return os.environ.get("MEDIAFLOW_HOST") or "127.0.0.1"


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return int(text)


def add_server_options(parser: argparse.ArgumentParser, *, port_default: int | None) -> None:
    """``--host`` and ``--port``. ``port_default=None`` makes serving opt-in (``run``)."""
    parser.add_argument(
        "--host",
        default=_default_host(),
        help="address to listen on (default: $MEDIAFLOW_HOST or 127.0.0.1, loopback only)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=port_default,
        metavar="N",
        help="TCP port (0 picks a free one)"
        + (" and serve the wall" if port_default is None else f" (default: {port_default})"),
    )


def _warn_if_exposed(host: str, settings: ServerSettings) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and settings.token is None:
        log.warning(
            "listening on %s without MEDIAFLOW_TOKEN: anyone who can reach it can upload", host
        )


def _announce(url: str, settings: ServerSettings) -> None:
    # One line on stderr that scripts (and the benchmark) wait for.
    print(f"mediaflow: serving on {url}", file=sys.stderr, flush=True)
    if settings.lock_reads:
        print(
            f"mediaflow: reads are locked; open {url}/?token=<MEDIAFLOW_TOKEN> once in a browser",
            file=sys.stderr,
            flush=True,
        )


def announce(host: str, url: str, settings: ServerSettings | None) -> None:
    """Say where a server beside a flow listens, and warn if it is exposed unprotected."""
    from mediaflow.server import ServerSettings

    settings = settings or ServerSettings()
    _warn_if_exposed(host, settings)
    _announce(url, settings)


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host
