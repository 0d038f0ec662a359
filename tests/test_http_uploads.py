"""PUT /artifacts and PUT /artifacts/{digest} against a real server: streamed
bodies, size limits, lying digests, disconnects, a full disk, constant memory."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mediaflow.server import ServerSettings
from mediaflow.store.files import PartFile
from tests.http_support import (
    HOST,
    Served,
    digest_of,
    random_bytes,
    serve,
    stored_files,
    temp_files,
    wait_until,
)

DATA = random_bytes(3_000_000, seed=2)


async def chunks(data: bytes, size: int = 65536) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        await asyncio.sleep(0)
        yield data[start : start + size]


async def put(
    served: Served, body: Any, *, digest: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    url = f"{served.url}/artifacts" + (f"/{digest}" if digest else "")
    async with served.client.put(url, data=body, headers=headers or {}) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else {}, dict(response.headers)


def nothing_stored(data_dir: Path) -> None:
    assert stored_files(data_dir) == []
    assert temp_files(data_dir) == []


async def test_put_stores_and_answers_the_reference(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        meta = {"source": "cam", "seq": 7, "nested": {"ok": [1, 2]}}
        status, ref, headers = await put(
            served,
            DATA,
            headers={"Content-Type": "image/jpeg", "X-Mediaflow-Meta": json.dumps(meta)},
        )
        assert status == 201
        assert ref == {
            "digest": digest_of(DATA),
            "media_type": "image/jpeg",
            "size": len(DATA),
            "meta": meta,
        }
        assert headers["Location"] == f"/artifacts/{ref['digest']}"
        async with served.client.get(served.url + headers["Location"]) as response:
            assert response.headers["Content-Type"] == "image/jpeg"
            assert await response.read() == DATA
        assert temp_files(tmp_path) == []


async def test_put_with_its_digest_streamed_chunked(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        status, ref, _ = await put(served, chunks(DATA), digest=digest_of(DATA))
        assert status == 201 and ref["digest"] == digest_of(DATA)
        assert ref["media_type"] == "application/octet-stream"
        assert served.state.store.path_for(ref["digest"]).read_bytes() == DATA


async def test_a_body_that_lies_about_its_digest_is_400_and_not_stored(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        claimed = digest_of(b"something else")
        status, body, _ = await put(served, chunks(DATA), digest=claimed)
        assert status == 400 and "does not match" in body["error"]
        nothing_stored(tmp_path)
        assert not served.state.store.exists(digest_of(DATA))


async def test_oversized_content_length_is_413_before_the_body(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings(max_upload=1000)) as served:
        status, body, _ = await put(served, DATA)
        assert status == 413 and "exceeds" in body["error"]
        nothing_stored(tmp_path)


async def test_oversized_chunked_body_is_413_and_not_stored(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings(max_upload=1_000_000)) as served:
        status, _, _ = await put(served, chunks(DATA))
        assert status == 413
        nothing_stored(tmp_path)
        # The limit is inclusive.
        status, _, _ = await put(served, chunks(DATA[:1_000_000]))
        assert status == 201


async def test_expect_continue_is_refused_before_any_byte_is_sent(tmp_path: Path) -> None:
    async with serve(tmp_path, ServerSettings(max_upload=1000)) as served:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(
            b"PUT /artifacts HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 413")
        assert b"100 Continue" not in answer
        nothing_stored(tmp_path)


async def test_expect_continue_then_body(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        reader, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(
            b"PUT /artifacts HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            b"Content-Type: audio/wav\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        writer.write(b"hello")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 201")
        assert served.state.store.exists(digest_of(b"hello"))


async def test_client_that_disconnects_mid_body_leaves_nothing(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        _, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(b"PUT /artifacts HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n")
        writer.write(DATA[:1_500_000])
        await writer.drain()
        await wait_until(lambda: temp_files(tmp_path) != [])  # the save has started
        writer.close()
        await writer.wait_closed()
        await wait_until(lambda: temp_files(tmp_path) == [])
        assert stored_files(tmp_path) == []


async def test_client_that_disconnects_mid_chunked_body_leaves_nothing(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        _, writer = await asyncio.open_connection(HOST, served.port)
        writer.write(b"PUT /artifacts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(20):
            writer.write(b"10000\r\n" + bytes(0x10000) + b"\r\n")
        await writer.drain()
        await wait_until(lambda: temp_files(tmp_path) != [])
        writer.close()
        await writer.wait_closed()
        await wait_until(lambda: temp_files(tmp_path) == [])
        assert stored_files(tmp_path) == []


async def test_full_disk_is_507_and_leaves_nothing(tmp_path: Path) -> None:
    """ENOSPC injected into the store's real write path, after some bytes were written."""
    async with serve(tmp_path) as served:
        real_write = PartFile.write

        def filling_write(self: PartFile, data: bytes | bytearray | memoryview) -> None:
            if self.size + len(data) > 1_000_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_write(self, data)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PartFile, "write", filling_write)
            status, body, _ = await put(served, chunks(DATA))
        assert status == 507 and "full" in body["error"]
        nothing_stored(tmp_path)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/html"}, 415),
        ({"Content-Type": "application/json"}, 415),
        ({"Content-Type": "image/ jpeg"}, 415),
        ({"Content-Type": "video"}, 415),
        ({"Content-Type": "text/plain; charset=utf-8"}, 201),
        ({"Content-Type": "audio/wav; rate=16000"}, 201),
        ({"X-Mediaflow-Meta": "not json"}, 400),
        ({"X-Mediaflow-Meta": "[1, 2]"}, 400),
        ({"X-Mediaflow-Meta": '{"x": NaN}'}, 400),
        ({"X-Mediaflow-Meta": "[" * 5000}, 400),  # deep nesting, under the header limit
        ({"X-Mediaflow-Meta": '{"ok": true}'}, 201),
    ],
)
async def test_header_validation(tmp_path: Path, headers: dict[str, str], status: int) -> None:
    async with serve(tmp_path) as served:
        answered, _, _ = await put(served, b"payload", headers=headers)
        assert answered == status
        if status != 201:
            nothing_stored(tmp_path)


@pytest.mark.parametrize("digest", ["sha256:" + "A" * 64, "sha256:abc", "md5:" + "a" * 32])
async def test_put_with_a_malformed_digest_is_400(tmp_path: Path, digest: str) -> None:
    async with serve(tmp_path) as served:
        status, _, _ = await put(served, b"payload", digest=digest)
        assert status == 400
        nothing_stored(tmp_path)


@pytest.mark.slow
async def test_memory_stays_flat_for_a_256_mib_streamed_put(tmp_path: Path) -> None:
    """Server and client share this process: both stream, so RSS barely moves."""
    import psutil

    process = psutil.Process()
    block = random_bytes(1 << 20, seed=9)
    size = 256 << 20
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, process.memory_info().rss)
            await asyncio.sleep(0.01)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(size >> 20):
            yield block

    async with serve(tmp_path) as served:
        await put(served, b"warm-up")
        before = process.memory_info().rss
        sampler = asyncio.create_task(sample())
        status, ref, _ = await put(served, body())
        sampling = False
        await sampler
    assert status == 201 and ref["size"] == size
    growth = peak - before
    assert growth < 64 << 20, f"RSS grew by {growth / 2**20:.1f} MiB"
