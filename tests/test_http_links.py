"""Wall links against a real server: what a link for one flow reads, what it is refused,
and why; the window of artifacts it opens (a clock injected into the app)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest

from mediaflow import Context, FlowBuilder, FlowSession, MediaRef, Node
from mediaflow.config import EngineSettings
from mediaflow.server import AppState, ServerSettings
from mediaflow.server.links import LINK_COOKIE, LINKS
from mediaflow.server.linktoken import LinkClaims, link_key, make_link
from mediaflow.server.sse import SUBSCRIPTIONS
from tests.http_support import HOST, digest_of, serve, wait_until
from tests.links_support import (
    BEARER,
    LOCKED,
    T0,
    TOKEN,
    Clock,
    as_link,
    call,
    create,
    hold,
    save,
    use_clock,
)


async def test_a_link_reads_its_flow_and_nothing_else(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        segment = await save(served, b"segment")  # named only in the frame's meta
        frame = await save(served, b"desk frame", meta={"segments": [segment.digest]})
        other = await save(served, b"yard frame")
        loose = await save(served, b"no flow holds this")
        await hold(served, "desk", frame)
        await hold(served, "yard", other)

        made = await create(served)
        link = made["link"]
        assert made["flow"] == "desk" and made["reads_locked"] is True
        assert made["path"] == f"/?link={link}"
        assert made["url"] == f"http://{HOST}:{served.port}/?link={link}"
        assert made["expires_in_s"] == 86400
        assert made["expires_at"] - made["issued_at"] == pytest.approx(86400)
        reader = as_link(link)

        status, body = await call(served, "GET", "/api/flows/desk", headers=reader)
        assert status == 200
        (cam,) = json.loads(body)["nodes"]
        assert cam["outputs"]["image"]["latest"]["digest"] == frame.digest
        status, body = await call(served, "GET", "/api/flows", headers=reader)
        assert status == 200 and [f["name"] for f in json.loads(body)["flows"]] == ["desk"]
        for path in (f"/artifacts/{frame.digest}", f"/artifacts/{segment.digest}"):
            status, _ = await call(served, "HEAD", path, headers=reader)
            assert status == 200, path
        status, body = await call(served, "GET", f"/artifacts/{frame.digest}", headers=reader)
        assert (status, body) == (200, b"desk frame")
        for path in ("/", "/static/wall.js", "/healthz"):
            assert (await call(served, "GET", path, headers=reader))[0] == 200, path

        refused = [
            f"/artifacts/{other.digest}",
            f"/artifacts/{loose.digest}",
            "/artifacts/sha256:nonsense",
            "/api/flows/yard",
            "/api/flows/desk/dead-letters",
            "/api/devices",
            "/metrics",
            "/no/such/page",
        ]
        for path in refused:
            status, body = await call(served, "GET", path, headers=reader)
            assert status == 403, path
            answer = json.loads(body)
            assert answer["flow"] == "desk"
            assert "this wall link opens flow 'desk' only" in answer["error"]
        # The token still reads everything.
        assert (await call(served, "GET", f"/artifacts/{other.digest}", headers=BEARER))[0] == 200


async def test_a_browser_opens_the_link_once_and_keeps_a_cookie(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        frame = await save(served, b"desk frame")
        await hold(served, "desk", frame)
        link = (await create(served, body={"expires_in_s": 3600}))["link"]
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
            async with browser.get(f"{served.url}/?link={link}", allow_redirects=False) as response:
                assert response.status == 303 and response.headers["Location"] == "/"
                cookie = response.headers["Set-Cookie"]
                assert cookie.startswith(f"{LINK_COOKIE}={link};")
                assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
                assert "Max-Age=3600" in cookie
            async with browser.get(served.url + "/") as response:
                assert response.status == 200 and "mediaflow wall" in await response.text()
            async with browser.get(f"{served.url}/artifacts/{frame.digest}") as response:
                assert response.status == 200 and await response.read() == b"desk frame"
            async with browser.get(served.url + "/api/flows/yard") as response:
                assert response.status == 403
            # Links never write, whatever the route.
            for method, path in [
                ("PUT", "/artifacts"),
                ("POST", "/api/flows/desk/links"),
                ("POST", "/api/flows/desk/pause"),
            ]:
                async with browser.request(method, served.url + path, data=b"x") as response:
                    assert response.status == 403, path
                    assert "only reads" in (await response.json())["error"]
        assert (await call(served, "PUT", "/artifacts", data=b"x", headers=as_link(link)))[0] == 403
        assert not served.state.store.exists(digest_of(b"x"))


async def test_refused_links_say_why(tmp_path: Path) -> None:
    clock = Clock()
    async with serve(tmp_path, LOCKED) as served:
        use_clock(served, clock)
        await hold(served, "desk", await save(served, b"desk frame"))
        link = (await create(served, body={"expires_in_s": 60}))["link"]
        prefix, claims, signature = link.split(".")
        flipped = chr(ord(claims[5]) ^ 1)  # one bit of the claims
        other_key = link_key("another token")
        now_ms = int(T0 * 1000)
        cases = {
            "bit-flipped claims": (f"{prefix}.{claims[:5]}{flipped}{claims[6:]}.{signature}",
                                   "bad_signature"),
            "flipped signature": (f"{prefix}.{claims}.{'B' if signature[0] == 'A' else 'A'}"
                                  f"{signature[1:]}", "bad_signature"),
            "another token": (make_link(other_key, LinkClaims("desk", now_ms, now_ms + 60_000)),
                              "bad_signature"),
            "not a link": ("hello", "malformed"),
            "truncated": (link[:-3], "malformed"),
            "bad base64": (f"{prefix}.{claims}!.{signature}", "malformed"),
            "huge": ("mfl1." + "A" * 5000 + ".x", "malformed"),
        }  # fmt: skip
        for name, (bad, reason) in cases.items():
            async with served.client.get(
                served.url + "/api/flows/desk", headers=as_link(bad)
            ) as response:
                assert response.status == 401, name
                answer = await response.json()
                assert answer["reason"] == reason, name
                assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
        assert (await call(served, "GET", f"/?link={cases['truncated'][0]}"))[0] == 401

        assert (await call(served, "GET", "/api/flows/desk", headers=as_link(link)))[0] == 200
        clock.now = T0 + 60  # the link's last millisecond has passed
        async with served.client.get(served.url + "/?link=" + link) as response:
            assert response.status == 401
            answer = await response.json()
            assert answer["reason"] == "expired"
            assert "expired at 2023-11-14T22:14:20Z" in answer["error"]


async def test_links_survive_a_restart_and_die_with_the_token(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        link = (await create(served))["link"]
    async with serve(tmp_path, LOCKED) as served:  # no storage: the signature is enough
        assert (await call(served, "GET", "/api/flows/desk", headers=as_link(link)))[0] == 200
    changed = ServerSettings(token="a new token", lock_reads=True)
    async with serve(tmp_path, changed) as served:
        status, body = await call(served, "GET", "/api/flows/desk", headers=as_link(link))
        assert status == 401 and json.loads(body)["reason"] == "bad_signature"
        assert "another MEDIAFLOW_TOKEN" in json.loads(body)["error"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"not json", 400, "not JSON"),
        (b"[1]", 400, "JSON object"),
        (b'{"expires_in": 60}', 400, "unknown field(s) 'expires_in'"),
        (b'{"expires_in_s": "60"}', 400, "number of seconds"),
        (b'{"expires_in_s": true}', 400, "number of seconds"),
        (b'{"expires_in_s": NaN}', 400, "number of seconds"),
        (b'{"expires_in_s": 0}', 400, "from 1 to 2592000 seconds (30 days)"),
        (b'{"expires_in_s": 2592001}', 400, "from 1 to 2592000"),
        (b"{" + b" " * 5000 + b"}", 413, "larger than 4096 bytes"),
    ],
)
async def test_making_a_link_refuses_bad_bodies(
    tmp_path: Path, body: bytes, status: int, message: str
) -> None:
    async with serve(tmp_path, LOCKED) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        async with served.client.post(
            served.url + "/api/flows/desk/links", data=body, headers=BEARER
        ) as response:
            assert response.status == status
            assert message in (await response.json())["error"]


async def test_making_a_link_needs_the_token_and_a_known_flow(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        assert (await call(served, "POST", "/api/flows/desk/links"))[0] == 401
        status, body = await call(served, "POST", "/api/flows/nope/links", headers=BEARER)
        assert status == 404 and json.loads(body)["error"] == "no flow 'nope'"
        status, _ = await call(served, "POST", "/api/flows/bad%20name/links", headers=BEARER)
        assert status == 400
        made = await create(served, body={"expires_in_s": 2.5})
        assert made["expires_at"] - made["issued_at"] == pytest.approx(2.5)


async def test_links_without_locked_reads_or_without_a_token(tmp_path: Path) -> None:
    async with serve(tmp_path / "open", ServerSettings(token=TOKEN)) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        made = await create(served)
        assert made["reads_locked"] is False  # made, but reads are open to anyone anyway
        assert (await call(served, "GET", "/api/flows/desk", headers=as_link("junk")))[0] == 200
    async with serve(tmp_path / "none", ServerSettings()) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        status, body = await call(served, "POST", "/api/flows/desk/links")
        assert status == 409 and "MEDIAFLOW_TOKEN" in json.loads(body)["error"]


async def test_the_event_stream_shows_the_links_flow_only(tmp_path: Path) -> None:
    async with serve(tmp_path, LOCKED) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        link = (await create(served))["link"]
        bus = served.state.bus
        subscriptions = served.runner.app[SUBSCRIPTIONS]
        async with served.client.get(served.url + "/api/events", headers=as_link(link)) as response:
            assert response.status == 200
            await wait_until(lambda: len(subscriptions) == 1)
            bus.publish("transcript", {"flow": "yard", "text": "not for you"})
            bus.publish("transcript", {"flow": "desk", "text": "one"})
            bus.publish("queue_unavailable", {"error": "no flow named"})
            bus.publish("device_lost", {"flow": "yard", "node": "cam", "error": "gone"})
            await hold(served, "yard", await save(served, b"yard frame"))
            await hold(served, "desk", await save(served, b"desk frame 2"))
            bus.publish("transcript", {"flow": "desk", "text": "two"})
            events = await read_events(response, 3)
        assert [(e["event"], e["data"]["flow"]) for e in events] == [
            ("transcript", "desk"),
            ("latest", "desk"),
            ("transcript", "desk"),
        ]


async def test_the_window_opens_what_the_flow_held_since_the_link_was_made(
    tmp_path: Path,
) -> None:
    clock = Clock()
    async with serve(tmp_path, LOCKED) as served:
        use_clock(served, clock)
        before, at_issue, during, now, shown, never = [
            await save(served, f"frame {i}".encode()) for i in range(6)
        ]
        await hold(served, "desk", before)  # seen at T0
        clock.now += 10
        await hold(served, "desk", at_issue)  # replaced `before` before the link
        clock.now += 10
        link = (await create(served))["link"]  # T0 + 20
        clock.now += 10
        await hold(served, "desk", during)  # seen in the window, then replaced
        clock.now += 10
        await hold(served, "desk", now, event=False)  # on the queue only (another process)
        clock.now += 10
        reader = as_link(link)

        async def status(ref: MediaRef) -> int:
            return (await call(served, "GET", f"/artifacts/{ref.digest}", headers=reader))[0]

        assert await status(before) == 403  # held only before the link was made
        assert await status(at_issue) == 200  # held as it was made
        assert await status(during) == 200
        assert await status(now) == 200  # read fresh on a miss
        assert await status(never) == 403
        # What a flow view showed the link stays readable after it is replaced unseen.
        await hold(served, "desk", shown, event=False)
        assert (await call(served, "GET", "/api/flows/desk", headers=reader))[0] == 200
        await hold(served, "desk", never, event=False)
        assert await status(shown) == 200
        assert await status(never) == 200  # now held: read fresh
        assert await status(before) == 403


# -- with a real running flow ----------------------------------------------------------


class Stepper(Node):
    """Emits one tiny JPEG per item put on :attr:`frames`; ends at None."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image"}
    frames: ClassVar[asyncio.Queue[bytes | None]]

    async def run(self, ctx: Context) -> None:
        while (frame := await Stepper.frames.get()) is not None:
            await ctx.emit("image", await ctx.save_artifact(frame, "image/jpeg"))


