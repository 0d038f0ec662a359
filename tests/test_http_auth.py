"""Bearer tokens, locked reads with the wall's cookie link, and CORS, against a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from mediaflow.config import ConfigError
from mediaflow.server import ServerSettings
from mediaflow.server.auth import COOKIE
from tests.http_support import HOST, Served, digest_of, serve

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def status_of(served: Served, method: str, path: str, **kwargs: object) -> int:
    async with served.client.request(method, served.url + path, **kwargs) as response:  # type: ignore[arg-type]
        await response.read()
        return response.status


async def test_writes_need_the_token(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings(token=TOKEN)) as served:
        async with served.client.put(served.url + "/artifacts", data=b"x") as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == 'Bearer realm="mediaflow"'
        for wrong in ("Bearer nope", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"):
            async with served.client.put(
                served.url + "/artifacts", data=b"x", headers={"Authorization": wrong}
            ) as response:
                assert response.status == 401, wrong
                assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
        assert not served.state.store.exists(digest_of(b"x"))
        assert await status_of(served, "PUT", "/artifacts", data=b"x", headers=BEARER) == 201
        lower = {"Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive
        assert await status_of(served, "PUT", "/artifacts", data=b"y", headers=lower) == 201
        # Reads stay open unless locked.
        assert await status_of(served, "GET", f"/artifacts/{digest_of(b'x')}") == 200
        assert await status_of(served, "GET", "/api/flows") == 200


async def test_expect_continue_without_the_token_gets_401_not_100(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings(token=TOKEN)) as served:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(
            b"PUT /artifacts HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert head.startswith(b"HTTP/1.1 401")


async def test_locked_reads_and_the_token_link(tmp_path: Path) -> None:
    settings = ServerSettings(token=TOKEN, lock_reads=True)
    async with serve(tmp_path, settings) as served:
        digest = (await served.state.store.save(b"frame", "image/jpeg")).digest
        for path in ("/", "/api/flows", f"/artifacts/{digest}", "/metrics", "/api/events"):
            assert await status_of(served, "GET", path) == 401, path
        assert await status_of(served, "GET", "/healthz") == 200  # liveness stays open
        assert await status_of(served, "GET", f"/artifacts/{digest}", headers=BEARER) == 200
        assert await status_of(served, "GET", "/?token=wrong", allow_redirects=False) == 401

        # unsafe=True: the jar keeps cookies from an IP address (127.0.0.1), as browsers do.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
            async with browser.get(
                f"{served.url}/?token={TOKEN}", allow_redirects=False
            ) as response:
                assert response.status == 303
                assert response.headers["Location"] == "/"
                cookie = response.headers["Set-Cookie"]
                assert cookie.startswith(f"{COOKIE}=")
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert TOKEN not in cookie  # a keyed hash, not the token
            async with browser.get(served.url + "/") as response:
                assert response.status == 200
                assert "mediaflow wall" in await response.text()
            async with browser.get(f"{served.url}/artifacts/{digest}") as response:
                assert response.status == 200 and await response.read() == b"frame"
                assert response.headers["Cache-Control"].startswith("private")
            # The cookie opens reads only.
            async with browser.put(served.url + "/artifacts", data=b"nope") as response:
                assert response.status == 401


def test_locking_reads_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="MEDIAFLOW_TOKEN"):
        ServerSettings(lock_reads=True)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAFLOW_TOKEN", TOKEN)
    monkeypatch.setenv("MEDIAFLOW_LOCK_READS", "1")
    monkeypatch.setenv("MEDIAFLOW_CORS_ORIGINS", "http://a.test, http://b.test/")
    monkeypatch.setenv("MEDIAFLOW_MAX_UPLOAD", "1234")
    monkeypatch.setenv("MEDIAFLOW_SENDFILE", "0")
    settings = ServerSettings.from_env()
    assert settings.token == TOKEN and settings.lock_reads
    assert settings.cors_origins == ("http://a.test", "http://b.test")
    assert settings.max_upload == 1234 and not settings.sendfile
    monkeypatch.setenv("MEDIAFLOW_SENDFILE", "maybe")
    with pytest.raises(ConfigError, match="MEDIAFLOW_SENDFILE"):
        ServerSettings.from_env()


async def test_cors_is_off_by_default(tmp_path: Path) -> None:
    async with (
        serve(tmp_path) as served,
        served.client.get(
            served.url + "/api/flows", headers={"Origin": "http://evil.test"}
        ) as response,
    ):
        assert "Access-Control-Allow-Origin" not in response.headers


async def test_cors_for_listed_origins(tmp_path: Path) -> None:
    settings = ServerSettings(token=TOKEN, cors_origins=("http://app.test",))
    async with serve(tmp_path, settings) as served:
        async with served.client.get(
            served.url + "/api/flows", headers={"Origin": "http://app.test"}
        ) as response:
            assert response.headers["Access-Control-Allow-Origin"] == "http://app.test"
            assert "Origin" in response.headers["Vary"]
        async with served.client.get(
            served.url + "/api/flows", headers={"Origin": "http://other.test"}
        ) as response:
            assert "Access-Control-Allow-Origin" not in response.headers
        preflight = {
            "Origin": "http://app.test",
            "Access-Control-Request-Method": "PUT",
            "Access-Control-Request-Headers": "authorization, content-type",
        }
        async with served.client.options(served.url + "/artifacts", headers=preflight) as response:
            assert response.status == 204
            assert "PUT" in response.headers["Access-Control-Allow-Methods"]
            assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
            assert response.headers["Access-Control-Allow-Origin"] == "http://app.test"
            assert "Access-Control-Allow-Credentials" not in response.headers
        other = {**preflight, "Origin": "http://other.test"}
        async with served.client.options(served.url + "/artifacts", headers=other) as response:
            assert response.status == 403
        # A 401 is readable cross-origin too, so the page can tell the user why.
        async with served.client.put(
            served.url + "/artifacts", data=b"x", headers={"Origin": "http://app.test"}
        ) as response:
            assert response.status == 401
            assert response.headers["Access-Control-Allow-Origin"] == "http://app.test"
