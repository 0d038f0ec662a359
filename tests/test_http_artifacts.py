"""GET/HEAD /artifacts/{digest} against a real server, over both transfer paths
(zero-copy sendfile and chunked reads): ranges, preconditions, types, errors."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from email.utils import formatdate
from pathlib import Path

import pytest
from multidict import CIMultiDict

from mediaflow.server import ServerSettings
from mediaflow.store import ArtifactStore
from tests.http_support import (
    Served,
    random_bytes,
    raw_request,
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
    wait_until,
)

# Every test here runs on asyncio's loop and on uvloop (the loop the commands use).
pytestmark = pytest.mark.both_loops

SIZE = 300_000  # several chunks on the fallback path, several sends on sendfile
DATA = random_bytes(SIZE, seed=1)


async def put(served: Served, data: bytes, media_type: str = "video/mp4") -> str:
    ref = await served.state.store.save(data, media_type)
    return ref.digest


async def get(
    served: Served, digest: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, CIMultiDict[str], bytes]:
    async with served.client.request(
        method, f"{served.url}/artifacts/{digest}", headers=headers or {}
    ) as response:
        return response.status, CIMultiDict(response.headers), await response.read()


def used(served: Served, path: str) -> None:
    """The bytes went the way the test's transfer path says."""
    stats = served.state.transfers
    assert stats.inline == 0
    if path == "sendfile":
        assert stats.direct + stats.resumed > 0 and stats.chunked == 0
    else:
        assert stats.chunked > 0 and stats.direct == 0 and stats.resumed == 0