async def test_a_running_flows_replaced_frames_stay_readable_in_the_window(
    tmp_path: Path,
) -> None:
    Stepper.frames = asyncio.Queue()
    fast = EngineSettings(retry_base_s=0.01, retry_max_s=0.05, backlog_interval_s=0.1)
    session = FlowSession(FlowBuilder("desk").add("cam", Stepper).build(), tmp_path, settings=fast)
    await session.start()
    try:
        state = AppState.for_session(session, settings=LOCKED)
        async with serve(tmp_path, state=state) as served:
            ledger = served.runner.app[LINKS].ledger

            async def show(frame: bytes) -> str:
                """Emit ``frame`` and wait until its ``latest`` event was noted."""
                digest = (await served.state.store.save(frame, "image/jpeg")).digest
                await Stepper.frames.put(frame)
                await wait_until(lambda: ledger.held_since("desk", digest, 0))
                return digest

            first = await show(b"frame 0")
            second = await show(b"frame 1")
            await asyncio.sleep(0.002)  # the link is made strictly after `first` was replaced
            link = (await create(served))["link"]
            third = await show(b"frame 2")
            fourth = await show(b"frame 3")
            reader = as_link(link)
            statuses = [
                (await call(served, "GET", f"/artifacts/{d}", headers=reader))[0]
                for d in (first, second, third, fourth)
            ]
            assert statuses == [403, 200, 200, 200]
            status, body = await call(served, "GET", "/api/flows/desk", headers=reader)
            assert status == 200
            (cam,) = json.loads(body)["nodes"]
            assert cam["outputs"]["image"]["latest"]["digest"] == fourth
    finally:
        Stepper.frames.put_nowait(None)
        await session.stop()


async def test_the_access_log_keeps_links_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve(tmp_path, LOCKED) as served:
        await hold(served, "desk", await save(served, b"desk frame"))
        link = (await create(served))["link"]
        with caplog.at_level(logging.INFO, logger="mediaflow.http.access"):
            await call(served, "GET", f"/?link={link}", allow_redirects=False)
            await call(served, "GET", f"/?a=1&link={link}", allow_redirects=False)
        assert '"GET /" 303' in caplog.text
        assert link not in caplog.text


async def read_events(
    response: aiohttp.ClientResponse, count: int, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """``count`` SSE messages (comments skipped) as ``{"event", "data", "id"}``."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}

    async def pump() -> None:
        nonlocal current
        while len(events) < count:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line == "":
                if "event" in current:
                    events.append(current)
                current = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                current[field] = json.loads(value) if field == "data" else value

    await asyncio.wait_for(pump(), timeout)
    return events
