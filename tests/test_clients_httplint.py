"""REDbot's message linter, httplint, reads mediaflow's answers about artifacts byte for
byte as they left a live server: whole, ranged, conditional (304, 412, If-Range), HEAD, and
the refusals (404, 416, 400), for a recorded clip, a camera frame and a microphone chunk,
over each way the server sends a body (its own head and ``sendfile``, inline, aiohttp's
writer).

httplint grades each finding GOOD, INFO, WARN or BAD. BAD breaks a requirement of HTTP;
WARN is what REDbot tells a site to fix (caching that does not work as meant, a content type
that does not match the bytes). Both fail here, except the findings in ``ACCEPTED``, each
with the reason it does not apply to these answers. GOOD and INFO are descriptions ("the
resource last changed 3 minutes ago"), not problems.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from mediaflow.server import ServerSettings
from mediaflow.store import ArtifactStore
from tests.clients_support import SMALL_CAMERA, Recording, record_now, recording_flow
from tests.http_support import HOST, PATHS, serve

httplint = pytest.importorskip("httplint", reason="httplint is in the test extra")
sniffpy_match = pytest.importorskip("sniffpy.match", reason="httplint's sniffer")

UNKNOWN = "sha256:" + "0" * 64
USER_AGENT = "mediaflow-tests"


@dataclass(frozen=True)
class Case:
    """One request. ``{digest}``, ``{size}`` and ``{etag}`` in the target or a header value
    stand for the artifact's."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    status: int


ARTIFACT = "/artifacts/{digest}"
CASES = [
    Case("GET", ARTIFACT, (), 200),
    Case("GET", ARTIFACT + "?type=application/octet-stream", (), 200),
    Case("GET", ARTIFACT, (("Range", "bytes=100-199"),), 206),
    Case("GET", ARTIFACT, (("Range", "bytes=-500"),), 206),
    Case("GET", ARTIFACT, (("Range", "bytes=10-"), ("If-Range", "{etag}")), 206),
    Case("GET", ARTIFACT, (("Range", "bytes=10-"), ("If-Range", '"sha256:stale"')), 200),
    Case("GET", ARTIFACT, (("If-None-Match", "{etag}"),), 304),
    Case("HEAD", ARTIFACT, (), 200),
    Case("HEAD", ARTIFACT, (("If-None-Match", "{etag}"),), 304),
    Case("GET", ARTIFACT, (("If-Match", '"sha256:other"'),), 412),
    Case("GET", ARTIFACT, (("Range", "bytes={size}-"),), 416),
    Case("GET", f"/artifacts/{UNKNOWN}", (), 404),
    Case("HEAD", f"/artifacts/{UNKNOWN}", (), 404),
    Case("GET", "/artifacts/sha256:not-a-digest", (), 400),
    Case("GET", ARTIFACT + "?type=text/html", (), 400),
]


@dataclass(frozen=True)
class Linted:
    status: int
    request_notes: list[Any]
    response_notes: list[Any]
    content_type: str | None
    body: bytes


SPELLINGS = {"audio/wave": "audio/wav"}  # the WHATWG table's name for RIFF WAVE


def _sniffed_alike(case: Case, linted: Linted) -> bool:
    # sniffpy 1.0.0 (which httplint pins) runs the *image* signatures for an audio or
    # video type and answers "undefined/undefined", so every audio and video body
    # "doesn't match". The audio/video signatures of the same spec (WHATWG MIME Sniffing,
    # 6.2), which sniffpy has, must agree with the declared type instead.
    sniffed = str(sniffpy_match.match_video_audio_type_pattern(linted.body[:1445]))
    return SPELLINGS.get(sniffed, sniffed) == linted.content_type


# Findings (by httplint's note class) that do not apply here: why, and when.
ACCEPTED: dict[str, Callable[[Case, Linted], bool]] = {
    # "public" is not redundant here: with a token set and reads left open, a client may
    # send its Authorization header on reads too, and a shared cache may store such an
    # answer only when it says public (RFC 9111 3.5). Locked reads say private instead.
    "STORE_PUBLIC_UNNECESSARY": lambda case, linted: True,
    # The note for any 400 ("the server didn't understand the request"): these requests
    # are malformed on purpose, and 400 is the answer they should get.
    "STATUS_BAD_REQUEST": lambda case, linted: case.status == 400,
    "CONTENT_TYPE_MISMATCH": _sniffed_alike,
}
BAD_LEVELS = frozenset({"BAD", "WARN"})


