"""GET/HEAD /artifacts/{digest} against a real server, over both transfer paths
(zero-copy sendfile and chunked reads): the headers, ranges and preconditions."""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from tests.artifact_requests import DATA, SIZE, get, put, used
from tests.http_support import (
    serve,
    settings_for,
    transfer_path_fixture,  # noqa: F401 - the transfer_path fixture
)

# Every test here runs on asyncio's loop and on uvloop (the loop the commands use).
pytestmark = pytest.mark.both_loops


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
