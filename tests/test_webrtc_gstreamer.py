"""GStreamer's ``webrtcbin`` as a WHEP viewer and as a WHIP publisher: a third WebRTC
stack, in C, with an RSA DTLS certificate (``tests/gst_webrtc_client.py``).

aiortc, answering as the DTLS client, offers only ECDSA cipher suites, so a peer with
an RSA certificate failed the handshake ("no shared cipher"). The server now answers
as the DTLS server when the offer leaves the role open; these tests fail without it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mediaflow import FlowBuilder
from mediaflow.server.whep import WHEP as WHEP_KEY
from tests.connector_helpers import MediaSink
from tests.whep_support import HEIGHT, WHEP, WIDTH, served_camera
from tests.whip_helpers import TOKEN, whip_rig

pytest.importorskip("aiortc")
pytestmark = pytest.mark.timeout(60)

SYSTEM_PYTHON = "/usr/bin/python3"
CLIENT = Path(__file__).with_name("gst_webrtc_client.py")
PACKAGES = "python3-gi gir1.2-gst-plugins-bad-1.0 gstreamer1.0-nice gstreamer1.0-libav"
PROBE = (
    "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstWebRTC', '1.0');"
    "from gi.repository import Gst, GstWebRTC; Gst.init(None);"
    "missing = [e for e in ('webrtcbin', 'nicesrc', 'avdec_h264', 'vp8enc', 'opusenc')"
    " if Gst.ElementFactory.find(e) is None]; print(' '.join(missing))"
)


@functools.cache
def webrtcbin_missing() -> str | None:
    """Why GStreamer's WebRTC client cannot run here, or None."""
    try:
        probe = subprocess.run(
            [SYSTEM_PYTHON, "-c", PROBE], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SYSTEM_PYTHON}: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.strip()[-200:]
        return f"GStreamer's WebRTC bindings: {reason} (apt-get install {PACKAGES})"
    if probe.stdout.strip():
        return f"GStreamer lacks {probe.stdout.strip()} (apt-get install {PACKAGES})"
    return None


async def gst_client(mode: str, url: str, seconds: float, token: str | None = None) -> Any:
    """Run the client (module doc) to its end; what it printed."""
    missing = webrtcbin_missing()
    if missing is not None:
        pytest.skip(missing)
    args = [SYSTEM_PYTHON, str(CLIENT), mode, url, f"{seconds:g}", *([token] if token else [])]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=45)
    lines = out.decode().strip().splitlines()
    assert lines, f"exit {proc.returncode}: {err.decode()[-800:]}"
    return json.loads(lines[-1])


async def test_gstreamer_views_a_camera_over_whep(tmp_path: Path) -> None:
    async with served_camera(tmp_path) as served:
        got = await gst_client("whep", served.url + WHEP, 2.0)
        assert "error" not in got and got["status"] == 201, got
        assert got["answer_setup"] == ["a=setup:passive"], got  # this side: DTLS server
        assert got["state"] == "connected" and got["deleted"] == 204, got
        assert got["frames"]["video"] >= 10 and got["size"] == [WIDTH, HEIGHT], got
        assert got["frames"]["audio"] >= 25, got  # its Opus, decoded
        service = served.runner.app[WHEP_KEY].service
        assert service is not None and service.sessions == {}  # its DELETE ended it


async def test_gstreamer_publishes_over_whip(tmp_path: Path) -> None:
    flow = (
        FlowBuilder("gst")
        .add("phone", "webrtc", fps=5, segment_s=1.0, video=True)
        .add("sink", MediaSink, inputs={
            "image": "phone.image", "video": "phone.video", "audio": "phone.audio"})
    )  # fmt: skip
    async with whip_rig(flow, tmp_path) as rig:
        publishing = asyncio.ensure_future(
            gst_client("whip", rig.url("/whip/gst/phone"), 4.0, TOKEN)
        )

        def arrived() -> bool:
            images, segments = rig.received("image"), rig.received("video")
            return len(images) >= 3 and len(segments) >= 1 and len(rig.received("audio")) >= 10

        await rig.until(lambda: arrived() or publishing.done(), timeout=30)
        got = await publishing
        assert "error" not in got and got["status"] == 201, got
        assert got["answer_setup"] == ["a=setup:passive"], got
        assert got["frames"]["video"] > 0 and got["frames"]["audio"] > 0, got
        image = rig.received("image")[0]
        assert (image.ref.meta["width"], image.ref.meta["height"]) == (320, 240)
        assert rig.received("audio")[0].ref.media_type.startswith("audio/")
        await rig.until(lambda: bool(rig.events("device_lost")), timeout=10)
