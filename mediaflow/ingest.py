"""WHIP ingest: what the server asks of a node that takes media from a WebRTC publisher.

The server (``POST /whip/{flow}/{node}``, :mod:`mediaflow.server.whip`) finds the node
in the session running in its process and, when it is a :class:`WhipIngest` (the
``webrtc`` connector), hands it the publisher's SDP offer. The node answers, owns the
peer connection and emits what it receives; the server only speaks HTTP. A refusal
is an :class:`IngestRefused` carrying the status the server answers. mediaflow never
imports the connector: the check is structural.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class IngestRefused(Exception):
    """An offer (or a hang-up) the node will not take; ``status`` is the HTTP answer:
    400 for an offer it cannot answer, 503 when the node has all the publishers it
    takes (``retry_after_s`` says when to try again)."""

    def __init__(self, status: int, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class IngestAnswer:
    """The SDP answer to a publisher's offer, and the id of its session (its
    ``Location`` is ``/whip/{flow}/{node}/{session}``)."""

    sdp: str
    session: str


@runtime_checkable
class WhipIngest(Protocol):
    """A node that takes WHIP publishers. Both methods run on the server's event loop,
    which is the session's."""

    async def whip_offer(self, sdp: str) -> IngestAnswer:
        """Answer ``sdp`` (a WebRTC offer); the publisher's media then flows into the
        node. Raises :class:`IngestRefused` (never anything else for a bad offer)."""
        ...

    async def whip_end(self, session: str) -> bool:
        """End the publisher ``session``; False when there is none by that id."""
        ...
