"""Wall links against a real server: the token, the locked settings, making a link, and
putting a value where a flow's wall shows it (shared by the link and live tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediaflow.media import MediaRef, encode_value
from mediaflow.server import ServerSettings
from mediaflow.server.links import LINKS
from tests.http_support import Served

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
LOCKED = ServerSettings(token=TOKEN, lock_reads=True)
T0 = 1_700_000_000.0


class Clock:
    """The links' clock, moved by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def use_clock(served: Served, clock: Clock) -> None:
    served.runner.app[LINKS].clock = clock


def as_link(link: str) -> dict[str, str]:
    return {"Authorization": f"Link {link}"}


async def call(served: Served, method: str, path: str, **kwargs: Any) -> tuple[int, bytes]:
    async with served.client.request(method, served.url + path, **kwargs) as response:
        return response.status, await response.read()


async def create(served: Served, flow: str = "desk", body: Any = None) -> dict[str, Any]:
    async with served.client.post(
        f"{served.url}/api/flows/{flow}/links", json=body, headers=BEARER
    ) as response:
        assert response.status == 201, await response.text()
        assert response.headers["Cache-Control"] == "no-store"
        answer: dict[str, Any] = await response.json()
        return answer


async def save(served: Served, data: bytes, meta: Mapping[str, Any] | None = None) -> MediaRef:
    return await served.state.store.save(data, "image/jpeg", meta=meta)


async def hold(served: Served, flow: str, ref: MediaRef, *, event: bool = True) -> None:
    """Make ``ref`` the latest value of ``flow``'s ``cam.image``, as a runner would:
    recorded on the queue and (``event``) announced on the bus."""
    queue = served.state.queue
    assert queue is not None
    await queue.put_latest({(flow, "cam", "image"): encode_value(ref)})
    if event:
        data = {"flow": flow, "node": "cam", "port": "image", "value": ref.to_json()}
        served.state.bus.publish("latest", data, replay=False)
