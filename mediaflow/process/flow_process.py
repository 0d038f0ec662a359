"""The composition root of a flow's process: :class:`FlowProcess`.

``mediaflow run``, ``mediaflow worker`` and ``mediaflow demo`` are a
:class:`FlowProcess` started, waited on and stopped; a Python program (a test,
an application that embeds mediaflow) gets the same process the same way::

    process = FlowProcess(load_flow(path), data_dir, port=0)
    await process.start()
    print(process.url)
    reason = await process.wait(until_idle=True)
    outcome = await process.stop(reason)

Settings come in typed (``EngineSettings``, ``GcSettings``, ``ServerSettings``),
the built-in defaults for those not given; reading them from the environment is
the caller's job, at its boundary (``mediaflow run`` calls each ``from_env``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from mediaflow.config import ConfigError, EngineSettings
from mediaflow.engine.events import EventBus
from mediaflow.engine.session import FlowSession, RunOutcome, StopReason
from mediaflow.flows import FlowSpec
from mediaflow.forward import Forwarding, ForwardSettings, start_forwarding
from mediaflow.gc import GcSettings, PeriodicSweep, start_periodic
from mediaflow.process.reload import serve_reloads
from mediaflow.queue import QueueError

if TYPE_CHECKING:
    from aiohttp import web

    from mediaflow.server import AppState, ServerSettings


class PartFailed(Exception):
    """A part beside the session could not start: :attr:`part` is ``"sweep"``
    (its queue would not open) or ``"server"`` (a bad server setting, the address
    taken); ``__cause__`` is the error itself."""

    def __init__(self, part: str, cause: BaseException) -> None:
        super().__init__(f"{part}: {cause}")
        self.part = part
        self.cause = cause


class FlowProcess:
    """A flow's session and what runs beside it in one process: the periodic
    sweep (not for a worker), the server (with a ``port``; 0 picks a free one)
    and the reload watcher (with a ``flow_file``: SIGHUP, and changes with
    ``watch``).

    Contract:

    - :meth:`start` once, on the running loop. It raises what
      :meth:`FlowSession.start` raises (``FlowAlreadyRunning``, ``QueueError``,
      ``OSError``, ``ConfigError``, a node's setup error), and
      :class:`PartFailed` if the sweep's queue cannot be opened (``QueueError``)
      or the server cannot listen (``ConfigError``, ``OSError``). Whatever it
      started before failing is stopped again (the session with reason
      ``error``), so a failed start leaves nothing running.
    - :meth:`wait` returns why the run ended on its own (see
      :meth:`FlowSession.wait`); cancelling it cancels only the wait.
    - :meth:`stop` once after a successful start, also when :meth:`wait` was
      cancelled: the reload watcher, then the server, then the sweep, then the
      session stop, in that order. It returns the session's outcome and raises
      ``QueueError`` if the last commit did not land (the next start resumes).
    """

    def __init__(
        self,
        spec: FlowSpec,
        data_dir: Path,
        *,
        queue_url: str | None = None,
        settings: EngineSettings | None = None,
        gc_settings: GcSettings | None = None,
        server_settings: ServerSettings | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        flow_file: Path | None = None,
        watch: bool = False,
        worker: bool = False,
        forward: ForwardSettings | None = None,
        bus: EventBus | None = None,
    ) -> None:
        self.bus = bus or EventBus()
        self.session = FlowSession(
            spec,
            data_dir,
            queue_url=queue_url,
            settings=settings,
            bus=self.bus,
            worker=worker,
            edge=forward is not None,
        )
        self.data_dir = data_dir
        self.host = host
        self.url: str | None = None
        """The server's address once started with a port, else None."""
        self._queue_url = queue_url
        # Without GC settings the sweep still judges a run's owner by the session's lease.
        self._gc_settings = gc_settings or GcSettings(lease_ms=self.session.settings.lease_ms)
        self._server_settings = server_settings
        self._port = port
        self._flow_file = flow_file
        self._watch = watch
        self._worker = worker
        self._sweeping: PeriodicSweep | None = None
        self._served: tuple[AppState, web.AppRunner] | None = None
        self._reloads: asyncio.Task[None] | None = None
        self._forward = forward
        self.forwarding: Forwarding | None = None
        """The forwarder of an edge box (with ``forward``), once started."""

    async def start(self) -> None:
        """Start the session, then the sweep, the server and the reload watcher."""
        await self.session.start()
        try:
            if self._forward is not None:
                self.forwarding = start_forwarding(self.session, self._forward)
            if not self._worker:  # garbage collection is the run's job, not a worker's
                try:
                    self._sweeping = start_periodic(
                        self.data_dir,
                        self._queue_url,
                        self.bus,
                        self._gc_settings,
                        sqlite_sync=self.session.settings.sqlite_sync,
                    )
                except QueueError as exc:
                    raise PartFailed("sweep", exc) from exc
                if self._sweeping is not None and self.forwarding is not None:
                    # Over the cap with the link away, the oldest waiting items give way.
                    self._sweeping.sweeper.give_way = self.forwarding.forwarder.give_way
            if self._port is not None:
                try:
                    await self._serve(self._port)
                except (ConfigError, OSError) as exc:
                    raise PartFailed("server", exc) from exc
        except BaseException:
            await self._stop_beside()
            await self.session.stop("error")
            raise
        if self._flow_file is not None:
            self._reloads = asyncio.create_task(
                serve_reloads(self.session, self._flow_file, watch=self._watch)
            )

    async def _serve(self, port: int) -> None:
        from mediaflow.server import AppState, ServerSettings, bound_port, start_server

        settings = self._server_settings or ServerSettings()
        state = AppState.for_session(self.session, settings=settings, gc_settings=self._gc_settings)
        try:
            runner = await start_server(state, self.host, port)
        except BaseException:
            await state.close()
            raise
        self._served = (state, runner)
        if self.forwarding is not None:
            forwarder = self.forwarding.forwarder
            state.forwarding[self.session.spec.name] = lambda: forwarder.status
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{bound_port(runner)}"

    async def wait(self, *, for_s: float | None = None, until_idle: bool = False) -> StopReason:
        """Wait until the run ends on its own: ``time`` after ``for_s``, ``idle``
        once drained with ``until_idle`` (on an edge box, once forwarded too:
        the forwarded work is the journal's until then); with neither, until
        cancelled."""
        return await self.session.wait(for_s=for_s, until_idle=until_idle)

    async def stop(self, reason: StopReason = "stopped") -> RunOutcome:
        """Stop everything beside the session, then the session; its outcome."""
        await self._stop_beside()
        return await self.session.stop(reason)

    async def _stop_beside(self) -> None:
        if self.forwarding is not None:
            forwarding, self.forwarding = self.forwarding, None
            await forwarding.stop()
        if self._reloads is not None:
            self._reloads.cancel()
            await asyncio.gather(self._reloads, return_exceptions=True)
            self._reloads = None
        if self._served is not None:
            state, runner = self._served
            self._served = None
            try:
                await runner.cleanup()
            finally:
                await state.close()
        if self._sweeping is not None:
            sweeping, self._sweeping = self._sweeping, None
            await sweeping.stop()
