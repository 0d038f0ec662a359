"""An RTSP server for tests: GStreamer's GstRtspServer (Debian's, through PyGObject).

Run by ``tests/rtsp_server.py`` with Debian's ``/usr/bin/python3`` (the project's venv
has no ``gi``), so it imports only ``gi`` and the standard library, never the project::

    /usr/bin/python3 tests/gst_rtsp_serve.py '{"port": 0, "mounts": [...]}'

The one argument is JSON: ``port`` (0: the kernel picks a free one) and ``mounts``, each
``{"path": "/cam", "launch": "( ... rtph264pay name=pay0 ... )", "user": str | null,
"password": str | null}``. Every mount's factory is shared (one pipeline for all clients
of a mount, like a camera). A mount with a user and a password answers 401 with a
Basic challenge until a request carries those credentials; the others are open to
anyone. Clients choose RTP over the RTSP connection (TCP interleaved) or over UDP.

It listens on 127.0.0.1 only and, once it does, prints ``ready PORT`` (the port it is
bound to) on stdout. SIGTERM or SIGINT stops it, and so does the end of its stdin when
that is a pipe (the parent closed it or died): exit status 0. A bad argument (or a
launch line GStreamer cannot build) exits with 2, a port it cannot bind with 1, the
reason on stderr, where GStreamer's errors go too (unless ``GST_DEBUG`` says otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

HOST = "127.0.0.1"
STDIN = 0
STDIN_CLOSED = GLib.IOCondition.IN | GLib.IOCondition.HUP | GLib.IOCondition.ERR
ANONYMOUS_ROLE = "anonymous"  # the role of a request without (right) credentials
MEDIA_ACCESS = GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS  # "media.factory.access"
MEDIA_CONSTRUCT = GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT  # "media.factory.construct"


class ConfigError(ValueError):
    """The JSON argument is not a valid configuration (exit status 2)."""


class ListenError(OSError):
    """The server could not listen on its port, e.g. it is taken (exit status 1)."""


def parse_config(text: str) -> tuple[int, list[dict[str, Any]]]:
    """``(port, mounts)`` from the JSON argument; raises :class:`ConfigError`."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError("the configuration must be a JSON object")
    port, mounts = config.get("port", 0), config.get("mounts")
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"port must be an int in 0..65535, not {port!r}")
    if not isinstance(mounts, list) or not mounts:
        raise ConfigError("mounts must be a non-empty list")
    for mount in mounts:
        if not isinstance(mount, dict):
            raise ConfigError(f"a mount must be a JSON object, not {mount!r}")
        path, launch = mount.get("path"), mount.get("launch")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigError(f"a mount's path must start with '/': {path!r}")
        if not isinstance(launch, str) or not launch.strip():
            raise ConfigError(f"mount {path} has no launch line")
        user, password = mount.get("user"), mount.get("password")
        if not all(isinstance(value, str | None) for value in (user, password)):
            raise ConfigError(f"mount {path}: user and password must be strings or null")
        if (user is None) != (password is None):
            raise ConfigError(f"mount {path} needs both a user and a password, or neither")
    return port, mounts


def role_of(mount: dict[str, Any], roles: dict[tuple[str, str], str]) -> str | None:
    """The role the mount's credentials grant (one per distinct user and password,
    kept in ``roles``), or None for an open mount."""
    user, password = mount.get("user"), mount.get("password")
    if user is None or password is None:
        return None
    return roles.setdefault((user, password), f"user{len(roles)}")


def factory_permissions(role: str | None, user_roles: list[str]) -> GstRtspServer.RTSPPermissions:
    """A factory's permissions once the server has an RTSPAuth (then every factory
    needs some): every role may access it; an open mount (``role`` None) lets every
    role construct its media too, a protected one only ``role``.

    Why access for all: GstRtspServer checks access first and answers a refusal with
    404, which no client follows up with credentials; a refused construct gets 401
    with a Basic challenge, the answer a camera gives and the one FFmpeg retries
    with the URL's credentials."""
    everyone = [ANONYMOUS_ROLE, *user_roles]
    permissions = GstRtspServer.RTSPPermissions()
    for allowed in everyone:
        permissions.add_permission_for_role(allowed, MEDIA_ACCESS, True)
    for allowed in everyone if role is None else [role]:
        permissions.add_permission_for_role(allowed, MEDIA_CONSTRUCT, True)
    return permissions


