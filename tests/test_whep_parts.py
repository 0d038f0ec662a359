"""WHEP's pure parts as tables (the viewer queue's policy, access units, offer checks),
and its access rules against a real server with reads locked."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaflow.live.fanout import Admit, ViewerQueue, access_unit, admit
from mediaflow.live.parts import VideoFrame
from mediaflow.server.whep import offer_problem
from tests.links_support import BEARER, LOCKED, as_link, call, create
from tests.whep_support import FLOW, SDP, WHEP, offer_sdp, served_camera


@pytest.mark.parametrize(
    ("depth", "keyframe", "waiting", "expected"),
    [
        (0, False, False, Admit.TAKE),
        (0, True, True, Admit.TAKE),  # the keyframe a new or restarted viewer waits for
        (0, False, True, Admit.DROP),  # nothing decodes before it
        (59, False, False, Admit.TAKE),
        (60, True, False, Admit.FLUSH),  # full: what waits is a whole queue behind live
        (60, False, False, Admit.FLUSH),
    ],
)
def test_admit(depth: int, keyframe: bool, waiting: bool, expected: Admit) -> None:
    assert admit(depth=depth, capacity=60, keyframe=keyframe, waiting_keyframe=waiting) is expected


def test_a_video_queue_that_fills_drops_to_the_next_keyframe() -> None:
    queue = ViewerQueue(3, video=True)
    for index, keyframe in enumerate([False, True, False, False, False, False, True, False]):
        queue.offer(index, keyframe=keyframe)
    # 0 before any keyframe; 1-3 fill it; 4 flushes (a P-frame: waits); 5 dropped; 6 on.
    assert list(queue._items) == [6, 7] and queue.dropped == 6 and queue.max_depth == 3
    queue.restart()  # a PLI: on at the next keyframe
    queue.offer(8, keyframe=False)
    queue.offer(9, keyframe=True)
    assert list(queue._items) == [9] and queue.restarts == 1


def test_a_sound_queue_that_fills_starts_again_at_the_newest() -> None:
    queue = ViewerQueue(2, video=False)
    for index in range(5):
        queue.offer(index, keyframe=True)
    assert list(queue._items) == [4] and queue.dropped == 4


def test_an_access_unit_carries_the_parameter_sets_on_keyframes_only() -> None:
    sps, pps, idr, slice_, aud = b"\x67\x42", b"\x68\xce", b"\x65\x88", b"\x41\x9a", b"\x09\xf0"

    def sample(*nals: bytes) -> bytes:
        return b"".join(len(n).to_bytes(4, "big") + n for n in nals)

    key = VideoFrame(b"", 0.0, True, sample=sample(aud, sps, idr))
    assert access_unit([sps, pps], key) == [sps, pps, idr]
    other = VideoFrame(b"", 0.1, False, sample=sample(slice_))
    assert access_unit([sps, pps], other) == [slice_]


@pytest.mark.parametrize(
    ("offer", "problem"),
    [
        ("", "starts with the line v=0"),
        ("hello", "starts with the line v=0"),
        ("v=0\r\nnot a line\r\n", "<type>=<value>"),
        ("v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", "no video section"),
        ("v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n", "H.264"),
        ("v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/90000\r\n", None),
    ],
)
def test_offer_problem(offer: str, problem: str | None) -> None:
    found = offer_problem(offer)
    assert found is None if problem is None else problem in (found or "")


async def test_with_reads_locked_a_link_of_the_flow_opens_whep(tmp_path: Path) -> None:
    async with served_camera(tmp_path, LOCKED, sound=False) as served:
        pc, sdp = await offer_sdp(audio=False)
        try:
            status, _ = await call(served, "POST", WHEP, data=sdp, headers=SDP)
            assert status == 401  # a read, locked
            link = (await create(served, FLOW))["link"]
            async with served.client.post(
                served.url + WHEP, data=sdp, headers=SDP | as_link(link)
            ) as resp:
                assert resp.status == 201
                location = resp.headers["Location"]
            status, _ = await call(served, "DELETE", location, headers=as_link(link))
            assert status == 204
            status, _ = await call(served, "DELETE", location, headers=BEARER)
            assert status == 404
        finally:
            await pc.close()


async def test_without_the_webrtc_extra_an_offer_is_501_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    async with served_camera(tmp_path, sound=False) as served:
        pc, sdp = await offer_sdp(audio=False)
        try:
            # None in sys.modules: importing the aiortc side raises ImportError, as without it.
            monkeypatch.setitem(sys.modules, "mediaflow.server.whep_sessions", None)
            async with served.client.post(served.url + WHEP, data=sdp, headers=SDP) as resp:
                assert resp.status == 501
                assert "mediaflow[webrtc]" in (await resp.json())["error"]
        finally:
            await pc.close()
