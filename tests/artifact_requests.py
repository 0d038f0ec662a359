"""What the ``/artifacts/{digest}`` tests (``tests/test_http_artifacts_*.py``) share:
a payload of several chunks, saving it through the served store, one request, and
a check of which transfer path carried the bytes.
"""

from __future__ import annotations

from multidict import CIMultiDict

from tests.http_support import Served, random_bytes

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
