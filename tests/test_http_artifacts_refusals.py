"""GET/HEAD /artifacts/{digest} against a real server: what it refuses or cannot
serve (types, malformed, unknown and deleted digests, paths out of the store, read
errors), over both transfer paths where the path matters."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mediaflow.server import ServerSettings
from mediaflow.store import ArtifactStore
from tests.artifact_requests import DATA, get, put
from tests.http_support import (
    raw_request,
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
)

# Every test here runs on asyncio's loop and on uvloop (the loop the commands use).
pytestmark = pytest.mark.both_loops


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
