"""How /artifacts/{digest} bodies travel, against a real server: many transfers on a
small file cache, sendfile resumed as the socket drains, small bodies inline, TLS
on chunks, and connections (pipelined requests, ``Connection``, a reader that
leaves mid-body) on the lean way that writes its own status line and headers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mediaflow.server import ServerSettings
from tests.artifact_requests import DATA, SIZE, get, put
from tests.http_support import (
    random_bytes,
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
    wait_until,
)

# Every test here runs on asyncio's loop and on uvloop (the loop the commands use).
pytestmark = pytest.mark.both_loops


async def test_many_concurrent_ranges_and_a_small_cache(tmp_path: Path, transfer_path: str) -> None:
    """Eviction never closes a file under a transfer: 2 open files, 6 artifacts, 60 requests."""
    async with serve(tmp_path, settings_for(transfer_path, open_files=2)) as served:
        blobs = [random_bytes(50_000 + i, seed=i) for i in range(6)]
        digests = [await put(served, blob) for blob in blobs]

        async def one(i: int) -> None:
            k = i % len(blobs)
            start = (i * 997) % 40_000
            status, _, body = await get(
                served, digests[k], {"Range": f"bytes={start}-{start + 9999}"}
            )
            assert status == 206 and body == blobs[k][start : start + 10_000]

        await asyncio.gather(*(one(i) for i in range(60)))


async def test_large_artifact_continues_after_the_socket_fills(tmp_path: Path) -> None:
    """A body larger than the socket takes at once continues by sendfile each time the
    socket has room again."""
    big = random_bytes(8 << 20, seed=5)
    async with serve(tmp_path, settings_for("sendfile")) as served:
        digest = await put(served, big)
        status, _, body = await get(served, digest)
        assert status == 200 and body == big
        stats = served.state.transfers
        assert stats.direct > 0
        assert stats.resumed > 0 and stats.direct + stats.resumed == len(big)


async def test_small_bodies_go_inline_by_default(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        digest = await put(served, DATA[:4096])
        status, _, body = await get(served, digest)
        assert (status, body) == (200, DATA[:4096])
        status, _, body = await get(served, "sha256:" + digest[7:], {"Range": "bytes=0-99"})
        assert (status, body) == (206, DATA[:100])
        assert served.state.transfers.inline == 4096 + 100


async def test_tls_transport_falls_back_to_chunks(tmp_path: Path) -> None:
    """A transport that cannot sendfile (TLS) gets the chunked path, not corrupted bytes."""
    import shutil
    import ssl
    import subprocess

    import aiohttp
    from aiohttp import web

    from mediaflow.server import AppState, create_app

    if shutil.which("openssl") is None:
        pytest.skip("openssl (Debian package) is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    client_ctx.check_hostname = False
    state = AppState.for_serve(tmp_path / "data", settings=settings_for("sendfile"))
    runner = web.AppRunner(create_app(state))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        digest = (await state.store.save(DATA, "video/mp4")).digest
        async with (
            aiohttp.ClientSession() as client,
            client.get(
                f"https://127.0.0.1:{port}/artifacts/{digest}",
                headers={"Range": "bytes=100-200099"},
                ssl=client_ctx,
            ) as response,
        ):
            assert response.status == 206
            assert await response.read() == DATA[100:200100]
        assert state.transfers.chunked == 200_000
        assert state.transfers.direct == 0
    finally:
        await runner.cleanup()
        await state.close()


# -- connections: the lean way writes its own status line and headers ----------------


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    """One response off a kept-alive connection: status line, headers, exactly its body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"{name} sent twice"
            headers[name.lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
    return lines[0].encode(), headers, body


@pytest.mark.parametrize("inline_max", [0, 1 << 20])
async def test_pipelined_requests_on_one_connection(tmp_path: Path, inline_max: int) -> None:
    """Several requests in one write are answered in order, each body exactly its bytes,
    with the headers the aiohttp way sends (one of each, Date and Server included)."""
    settings = settings_for("sendfile", inline_max=inline_max)
    async with serve(tmp_path, settings) as served:
        digest = await put(served, DATA)
        spans = [(0, 65535), (100_000, 100_009), (SIZE - 7, SIZE - 1)]
        request = b"".join(
            f"GET /artifacts/{digest} HTTP/1.1\r\nHost: x\r\nRange: bytes={a}-{b}\r\n\r\n".encode()
            for a, b in spans
        )
        request += f"GET /artifacts/{digest} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        try:
            writer.write(request)
            for a, b in spans:
                status, headers, body = await read_response(reader)
                assert status == b"HTTP/1.1 206 Partial Content"
                assert headers["content-range"] == f"bytes {a}-{b}/{SIZE}"
                assert body == DATA[a : b + 1]
                assert headers["etag"] == f'"{digest}"'
                assert "date" in headers and "server" in headers
                assert headers["x-content-type-options"] == "nosniff"
                assert "connection" not in headers
            status, headers, body = await read_response(reader)
            assert status == b"HTTP/1.1 200 OK" and body == DATA
        finally:
            writer.close()
        assert served.statuses("/artifacts/") == [206, 206, 206, 200]
        stats = served.state.transfers
        lean = stats.inline if inline_max else stats.direct + stats.resumed
        assert lean + stats.chunked == 65536 + 10 + 7 + SIZE


@pytest.mark.parametrize(
    ("request_head", "connection", "stays_open"),
    [
        ("HTTP/1.1\r\nConnection: close", "close", False),
        ("HTTP/1.0\r\nConnection: keep-alive", "keep-alive", True),
        ("HTTP/1.0", None, False),
    ],
)
async def test_connection_header_follows_the_request(
    tmp_path: Path, request_head: str, connection: str | None, stays_open: bool
) -> None:
    async with serve(tmp_path, settings_for("sendfile")) as served:
        digest = await put(served, DATA)
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        try:
            target = f"/artifacts/{digest}"
            line = f"GET {target} {request_head}\r\nHost: x\r\nRange: bytes=0-65535\r\n\r\n"
            writer.write(line.encode())
            _, headers, body = await read_response(reader)
            assert body == DATA[:65536]
            assert headers.get("connection") == connection
            if stays_open:
                writer.write(line.encode())
                _, _, body = await read_response(reader)
                assert body == DATA[:65536]
            else:
                assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        finally:
            writer.close()


def test_a_header_value_cannot_break_the_head() -> None:
    from mediaflow.server.header_block import HeaderBlock

    with pytest.raises(ValueError, match="line break"):
        HeaderBlock((("X-Test", "a\r\nSet-Cookie: b=c"),))


async def test_a_reader_that_leaves_mid_body_frees_the_transfer(
    tmp_path: Path, transfer_path: str
) -> None:
    """The transfer of a body larger than the socket buffer ends when its reader hangs
    up: the file's reference is given back and the server answers the next request."""
    big = random_bytes(16 << 20, seed=6)
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, big)
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(f"GET /artifacts/{digest} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await reader.readexactly(100_000)
        writer.transport.abort()  # a reset, as a closed browser tab sends

        def released() -> bool:
            entry = served.state.cache.acquire_hit(digest)
            assert entry is not None
            served.state.cache.release(entry)
            return entry.refs == 0

        await wait_until(released)
        status, _, body = await get(served, digest, {"Range": "bytes=0-9"})
        assert (status, body) == (206, big[:10])