async def test_whole_artifact_with_its_headers(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        status, headers, body = await get(served, digest)
        assert status == 200
        assert body == DATA
        assert headers["Content-Length"] == str(SIZE)
        assert headers["Content-Type"] == "video/mp4"
        assert headers["ETag"] == f'"{digest}"'
        assert headers["Accept-Ranges"] == "bytes"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Content-Security-Policy"] == "sandbox"
        assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert "Last-Modified" in headers
        used(served, transfer_path)


async def test_head_has_the_headers_and_no_body(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        status, headers, body = await get(served, digest, method="HEAD")
        assert (status, body) == (200, b"")
        assert headers["Content-Length"] == str(SIZE)
        assert headers["ETag"] == f'"{digest}"'
        # A Range on HEAD is ignored (RFC 9110 14.2).
        status, headers, _ = await get(served, digest, {"Range": "bytes=0-9"}, method="HEAD")
        assert status == 200 and "Content-Range" not in headers


@pytest.mark.parametrize(
    ("range_value", "start", "end"),
    [
        ("bytes=0-0", 0, 0),
        ("bytes=1000-1999", 1000, 1999),
        ("bytes=299000-", 299000, SIZE - 1),
        ("bytes=-500", SIZE - 500, SIZE - 1),
        ("bytes=-9999999", 0, SIZE - 1),
        ("bytes=100-99999999999", 100, SIZE - 1),
        ("Bytes=5-9", 5, 9),
    ],
)
async def test_single_range(
    tmp_path: Path, transfer_path: str, range_value: str, start: int, end: int
) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        status, headers, body = await get(served, digest, {"Range": range_value})
        assert status == 206
        assert headers["Content-Range"] == f"bytes {start}-{end}/{SIZE}"
        assert headers["Content-Length"] == str(end - start + 1)
        assert body == DATA[start : end + 1]


@pytest.mark.parametrize("range_value", ["bytes=300000-", "bytes=400000-500000", "bytes=-0"])
async def test_unsatisfiable_range_is_416(
    tmp_path: Path, transfer_path: str, range_value: str
) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        status, headers, _ = await get(served, digest, {"Range": range_value})
        assert status == 416
        assert headers["Content-Range"] == f"bytes */{SIZE}"


@pytest.mark.parametrize(
    "range_value", ["items=0-5", "bytes=0-5,10-15", "bytes=9-5", "bytes=abc", "bytes=-"]
)
async def test_ignored_range_sends_everything(
    tmp_path: Path, transfer_path: str, range_value: str
) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        status, headers, body = await get(served, digest, {"Range": range_value})
        assert status == 200 and body == DATA
        assert "Content-Range" not in headers


async def test_if_range(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        ranged = {"Range": "bytes=10-19"}
        # The strong ETag (the digest) keeps the range; aiohttp's FileResponse would ignore it.
        status, _, body = await get(served, digest, {**ranged, "If-Range": f'"{digest}"'})
        assert (status, body) == (206, DATA[10:20])
        for validator in (
            f'W/"{digest}"',
            '"sha256:other"',
            "garbage",
            "Mon, 01 Jan 2001 00:00:00 GMT",
        ):
            status, _, body = await get(served, digest, {**ranged, "If-Range": validator})
            assert (status, len(body)) == (200, SIZE), validator
        # An exact Last-Modified date counts once it is a strong validator (>= 1 s old).
        _, headers, _ = await get(served, digest, method="HEAD")
        await asyncio.sleep(1.05)
        status, _, body = await get(
            served, digest, {**ranged, "If-Range": headers["Last-Modified"]}
        )
        assert (status, body) == (206, DATA[10:20])


async def test_conditional_requests(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        digest = await put(served, DATA)
        for value in (f'"{digest}"', f'W/"{digest}"', "*", f'"x", "{digest}"'):
            status, headers, body = await get(served, digest, {"If-None-Match": value})
            assert (status, body) == (304, b""), value
            assert headers["ETag"] == f'"{digest}"'
            assert "immutable" in headers["Cache-Control"]
        status, _, body = await get(served, digest, {"If-None-Match": '"other"'})
        assert (status, body) == (200, DATA)
        future = formatdate(time.time() + 60, usegmt=True)
        status, _, _ = await get(served, digest, {"If-Modified-Since": future})
        assert status == 304
        status, _, _ = await get(served, digest, {"If-Match": '"other"'})
        assert status == 412
        status, _, body = await get(served, digest, {"If-Match": f'"{digest}"'})
        assert (status, body) == (200, DATA)


@pytest.mark.parametrize(
    ("type_value", "status", "content_type"),
    [
        ("image/png", 200, "image/png"),
        ("audio/wav", 200, "audio/wav"),
        ("video/webm", 200, "video/webm"),
        ('video/mp4; codecs="avc1.42E01E"', 200, 'video/mp4; codecs="avc1.42E01E"'),
        ("application/octet-stream", 200, "application/octet-stream"),
        ("text/html", 400, None),
        ("text/plain", 400, None),
        ("application/json", 400, None),
        ("image/png\r\nX-Evil: 1", 400, None),
        ("image/", 400, None),
        ("", 400, None),
    ],
)
async def test_type_parameter(
    tmp_path: Path, type_value: str, status: int, content_type: str | None
) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        digest = await put(served, DATA[:1000])
        async with served.client.get(
            f"{served.url}/artifacts/{digest}", params={"type": type_value}
        ) as response:
            assert response.status == status
            if content_type is not None:
                assert response.headers["Content-Type"] == content_type
                assert await response.read() == DATA[:1000]
            assert "X-Evil" not in response.headers


async def test_unsafe_recorded_type_is_served_as_octet_stream(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        digest = await put(served, b"<script>alert(1)</script>", media_type="text/html")
        status, headers, _ = await get(served, digest)
        assert status == 200
        assert headers["Content-Type"] == "application/octet-stream"


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "sha1:" + "a" * 40,
        "a" * 64,
        "sha256:" + "a" * 63 + "g",
        "sha256:" + "a" * 64 + "%0A",
    ],
)
async def test_malformed_digest_is_400(tmp_path: Path, digest: str) -> None:
    async with serve(tmp_path, ServerSettings()) as served:
        status, _, _ = await get(served, digest)
        assert status == 400


async def test_unknown_digest_is_404(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        status, _, _ = await get(served, "sha256:" + "0" * 64)
        assert status == 404
        status, _, _ = await get(served, "sha256:" + "0" * 64, method="HEAD")
        assert status == 404


async def test_deleted_artifact_becomes_404(tmp_path: Path, transfer_path: str) -> None:
    async with serve(tmp_path, settings_for(transfer_path)) as served:
        served.state.cache.revalidate_s = 0.0
        digest = await put(served, DATA)
        assert (await get(served, digest))[0] == 200
        assert served.state.store.delete(digest)
        assert (await get(served, digest))[0] == 404


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


async def test_raw_paths_never_escape_the_store(tmp_path: Path) -> None:
    secret = b"TOP-SECRET-" + os.urandom(8).hex().encode()
    (tmp_path / "secret.txt").write_bytes(secret)
    async with serve(tmp_path, ServerSettings()) as served:
        (tmp_path / "artifacts").mkdir(exist_ok=True)
        (tmp_path / "artifacts" / "secret.txt").write_bytes(secret)
        for path in (
            "/artifacts/../secret.txt",
            "/artifacts/%2e%2e/secret.txt",
            "/artifacts/..%2Fsecret.txt",
            "/artifacts/secret.txt",
            "/artifacts/sha256:..%2F..%2Fsecret.txt",
            "/artifacts/%00",
            "/static/..%2F..%2F..%2Fsecret.txt",
        ):
            request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            answer = await raw_request(served.port, request)
            assert answer.status in (400, 404), path
            assert secret not in answer.body


async def test_store_read_errors_are_not_swallowed(tmp_path: Path) -> None:
    """A file that cannot be opened (EACCES) is an error, not a silent 404."""
    async with serve(tmp_path, ServerSettings()) as served:
        digest = await put(served, DATA[:100])
        store: ArtifactStore = served.state.store

        def refuse(_: str) -> None:
            raise PermissionError(errno.EACCES, "denied")

        served.state.cache._open = refuse  # type: ignore[method-assign,assignment]
        status, _, _ = await get(served, digest)
        assert status == 500
        assert store.exists(digest)


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