def _request_bytes(case: Case, target: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{case.method} {target} HTTP/1.1", *(f"{n}: {v}" for n, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_response(data: bytes) -> tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]], bytes]:
    """``(version, status, phrase, header fields, body)`` of a whole raw response."""
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep, f"no end of headers in {data[:200]!r}"
    top, *lines = head.split(b"\r\n")
    version, status, phrase = top.split(b" ", 2)
    fields = []
    for line in lines:
        name, colon, value = line.partition(b":")
        assert colon and name == name.strip(), f"malformed field line {line!r}"
        fields.append((name, value.strip(b" \t")))
    return version, status, phrase, fields, body


async def lint(port: int, case: Case, target: str, headers: list[tuple[str, str]]) -> Linted:
    """Send one request on a connection of its own, read the answer to EOF, lint both."""
    sent = [("Host", f"{HOST}:{port}"), ("User-Agent", USER_AGENT), *headers]
    sent.append(("Connection", "close"))
    started = time.time()
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(_request_bytes(case, target, sent))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    request = httplint.HttpRequestLinter(start_time=started)
    request.process_request_topline(case.method.encode(), target.encode(), b"HTTP/1.1")
    request.process_headers([(n.encode(), v.encode()) for n, v in sent])
    request.finish_content(True)

    version, status, phrase, fields, body = _parse_response(data)
    names = {name.lower() for name, _ in fields}
    assert b"transfer-encoding" not in names, "an artifact answer is framed by Content-Length"
    response = httplint.HttpResponseLinter(start_time=started, _related=request)
    response.is_head_response = case.method == "HEAD"
    response.process_response_topline(version, status, phrase)
    response.process_headers(fields)
    response.feed_content(body)
    response.finish_content(True)
    types = [v.decode() for n, v in fields if n.lower() == b"content-type"]
    return Linted(
        int(status), list(request.notes), list(response.notes), types[0] if types else None, body
    )


def findings(case: Case, linted: Linted) -> list[str]:
    """The BAD and WARN notes (and their subnotes) not :data:`ACCEPTED` for this answer."""
    found = []
    for side, notes in (("request", linted.request_notes), ("response", linted.response_notes)):
        for note in notes:
            for each in [note, *note.subnotes]:
                name = type(each).__name__
                if each.level.name not in BAD_LEVELS:
                    continue
                if side == "response" and name in ACCEPTED and ACCEPTED[name](case, linted):
                    continue
                found.append(f"{side} [{each.level.name}] {name}: {each.summary}")
    return found


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    return record_now(recording_flow("lint", SMALL_CAMERA), tmp_path_factory.mktemp("lint"))


@pytest.mark.parametrize("way", ["inline", *sorted(PATHS)])
async def test_httplint_finds_nothing_wrong_with_artifact_answers(
    recording: Recording, way: str
) -> None:
    with ArtifactStore(recording.data_dir) as store:
        by_type = {info.media_type: info for info in store.iter_infos()}
    clip = recording.clips[0]
    frame, chunk = by_type["image/jpeg"], by_type["audio/wav"]
    artifacts = [(clip.digest, clip.size), (frame.digest, frame.size), (chunk.digest, chunk.size)]
    settings = ServerSettings() if way == "inline" else PATHS[way]
    problems: list[str] = []
    async with serve(recording.data_dir, settings) as served:
        for digest, size in artifacts:
            values = {"digest": digest, "size": size, "etag": f'"{digest}"'}
            for case in CASES:
                target = case.target.format(**values)
                headers = [(n, v.format(**values)) for n, v in case.headers]
                linted = await lint(served.port, case, target, headers)
                assert linted.status == case.status, (case, target)
                problems += [
                    f"{case.method} {target} {headers}: {f}" for f in findings(case, linted)
                ]
    assert problems == []


async def test_a_mislabelled_answer_is_still_flagged(recording: Recording) -> None:
    """The sniffing waiver is narrow: a camera frame served as ``video/mp4`` is reported."""
    with ArtifactStore(recording.data_dir) as store:
        frame = next(i for i in store.iter_infos() if i.media_type == "image/jpeg")
    case = Case("GET", f"/artifacts/{frame.digest}?type=video/mp4", (), 200)
    async with serve(recording.data_dir) as served:
        linted = await lint(served.port, case, case.target, [])
    assert [f for f in findings(case, linted) if "CONTENT_TYPE_MISMATCH" in f]
