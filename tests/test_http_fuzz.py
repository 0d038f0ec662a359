"""Property-based fuzzing of GET /artifacts against a real server (in a thread):
Range headers, digests, raw paths (``..``, encoded slashes, NULs) and ``type=``
values. Never a 5xx, never a byte from outside the store, and a 206 is always
the exact slice it names."""

from __future__ import annotations

import http.client
import os
import re
import socket
import string
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mediaflow.server import ServerSettings
from mediaflow.store import ArtifactStore
from tests.http_support import HOST, ServerThread, random_bytes, server_thread

SIZE = 5000
DATA = random_bytes(SIZE, seed=11)
SECRET = b"SECRET-" + os.urandom(12).hex().encode()
FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,  # no example files left in the work tree
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


class Target:
    def __init__(self, thread: ServerThread, digest: str, path: str) -> None:
        self.thread = thread
        self.digest = digest
        self.path_name = path  # the transfer path, for ids
        self._conn: http.client.HTTPConnection | None = None

    def request(
        self, method: str, url: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):  # a server may close a kept-alive connection after an error
            if self._conn is None:
                self._conn = http.client.HTTPConnection(HOST, self.thread.port, timeout=10)
            try:
                self._conn.request(method, url, headers=headers)
                response = self._conn.getresponse()
                body = response.read()
                if response.will_close:
                    self._conn.close()
                    self._conn = None
                return response.status, {k.lower(): v for k, v in response.getheaders()}, body
            except (http.client.HTTPException, ConnectionError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def raw(self, request_line: bytes) -> bytes:
        with socket.create_connection((HOST, self.thread.port), timeout=10) as sock:
            sock.sendall(request_line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
            chunks: list[bytes] = []
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)


@pytest.fixture(scope="module", params=["sendfile", "fallback"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    root = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    data_dir = root / "data"
    store = ArtifactStore(data_dir)
    digest = store.save_sync(DATA, "video/mp4").digest
    store.close()
    # Secrets next to the store, inside it and above it: none may ever be served.
    for place in (root / "secret.txt", data_dir / "secret.txt", data_dir / "artifacts" / "secret"):
        place.write_bytes(SECRET)
    (data_dir / "artifacts" / digest[7:9] / "secret").write_bytes(SECRET)
    settings_ = ServerSettings(sendfile=request.param == "sendfile", inline_max=0)
    with server_thread(data_dir, settings_) as thread:
        yield Target(thread, digest, request.param)


range_values = st.one_of(
    st.text(alphabet=string.printable, max_size=40),
    st.builds(
        lambda unit, specs: f"{unit}={','.join(specs)}",
        st.sampled_from(["bytes", "BYTES", "Bytes", "items", "byte", ""]),
        st.lists(
            st.one_of(
                st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 7000), st.integers(0, 7000)),
                st.builds(lambda a: f"{a}-", st.integers(0, 7000)),
                st.builds(lambda b: f"-{b}", st.integers(0, 7000)),
                st.builds(lambda a: f"{a}-", st.integers(0, 10**40)),
                st.sampled_from(["", " ", "-", "--1", "1-2-3", "a-b", " 5 - 9 ", "0x10-20"]),
            ),
            min_size=1,
            max_size=3,
        ),
    ),
)
if_range_values = st.one_of(
    st.none(),
    st.text(alphabet=string.printable, max_size=40),
    st.sampled_from(['"{d}"', 'W/"{d}"', '"x"', "Thu, 01 Jan 1970 00:00:00 GMT"]),
)

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@FUZZ
@given(range_value=range_values, if_range=if_range_values)
def test_any_range_header(target: Target, range_value: str, if_range: str | None) -> None:
    headers = {"Range": range_value.replace("\r", "").replace("\n", "")}
    if if_range is not None:
        headers["If-Range"] = (
            if_range.replace("{d}", target.digest).replace("\r", "").replace("\n", "")
        )
    status, response_headers, body = target.request("GET", f"/artifacts/{target.digest}", headers)
    assert status in (200, 206, 400, 416), status
    assert SECRET not in body
    if status == 200:
        assert body == DATA
    elif status == 206:
        matched = _CONTENT_RANGE.fullmatch(response_headers["content-range"])
        assert matched is not None
        start, end, size = (int(g) for g in matched.groups())
        assert size == SIZE and 0 <= start <= end < SIZE
        assert body == DATA[start : end + 1]
    elif status == 416:
        assert response_headers["content-range"] == f"bytes */{SIZE}"


digest_like = st.one_of(
    st.text(max_size=80),
    st.builds(lambda h: "sha256:" + h, st.text(alphabet="0123456789abcdefABCDEF", max_size=70)),
)


@FUZZ
@given(digest=digest_like, type_value=st.one_of(st.none(), st.text(max_size=40)))
def test_any_digest_and_type(target: Target, digest: str, type_value: str | None) -> None:
    from urllib.parse import quote

    url = "/artifacts/" + quote(digest, safe="")
    if type_value is not None:
        url += "?type=" + quote(type_value, safe="")
    status, _, body = target.request("GET", url, {})
    assert status < 500, (digest, type_value)
    assert SECRET not in body
    if status == 200:
        assert body == DATA


path_pieces = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "..",
                ".",
                "%2e%2e",
                "%2E%2E",
                "%2f",
                "%2F",
                "%5c",
                "%00",
                "\x00",
                "secret",
                "secret.txt",
                "artifacts",
                "tmp",
                "sha256:",
                "//",
                "~",
                "%252e",
                ";",
                "?",
                "#",
            ]
        ),
        st.text(alphabet=string.ascii_letters + string.digits + "%./:", max_size=12),
    ),
    max_size=8,
)


@FUZZ
@given(pieces=path_pieces, prefix=st.sampled_from(["/artifacts/", "/", "/static/", "/api/flows/"]))
def test_any_raw_path(target: Target, pieces: list[str], prefix: str) -> None:
    path = prefix + "/".join(pieces)
    raw = b"GET " + path.encode("latin-1", "replace") + b" HTTP/1.1"
    answer = target.raw(raw)
    if not answer:
        return  # the parser refused the request line and closed: acceptable, never a leak
    status = int(answer[9:12])
    assert status < 500, path
    assert SECRET not in answer
