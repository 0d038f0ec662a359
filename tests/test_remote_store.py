"""RemoteArtifactStore against a real artifact service: ``mediaflow serve`` in a child
process with a token (tests/store_service.py), each store with its own empty cache
directory. A full service is the one case served in-process: ENOSPC is injected
into that server's own store.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mediaflow.config import ConfigError, StoreSettings
from mediaflow.server import AppState, ServerSettings
from mediaflow.store import (
    ArtifactNotFound,
    ArtifactStore,
    RemoteArtifactStore,
    RemoteStoreError,
    StoreFull,
    StoreUnreachable,
    current_store,
    open_store,
)
from mediaflow.store.files import PartFile
from mediaflow.store.remote import REMEMBER_S
from mediaflow.store.service import RetryPolicy, ServiceClient, wire_type
from tests.http_support import digest_of, random_bytes, serve
from tests.redis_server import free_port
from tests.store_service import TOKEN, Service, start_service, stored_digests, temp_files

MAX_UPLOAD = 2_000_000  # the module's service refuses bodies larger than this (413)
DATA = random_bytes(1_500_000, seed=7)  # more than one 1 MiB block each way
FAST = RetryPolicy(attempts=3, backoff_s=0.01, backoff_max_s=0.02)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("remote"), MEDIAFLOW_MAX_UPLOAD=str(MAX_UPLOAD))
    yield running
    running.stop()


def remote(
    url: str, cache: Path, *, token: str | None = TOKEN, remember_s: float = REMEMBER_S
) -> RemoteArtifactStore:
    """A store of the service at ``url`` caching in ``cache``, with the right token by default."""
    return RemoteArtifactStore(url, cache_dir=cache, token=token, retry=FAST, remember_s=remember_s)


def assert_cache_clean(cache: Path) -> None:
    """No artifact and no temp file: nothing whole, nothing half-written."""
    assert stored_digests(cache) == set()
    assert temp_files(cache) == []


# -- saving -----------------------------------------------------------------------------


def test_every_sync_source_reaches_the_service_under_its_digest(
    service: Service, tmp_path: Path
) -> None:
    cache = tmp_path / "edge"
    store = remote(service.url, cache)
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(DATA)
    saves = [
        (store.save_sync(b"one frame", "image/jpeg"), b"one frame"),
        (store.save_sync(clip, "video/mp4"), DATA),
        (store.save_sync(iter([b"chunk-1", b"chunk-2"]), "audio/wav"), b"chunk-1chunk-2"),
        # A type the service does not store travels as octet-stream; the reference keeps it.
        (store.save_sync(b'{"n": 1}', "application/json", {"k": 1}), b'{"n": 1}'),
    ]
    for ref, data in saves:
        assert (ref.digest, ref.size) == (digest_of(data), len(data))
        assert service.local_path(ref.digest).read_bytes() == data
        assert store.local_path(ref.digest).read_bytes() == data  # and cached here
    assert saves[3][0].media_type == "application/json" and saves[3][0].meta == {"k": 1}
    assert stored_digests(cache) == {ref.digest for ref, _ in saves}
    assert temp_files(cache) == []
    store.close()


async def test_async_saves_return_once_the_service_holds_the_bytes(
    service: Service, tmp_path: Path
) -> None:
    store = remote(service.url, tmp_path / "edge")

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(DATA), 300_000):
            await asyncio.sleep(0)
            yield DATA[start : start + 300_000]

    streamed = await store.save(chunks(), "video/webm", {"seq": 3})
    # The service's answer is the proof: by the time save returns, its disk has the file.
    assert service.local_path(streamed.digest).read_bytes() == DATA
    assert streamed.meta == {"seq": 3}
    buffered = await store.save(b"a still frame", "image/png")
    assert service.has(buffered.digest)
    assert isinstance(store, ArtifactStore)  # anything typed ArtifactStore takes it
    store.close()


async def test_bytes_uploaded_lately_are_not_sent_again(tmp_path: Path) -> None:
    async with serve(tmp_path / "service", ServerSettings(token=TOKEN)) as served:
        store = remote(served.url, tmp_path / "edge")
        for _ in range(3):
            await store.save(b"silence", "audio/wav")
        forgetful = remote(served.url, tmp_path / "edge2", remember_s=0.0)
        for _ in range(2):
            await forgetful.save(b"silence", "audio/wav")
        puts = [(a.method, a.status) for a in served.state.answered if a.method == "PUT"]
        assert puts == [("PUT", 201)] * 3  # one from the first store, two from the second


# -- reading ----------------------------------------------------------------------------


async def test_another_machine_fetches_once_then_reads_its_cache(tmp_path: Path) -> None:
    running = start_service(tmp_path)
    try:
        ref = await remote(running.url, tmp_path / "edge").save(DATA, "video/mp4")
        reader = remote(running.url, tmp_path / "reader")
        assert not reader.local_path(ref.digest).exists()
        assert await reader.read(ref) == DATA  # a GET into the cache
    finally:
        running.stop()
    # The service is gone: any request would now raise StoreUnreachable.
    assert await reader.read(ref) == DATA
    with reader.open(ref) as cached:
        assert cached.read() == DATA
    assert reader.path_for(ref.digest).read_bytes() == DATA
    assert reader.exists(ref)
    info = reader.stat(ref)
    assert info is not None and (info.size, info.media_type) == (len(DATA), "video/mp4")
    assert stored_digests(tmp_path / "reader") == {ref.digest}
    assert temp_files(tmp_path / "reader") == []


def test_path_for_and_keep_fetch_what_the_cache_lacks(service: Service, tmp_path: Path) -> None:
    ref = remote(service.url, tmp_path / "edge").save_sync(b"a segment", "video/mp4")
    worker = remote(service.url, tmp_path / "worker")
    assert worker.keep("run-1", ref.digest, kind="hold")  # a node holds a reference it got
    assert worker.is_kept(ref.digest)
    assert worker.local_path(ref.digest).read_bytes() == b"a segment"
    other = remote(service.url, tmp_path / "other")
    assert (
        other.path_for(ref.digest).read_bytes() == b"a segment"
    )  # what ctx.more.artifact_path uses


def test_an_artifact_the_service_lacks_is_not_found(service: Service, tmp_path: Path) -> None:
    cache = tmp_path / "reader"
    store = remote(service.url, cache)
    missing = digest_of(b"never saved anywhere")
    with pytest.raises(ArtifactNotFound) as caught:
        asyncio.run(store.read(missing))
    assert str(caught.value) == (
        f"no artifact {missing} in the artifact service ({service.url}/artifacts/{missing})"
    )
    with pytest.raises(ArtifactNotFound):
        store.path_for(missing)
    with pytest.raises(ArtifactNotFound):
        store.keep("run-1", missing)
    assert not store.exists(missing)  # a HEAD
    assert store.stat(missing) is None
    assert_cache_clean(cache)


# -- refusals and failures --------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "not-the-token"])
@pytest.mark.parametrize("size", [9, 1_500_000], ids=["small", "large"])
def test_a_wrong_token_is_refused_clearly_and_leaves_nothing(
    service: Service, tmp_path: Path, token: str | None, size: int
) -> None:
    cache = tmp_path / "edge"
    store = remote(service.url, cache, token=token)
    data = random_bytes(size, seed=size)
    with pytest.raises(RemoteStoreError) as caught:
        store.save_sync(data, "image/jpeg")
    assert caught.value.status == 401
    assert str(caught.value) == (
        f"artifact service refused PUT {service.url}/artifacts/{digest_of(data)}: 401"
        " Unauthorized: a valid Authorization: Bearer token is required;"
        " set MEDIAFLOW_TOKEN to the service's token"
    )
    assert_cache_clean(cache)
    assert not service.has(digest_of(data))


def test_an_artifact_larger_than_the_service_takes_is_413(service: Service, tmp_path: Path) -> None:
    cache = tmp_path / "edge"
    big = tmp_path / "big.mp4"
    big.write_bytes(random_bytes(MAX_UPLOAD + 500_000, seed=3))
    with pytest.raises(RemoteStoreError) as caught:
        remote(service.url, cache).save_sync(big, "video/mp4")
    assert caught.value.status == 413
    assert f"Content-Length {MAX_UPLOAD + 500_000} exceeds {MAX_UPLOAD} bytes" in str(caught.value)
    assert "MEDIAFLOW_MAX_UPLOAD" in str(caught.value)
    assert_cache_clean(cache)


def test_a_service_that_is_down_fails_clearly_after_the_retries(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cache = tmp_path / "edge"
    store = remote(url, cache)
    with pytest.raises(StoreUnreachable) as caught:
        store.save_sync(b"a frame", "image/jpeg")
    assert str(caught.value) == (
        f"artifact service unreachable: PUT {url}/artifacts/{digest_of(b'a frame')} failed"
        " 3 times; last: ConnectionRefusedError: [Errno 111] Connection refused"
    )
    assert caught.value.url == f"{url}/artifacts/{digest_of(b'a frame')}"
    assert caught.value.status is None
    with pytest.raises(StoreUnreachable, match=r"GET .* failed 3 times"):
        store.path_for(digest_of(b"elsewhere"))
    assert_cache_clean(cache)


def test_a_restarted_service_is_reached_again_on_fresh_connections(tmp_path: Path) -> None:
    port = free_port()
    first = start_service(tmp_path / "first", port=port)
    store = remote(first.url, tmp_path / "edge")
    slept: list[float] = []
    store.client = ServiceClient(first.url, TOKEN, retry=FAST, sleep=slept.append)
    try:
        store.save_sync(b"before the restart", "image/jpeg")  # leaves a kept-alive connection
    finally:
        first.stop()
    second = start_service(tmp_path / "second", port=port)
    try:
        ref = store.save_sync(b"after the restart", "image/jpeg")
        assert second.has(ref.digest)
    finally:
        second.stop()
    assert slept == [FAST.delay(1)]  # the dead connection failed once, a fresh one worked


async def test_a_full_service_is_store_full(tmp_path: Path) -> None:
    class FullDisk(ArtifactStore):
        """The service's own store, with ENOSPC injected into its real write path."""

        def _new_part(self) -> PartFile:
            part = super()._new_part()

            def write(data: bytes | bytearray | memoryview) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            part.write = write  # type: ignore[method-assign]
            return part

    place = tmp_path / "service"
    state = AppState(place, settings=ServerSettings(token=TOKEN), store=FullDisk(place))
    async with serve(place, state=state) as served:
        cache = tmp_path / "edge"
        with pytest.raises(StoreFull) as caught:
            await remote(served.url, cache).save(b"a frame", "image/jpeg")
        url = f"{served.url}/artifacts/{digest_of(b'a frame')}"
        assert caught.value.errno == errno.ENOSPC and caught.value.filename == url
        assert "artifact service full (507 Insufficient Storage" in str(caught.value)
        assert_cache_clean(cache)
        assert stored_digests(place) == set()


