"""WHIP when publishers misbehave: killed mid-stream, garbage offers, wrong credentials,
one too many. The server answers 4xx (never 5xx) and keeps running; a publisher that
goes away is ``device_lost``, the next one ``device_restored``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from mediaflow import FlowBuilder
from tests.connector_helpers import MediaSink
from tests.whip_helpers import AUTH, TOKEN, WhipRig, publish, whip_rig

pytest.importorskip("aiortc")
pytestmark = pytest.mark.timeout(60)
SDP = {"Content-Type": "application/sdp"}
ROOT = Path(__file__).resolve().parent.parent


def phone_flow(name: str) -> FlowBuilder:
    return (
        FlowBuilder(name)
        .add("phone", "webrtc", fps=5, idle_s=1.5)
        .add("sink", MediaSink, inputs={"image": "phone.image", "audio": "phone.audio"})
    )


async def post(rig: WhipRig, path: str, body: bytes | str, headers: dict[str, str]) -> int:
    async with rig.http.post(rig.url(path), data=body, headers=headers) as answer:
        await answer.read()
        return answer.status


async def publisher_process(rig: WhipRig, path: str, *options: str) -> asyncio.subprocess.Process:
    """tests.whip_publisher publishing to ``path`` in a process of its own."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.whip_publisher", rig.url(path), TOKEN, *options,
        stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
    )  # fmt: skip


async def test_a_killed_publisher_is_lost_and_the_next_one_restores(tmp_path: Path) -> None:
    async with whip_rig(phone_flow("killed"), tmp_path) as rig:
        child = await publisher_process(rig, "/whip/killed/phone")
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 15)
            assert line.startswith(b"published /whip/killed/phone/")
            await rig.until(lambda: len(rig.received("image")) >= 2)
            # A second publisher while the first holds the node: 503, told when to retry.
            async with rig.http.post(
                rig.url("/whip/killed/phone"), data="v=0\r\nm=video 9 x\r\n", headers=AUTH | SDP
            ) as busy:
                assert busy.status == 503 and busy.headers["Retry-After"] == "5"
        finally:
            child.send_signal(signal.SIGKILL)
            await child.wait()
        killed_at = len(rig.received("image"))
        await rig.until(lambda: rig.events("device_lost"), timeout=10)
        assert rig.events("device_lost")[0].data["device"] == "webrtc:killed/phone"
        # Its place is free again: a new publisher restores the device.
        await rig.until(lambda: not rig.session.node("phone").slot.publishers, timeout=5)
        again = await publish(rig, "/whip/killed/phone")
        try:
            await rig.until(lambda: rig.events("device_restored"), timeout=10)
            await rig.until(lambda: len(rig.received("image")) >= killed_at + 2)
            # Hanging up ends the session: lost again; its Location is gone.
            async with rig.http.delete(rig.url(again.location), headers=AUTH) as ended:
                assert ended.status == 200
            async with rig.http.delete(rig.url(again.location), headers=AUTH) as twice:
                assert twice.status == 404
            await rig.until(lambda: len(rig.events("device_lost")) >= 3, timeout=10)
        finally:
            await again.close()


async def test_garbage_offers_and_bad_credentials_are_4xx_and_the_server_lives(
    tmp_path: Path,
) -> None:
    garbage: list[bytes] = [
        b"",
        b"\xff\xfe\x00garbage",
        b"v=0\r\n",
        b"v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n",
        b"v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 RTP/AVP 0\r\n",
        b"v=0\r\nm=video x\r\na=ice-ufrag:\r\na=fingerprint:sha-256 zz\r\n" * 50,
        b"hello",
    ]
    async with whip_rig(phone_flow("garbage"), tmp_path) as rig:
        path = "/whip/garbage/phone"
        statuses = [
            await post(rig, path, garbage[i % len(garbage)] + str(i).encode() * (i % 2), AUTH | SDP)
            for i in range(100)
        ]
        assert set(statuses) == {400}, statuses
        assert await post(rig, path, "v=0\r\n", AUTH | {"Content-Type": "text/plain"}) == 415
        assert await post(rig, path, "x" * 70_000, AUTH | SDP) == 413
        assert await post(rig, "/whip/garbage/sink", "v=0", AUTH | SDP) == 404
        assert await post(rig, "/whip/nowhere/phone", "v=0", AUTH | SDP) == 404
        bad = {"Authorization": "Bearer wrong"} | SDP
        assert await post(rig, path, "v=0", bad) == 401
        assert await post(rig, path, "v=0", SDP) == 401
        async with rig.http.delete(rig.url(f"{path}/nosuch"), headers=AUTH) as gone:
            assert gone.status == 404
        async with rig.http.get(rig.url("/healthz")) as health:
            assert health.status == 200
        assert not rig.session.node("phone").slot.publishers  # nothing half-open was kept


async def test_a_flooding_publisher_is_held_to_a_bounded_decoding_queue(tmp_path: Path) -> None:
    """A publisher sending 4K H.264 as fast as it can (a few hundred bytes a frame,
    many times what this machine decodes): aiortc's receiver queues at most a second
    of frames for its decoder, drops the rest up to a keyframe, and the flow goes on
    taking pictures. (Held to that, the test process's RSS levelled off within 6 s.)"""
    from connectors._whip_decode import VIDEO_FRAMES

    flow = (
        FlowBuilder("flood")
        .add("phone", "webrtc", fps=5, idle_s=3.0)
        .add("sink", MediaSink, inputs={"image": "phone.image"})
    )
    async with whip_rig(flow, tmp_path) as rig:
        child = await publisher_process(rig, "/whip/flood/phone", "--flood")
        try:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 20)
            assert line.startswith(b"published /whip/flood/phone/")
            (publisher,) = rig.session.node("phone").slot.publishers.values()
            (decoding,) = publisher.decoding
            await rig.until(lambda: decoding.dropped > 0, timeout=20)  # it fell behind
            taken = len(rig.received("image"))
            await rig.until(lambda: len(rig.received("image")) >= taken + 2)  # and goes on
            assert decoding.max_depth <= VIDEO_FRAMES
            async with rig.http.get(rig.url("/healthz")) as health:
                assert health.status == 200
        finally:
            child.send_signal(signal.SIGKILL)
            await child.wait()
