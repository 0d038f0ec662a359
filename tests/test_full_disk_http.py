"""``PUT /artifacts/{digest}`` against a real server whose data directory is on a
small filesystem that is really full (``tests/small_fs.py``): 507 with a JSON
error and nothing visible, then 201 for the same request once space returns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.http_support import Served, digest_of, random_bytes, serve, stored_files, temp_files
from tests.small_fs import (
    SmallFs,
    small_fs_fixture,  # noqa: F401 - the small_fs fixture
)

KiB = 1 << 10


async def put(served: Served, data: bytes, digest: str) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "image/jpeg"}
    url = f"{served.url}/artifacts/{digest}"
    async with served.client.put(url, data=data, headers=headers) as response:
        return response.status, json.loads(await response.text())


async def status_of(served: Served, method: str, digest: str) -> int:
    async with served.client.request(method, f"{served.url}/artifacts/{digest}") as response:
        await response.read()
        return response.status


@pytest.mark.parametrize(
    "what_fails",
    [
        "bytes",  # the body does not fit: the temp file cannot grow
        "row",  # the body fits exactly, then the metadata cannot grow
    ],
)
async def test_a_put_on_a_full_disk_is_507_and_stores_nothing_until_space_returns(
    small_fs: SmallFs, what_fails: str
) -> None:
    data_dir = small_fs.data_dir()
    async with serve(data_dir) as served:
        status, _ = await put(
            served, b"before the disk filled", digest_of(b"before the disk filled")
        )
        assert status == 201
        if what_fails == "bytes":
            body = random_bytes(1024 * KiB, seed=5)
            small_fs.fill(leave=64 * KiB)
        else:
            body = random_bytes(3 * small_fs.block_size(), seed=6)
            small_fs.fill(leave=len(body))
        digest = digest_of(body)

        status, answer = await put(served, body, digest)

        assert status == 507
        assert answer == {"error": "artifact store is full; nothing stored"}
        assert await status_of(served, "GET", digest) == 404
        assert await status_of(served, "HEAD", digest) == 404
        assert not served.state.store.exists(digest)
        assert len(stored_files(data_dir)) == 1 and temp_files(data_dir) == []

        small_fs.make_room()
        status, ref = await put(served, body, digest)

        assert status == 201
        assert ref == {"digest": digest, "media_type": "image/jpeg", "size": len(body), "meta": {}}
        async with served.client.get(f"{served.url}/artifacts/{digest}") as response:
            assert response.status == 200 and await response.read() == body
        assert len(stored_files(data_dir)) == 2 and temp_files(data_dir) == []