# -- pure parts -------------------------------------------------------------------------


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(attempts=6, backoff_s=0.05, backoff_max_s=0.3)
    assert [policy.delay(n) for n in range(1, 6)] == [0.05, 0.1, 0.2, 0.3, 0.3]


@pytest.mark.parametrize(
    ("media_type", "sent"),
    [
        ("image/jpeg", "image/jpeg"),
        ("audio/wav; rate=16000", "audio/wav; rate=16000"),
        ("text/plain", "text/plain"),
        ("application/octet-stream", "application/octet-stream"),
        ("application/json", "application/octet-stream"),
        ("text/html", "application/octet-stream"),
    ],
)
def test_types_the_service_does_not_store_travel_as_octet_stream(
    media_type: str, sent: str
) -> None:
    assert wire_type(media_type) == sent


@pytest.mark.parametrize(
    ("setting", "base_url"),
    [
        (None, None),
        ("", None),
        ("local", None),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("HTTP://store.example:8765/", "http://store.example:8765"),
        ("https://store.example/mediaflow/", "https://store.example/mediaflow"),
    ],
)
def test_open_store_picks_the_store_the_setting_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str | None, base_url: str | None
) -> None:
    monkeypatch.setenv("MEDIAFLOW_TOKEN", TOKEN)
    if setting is None:
        monkeypatch.delenv("MEDIAFLOW_STORE", raising=False)
    else:
        monkeypatch.setenv("MEDIAFLOW_STORE", setting)
    store = open_store(tmp_path, StoreSettings.from_env())
    assert store.data_dir == tmp_path
    if base_url is None:
        assert type(store) is ArtifactStore
    else:
        assert isinstance(store, RemoteArtifactStore)
        assert (store.base_url, store.client.token) == (base_url, TOKEN)
    # The default store behind save_artifact is chosen the same way.
    monkeypatch.setenv("MEDIAFLOW_DATA", str(tmp_path / "default"))
    assert type(current_store()) is type(store)


@pytest.mark.parametrize(
    "setting",
    [
        "/var/lib/mediaflow",
        "redis://127.0.0.1:6379/0",
        "ftp://store.example",
        "http://",
        "http://store.example:99999",
        "http://user:secret@store.example",
        "http://store.example/?token=x",
    ],
)
def test_open_store_refuses_other_settings_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str
) -> None:
    monkeypatch.setenv("MEDIAFLOW_STORE", setting)
    with pytest.raises(ValueError, match="^" + re.escape(f"MEDIAFLOW_STORE={setting!r}")) as caught:
        open_store(tmp_path, StoreSettings.from_env())
    assert isinstance(caught.value, ConfigError)
