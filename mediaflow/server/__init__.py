"""mediaflow's HTTP service: artifacts, the API, events, metrics and the wall.

Decisions and effects are kept apart, one module per seam:

- ``ranges``: pure RFC 9110 decisions for GET/HEAD (preconditions, Range, If-Range);
- ``filecache`` / ``transfer``: open artifacts between requests; sendfile or chunked bodies;
- ``header_block``: an artifact's fixed header lines, serialised once for the lean way;
- ``artifacts`` / ``uploads``: ``GET``/``HEAD``/``PUT /artifacts``;
- ``api`` / ``views``: flows, devices and health as JSON; ``sse``: the event stream;
- ``metrics``: Prometheus text; ``auth`` / ``cors``: who may read and write;
- ``wall``: the browser page (``static/``); ``app``: wiring and :func:`start_server`;
- ``state``: :class:`AppState`, what the handlers serve from.

Serving next to a running flow::

    state = AppState.for_session(session)          # after session.start()
    runner = await start_server(state, "127.0.0.1", 8765)
    ...
    await runner.cleanup()
    await state.close()
"""

from mediaflow.server.app import bound_port, create_app, start_server
from mediaflow.server.settings import DEFAULT_HOST, DEFAULT_PORT, ServerSettings
from mediaflow.server.state import AppState

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "AppState",
    "ServerSettings",
    "bound_port",
    "create_app",
    "start_server",
]