def build_server(port: int, mounts: list[dict[str, Any]]) -> GstRtspServer.RTSPServer:
    """A server for ``mounts`` on ``HOST:port``, not yet attached to a main loop."""
    server = GstRtspServer.RTSPServer()
    server.set_address(HOST)
    server.set_service(str(port))
    roles: dict[tuple[str, str], str] = {}
    mount_roles = [role_of(mount, roles) for mount in mounts]
    points = server.get_mount_points()
    for mount, role in zip(mounts, mount_roles, strict=True):
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(mount["launch"])
        factory.set_shared(True)
        if roles:
            factory.set_permissions(factory_permissions(role, list(roles.values())))
        points.add_factory(mount["path"], factory)
    if roles:
        server.set_auth(make_auth(roles))
    return server


def make_auth(roles: dict[tuple[str, str], str]) -> GstRtspServer.RTSPAuth:
    """Basic authentication: each (user, password) gets its token and role; a request
    without matching credentials gets the anonymous role's token."""
    auth = GstRtspServer.RTSPAuth()
    for (user, password), role in roles.items():
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, role)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    anonymous = GstRtspServer.RTSPToken()
    anonymous.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ANONYMOUS_ROLE)
    auth.set_default_token(anonymous)
    return auth


def check_launch_lines(mounts: list[dict[str, Any]]) -> None:
    """Build each mount's pipeline once, so that a missing element or a typo stops
    the server at start (with GStreamer's message) rather than failing every client
    with 503. Raises :class:`ConfigError`."""
    for mount in mounts:
        try:
            Gst.parse_launch(mount["launch"])
        except GLib.Error as error:
            raise ConfigError(f"mount {mount['path']}: {error.message}") from None


def serve(port: int, mounts: list[dict[str, Any]]) -> None:
    """Serve until SIGTERM or SIGINT, after printing ``ready PORT``. Raises
    :class:`ListenError` if the port cannot be bound (GStreamer logs why on stderr)."""
    server = build_server(port, mounts)
    loop = GLib.MainLoop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, signum, quit_loop, loop)
    if stat.S_ISFIFO(os.fstat(STDIN).st_mode):
        # The parent holds the pipe's other end: its close (or death, even by SIGKILL,
        # which runs no atexit handler) ends the server too, so none is orphaned.
        GLib.unix_fd_add_full(GLib.PRIORITY_HIGH, STDIN, STDIN_CLOSED, stdin_closed, loop)
    source_id = server.attach(None)  # binds the socket (SO_REUSEADDR); 0 if it cannot
    if source_id == 0:
        raise ListenError(f"cannot listen on {HOST}:{port}")
    print(f"ready {server.get_bound_port()}", flush=True)
    loop.run()
    GLib.source_remove(source_id)


def quit_loop(loop: GLib.MainLoop) -> bool:
    """The signal handler: stop the main loop (and keep the handler installed)."""
    loop.quit()
    return GLib.SOURCE_CONTINUE


def stdin_closed(fd: int, condition: GLib.IOCondition, loop: GLib.MainLoop) -> bool:
    """The stdin pipe's handler: stop the main loop once the pipe says EOF (or the
    parent wrote something, which it never does)."""
    loop.quit()
    return GLib.SOURCE_REMOVE


def main(argv: list[str]) -> int:
    """Parse the argument, check it, serve; the process's exit status."""
    if len(argv) != 2:
        print(f"usage: {argv[0]} '<json config>'", file=sys.stderr)
        return 2
    Gst.init(None)
    if not os.environ.get("GST_DEBUG"):
        # GStreamer's own errors on stderr, e.g. why attach() could not bind the port
        Gst.debug_set_default_threshold(Gst.DebugLevel.ERROR)
        Gst.debug_set_colored(False)
    try:
        port, mounts = parse_config(argv[1])
        check_launch_lines(mounts)
        serve(port, mounts)
    except ConfigError as error:
        print(f"gst_rtsp_serve: {error}", file=sys.stderr)
        return 2
    except ListenError as error:
        print(f"gst_rtsp_serve: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
