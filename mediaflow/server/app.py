"""The aiohttp application: routes, middlewares, the response log, and starting it.

:func:`create_app` wires the modules together; :func:`start_server` binds it
(127.0.0.1 unless told otherwise) and returns the ``AppRunner`` whose
``cleanup()`` stops it. Every response is logged and counted from
``on_response_prepare``, the one place that sees the status that is really
sent (a middleware sees 200 for a file response that becomes 206 or 304).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from mediaflow.server import (
    api,
    artifacts,
    auth,
    control,
    cors,
    exports,
    links,
    live,
    metrics,
    openapi,
    recordings,
    sse,
    uploads,
    wall,
    whep,
    whip,
)
from mediaflow.server.settings import DEFAULT_HOST, DEFAULT_PORT
from mediaflow.server.state import STATE, Answered, AppState
from mediaflow.server.transfer import PrepareHook

access_log = logging.getLogger("mediaflow.http.access")
# Credentials in a query (the token link, a wall link) never reach the access log.
SECRET_PARAMS = ("token", "link")

KNOWN_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"})
SHUTDOWN_TIMEOUT_S = 5.0
# After answering before the body was read (413, 401 on an upload), aiohttp keeps
# reading and discarding the body for this long so the client sees the answer
# instead of a reset; its default (10 s) holds a refused 100-continue client too long.
LINGERING_S = 2.0


def _logged_target(request: web.BaseRequest) -> str:
    if request.query_string and not request.query.keys().isdisjoint(SECRET_PARAMS):
        return request.path
    return request.path_qs


def _response_recorder(
    state: AppState, app_metrics: metrics.Metrics
) -> Callable[[web.BaseRequest, web.StreamResponse], None]:
    """Log and count each response as it is prepared (it runs for every one)."""
    answered = state.answered
    settings = state.settings
    count_response = app_metrics.count_response

    def record(request: web.BaseRequest, response: web.StreamResponse) -> None:
        status = response.status
        method = request.method
        answered.append(Answered(method, request.raw_path, status, request.headers.get("Range")))
        resource = request.match_info.route.resource if isinstance(request, web.Request) else None
        count_response(
            method if method in KNOWN_METHODS else "other",
            resource.canonical if resource is not None else "unmatched",
            status,
        )
        if settings.cors_origins:
            cors.add_headers(request, response, settings)
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(
                '%s "%s %s" %d %s',
                request.remote,
                method,
                _logged_target(request),
                status,
                response.content_length if response.content_length is not None else "-",
            )

    return record


def create_app(state: AppState) -> web.Application:
    """The application for ``state``. The caller closes ``state`` after the app stops."""
    settings = state.settings
    middlewares: list[Middleware] = []
    if settings.cors_origins:
        middlewares.append(cors.middleware(settings))
    if settings.token is not None:
        middlewares.append(auth.middleware(settings))
    app = web.Application(middlewares=middlewares)
    app[STATE] = state
    app_metrics = metrics.Metrics(state)
    app[metrics.METRICS] = app_metrics
    stop_listening = state.bus.listen(app_metrics.on_event)
    state.session_watchers.append(app_metrics.watch)

    async def stop_metrics(_: web.Application) -> None:
        stop_listening()
        state.session_watchers.remove(app_metrics.watch)

    app.on_cleanup.append(stop_metrics)
    for session in state.sessions.values():
        app_metrics.watch(session)
    app.on_response_prepare.append(PrepareHook(_response_recorder(state, app_metrics)))
    artifacts.add_routes(app)
    uploads.add_routes(app)
    api.add_routes(app)
    control.add_routes(app)
    sse.add_routes(app)
    metrics.add_routes(app)
    wall.add_routes(app)
    links.add_routes(app)
    openapi.add_routes(app)
    live.add_routes(app)
    recordings.add_routes(app)
    exports.add_routes(app)
    whip.add_routes(app)
    whep.add_routes(app)
    return app


async def start_server(
    state: AppState, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> web.AppRunner:
    """Serve ``state`` on ``host:port`` in the running loop; returns once listening.

    ``port=0`` picks a free port (see :func:`bound_port`). Stop with
    ``await runner.cleanup()`` (closes event streams, waits up to 5 s for
    requests in flight), then ``await state.close()``. Raises ``OSError`` if
    the address is taken.
    """
    runner = web.AppRunner(
        create_app(state),
        access_log=None,  # logged from on_response_prepare instead
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        lingering_time=LINGERING_S,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The TCP port the runner listens on (useful after ``port=0``)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the server is not listening on a TCP port")
