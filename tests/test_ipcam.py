"""IP cameras, for real: GStreamer's RTSP server (tests/rtsp_server.py) stands in for them.

A camera is recorded without re-encoding: every coded slice in a clip is the one the
server's file holds, in order. And a camera fails the ways cameras do: it reboots,
stalls, comes back with another resolution, or refuses a wrong password.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from connectors import CameraConnector
from connectors._copy_run import PacketRun
from devices import CredentialsRefused
from devices.redact import public_url
from mediaflow import FlowBuilder, FlowSession, cli
from mediaflow.engine.events import Event
from mediaflow.live.hub import LiveHub
from tests.browser import browser_fixture, page_errors, page_fixture  # noqa: F401 - fixtures
from tests.connector_helpers import FAST, FlowResult, MediaSink, run_flow, sink_has
from tests.copy_helpers import find_run, h264_slices, stream_facts
from tests.flow_process import running_flow, wait_for_emitted
from tests.rtsp_server import Mount, RtspServer, RtspServerFactory, rtsp_media

if TYPE_CHECKING:
    from playwright.async_api import Page

FPS = 15
TIMEOUT_S = 2.0  # each wait on the camera: a stall is seen after this long


def ipcam_flow(name: str, url: str, *, transport: str = "tcp") -> FlowBuilder:
    """A camera at ``url`` (1 s segments, a JPEG a second) recorded into 2 s clips."""
    return (
        FlowBuilder(name)
        .add(
            "cam",
            "camera",
            device=url,
            fps=1,
            segment_s=1,
            transport=transport,
            timeout_s=TIMEOUT_S,
            reconnect_base_s=0.2,
            reconnect_max_s=0.5,
        )
        .add("rec", "recorder", clip_s=2, inputs={"video": "cam.video"})
        .add("clips", MediaSink, inputs={"video": "rec.video"})
        .add("sink", MediaSink, inputs={"image": "cam.image", "video": "cam.video"})
    )


def clips_of(result: FlowResult) -> list[bytes]:
    return [r.data for r in result.port("video", sink="clips")]


def assert_runs_of(clips: list[bytes], media: Path) -> None:
    """Each clip's slices are the file's, bit for bit, and each clip goes on where the
    one before ended."""
    source = h264_slices(media)
    at: int | None = None
    for clip in clips:
        slices = h264_slices(clip)
        found = find_run(slices, source)
        assert found is not None, "a clip holds slices the camera never sent"
        assert at is None or found == at, (found, at)
        at = found + len(slices)


@pytest.mark.parametrize(
    ("video", "audio", "transport", "login"),
    [
        ("h264", "aac", "tcp", False),
        ("h264", "pcmu", "udp", True),
        ("h265", "aac", "tcp", False),
    ],
)
async def test_a_camera_is_recorded_with_its_own_coded_pictures(
    tmp_path: Path, rtsp_server: RtspServerFactory, video: str, audio: str, transport: str,
    login: bool,
) -> None:  # fmt: skip
    media = rtsp_media(video, fps=FPS)  # type: ignore[arg-type]
    user, password = ("viewer", "p@ss:w/rd") if login else (None, None)
    server = rtsp_server(Mount(media=media, video=video, audio=audio, user=user, password=password))  # type: ignore[arg-type]
    url = server.url(user=user, password=password)
    flow = ipcam_flow(f"ip{video}{audio}", url, transport=transport)
    result = await run_flow(flow, tmp_path, until=sink_has("video", 2, "clips"), timeout=40)
    clips = clips_of(result)
    assert_runs_of(clips, media)
    for clip in result.port("video", sink="clips"):
        facts = stream_facts(clip.data)
        assert facts["video"]["first_keyframe"]
        assert facts["video"]["decoded"] == facts["video"]["packets"] == 2 * FPS
        assert facts["audio"]["codec"] == "aac" == clip.ref.meta["audio_codec"]
        assert facts["audio"]["rate"] == (8000 if audio == "pcmu" else 48000)
        assert clip.ref.meta["video_codec"] == ("hevc" if video == "h265" else "h264")
    segments = result.port("video")
    assert all(s.ref.meta["copied"] and s.ref.meta["device"] == public_url(url) for s in segments)
    assert result.port("image"), "no JPEG of the camera"
    node = result.session.node("cam")
    assert isinstance(node, CameraConnector) and isinstance(node.video_run, PacketRun)
    stats = node.video_run.statistics()
    # A keyframe a JPEG, nothing else (the last few may not have reached the sink).
    assert len(result.port("image")) <= stats["decoded"] <= len(result.port("image")) + 3


def events_of(result: FlowResult, kind: str) -> list[Event]:
    return [e for e in result.events if e.type == kind]


async def fault_run(
    tmp_path: Path, server: RtspServer, name: str, fault: Any, *, after: int = 2
) -> FlowResult:
    """Run a camera flow, apply ``fault(server)`` (blocking, in a thread) once a clip
    was recorded, and go on until ``after`` clips that start after the camera came
    back were recorded."""

    def clips() -> list[Any]:
        return [r for r in MediaSink.received.get("clips", []) if r.port == "video"]

    def enough(events: list[Event]) -> bool:
        back = [e.time for e in events if e.type == "device_restored"]
        return bool(back) and sum(c.ref.meta["start"] >= back[0] - 1 for c in clips()) >= after

    async def apply_fault() -> None:
        while not clips():
            await asyncio.sleep(0.05)
        await asyncio.to_thread(fault, server)

    faulting = asyncio.create_task(apply_fault())
    try:
        return await run_flow(ipcam_flow(name, server.url()), tmp_path, until=enough, timeout=60)
    finally:
        faulting.cancel()


def reboot(server: RtspServer, *, down_s: float = 5.0, mounts: list[Mount] | None = None) -> None:
    server.kill()
    time.sleep(down_s)
    server.restart(mounts)


async def test_a_camera_that_reboots_is_lost_once_restored_once_and_recorded_on(
    tmp_path: Path, rtsp_server: RtspServerFactory
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS)))
    result = await fault_run(tmp_path, server, "reboot", reboot)
    lost, restored = events_of(result, "device_lost"), events_of(result, "device_restored")
    assert len(lost) == 1 and len(restored) == 1
    assert restored[0].data["down_s"] >= 4.5  # it was off for 5 s
    segments = [s.ref.meta for s in result.port("video")]
    marked = [m for m in segments if m.get("discontinuity")]
    assert len(marked) == 1 and marked[0]["gap_s"] >= 4.0
    assert [m["seq"] for m in segments] == list(range(len(segments)))
    after = [
        c
        for c in result.port("video", sink="clips")
        if c.ref.meta["start"] >= marked[0]["captured_at"]
    ]
    assert len(after) >= 2
    for clip in result.port("video", sink="clips"):
        facts = stream_facts(clip.data)
        assert facts["video"]["decoded"] == facts["video"]["packets"]


def stall(server: RtspServer) -> None:
    # Longer than the read timeout by more than what a busy reader may still have
    # buffered when the camera froze.
    server.pause()
    time.sleep(TIMEOUT_S + 4.0)
    server.resume()


async def test_a_camera_that_stalls_times_out_and_is_reconnected(
    tmp_path: Path, rtsp_server: RtspServerFactory
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS, seconds=60)))
    result = await fault_run(tmp_path, server, "stall", stall, after=1)
    lost = events_of(result, "device_lost")
    assert len(lost) == 1 and "nothing received for 2 s" in lost[0].data["error"]
    assert len(events_of(result, "device_restored")) == 1


async def test_a_camera_back_with_another_resolution_starts_new_segments_and_clips(
    tmp_path: Path, rtsp_server: RtspServerFactory
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS)))
    smaller = [Mount(media=rtsp_media("h264", size=(160, 120), fps=FPS))]
    result = await fault_run(
        tmp_path, server, "resize", lambda s: reboot(s, down_s=1.0, mounts=smaller)
    )
    sizes = [(s.ref.meta["width"], s.ref.meta["height"]) for s in result.port("video")]
    assert sizes[0] == (320, 240) and sizes[-1] == (160, 120)
    assert sorted(set(sizes)) == [(160, 120), (320, 240)]
    clips = result.port("video", sink="clips")
    for clip in clips:
        facts = stream_facts(clip.data)  # each clip plays, whole, at one size
        assert facts["video"]["decoded"] == facts["video"]["packets"] > 0
        assert (facts["video"]["width"], facts["video"]["height"]) == (
            clip.ref.meta["width"], clip.ref.meta["height"],
        )  # fmt: skip
    assert (clips[-1].ref.meta["width"], clips[-1].ref.meta["height"]) == (160, 120)


async def test_a_wrong_password_fails_the_flow_naming_the_camera_without_it(
    tmp_path: Path, rtsp_server: RtspServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS), user="admin", password="right"))
    url = server.url(user="admin", password="wr0ng-s3cret")
    session = FlowSession(ipcam_flow("badlogin", url).build(), tmp_path, settings=FAST)
    with pytest.raises(CredentialsRefused) as refused:
        await session.start()
    message = str(refused.value)
    assert f"rtsp://admin@127.0.0.1:{server.port}/cam refused the credentials" in message
    assert "401" in message
    assert "wr0ng-s3cret" not in message + caplog.text


def camera_flow_file(path: Path, name: str, url: str) -> Path:
    """A flow file of a camera at ``url`` recorded into 2 s clips."""
    path.write_text(
        f'[flow]\nname = "{name}"\n\n[[node]]\nid = "cam"\nconnector = "camera"\n'
        f'device = "{url}"\nfps = 1\nsegment_s = 1\ntimeout_s = {TIMEOUT_S}\n'
        "reconnect_base_s = 0.2\nreconnect_max_s = 0.5\n\n"
        '[[node]]\nid = "rec"\nuse = "recorder"\nclip_s = 2\ninputs = { video = "cam.video" }\n'
    )
    return path


async def test_a_camera_password_never_reaches_logs_events_the_api_or_metrics(
    tmp_path: Path, rtsp_server: RtspServerFactory
) -> None:
    """``mediaflow run`` as a user runs it, with a camera URL holding a password; the
    camera reboots once (its loss and return are logged and published as events)."""
    secret = "Sup3r-S3cret"
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS), user="admin", password=secret))
    url = server.url(user="admin", password=secret)
    flow = camera_flow_file(tmp_path / "secret.toml", "secret", url)
    answers: list[str] = []
    async with running_flow(flow, tmp_path / "data") as run, aiohttp.ClientSession() as client:
        await wait_for_emitted(client, run.url, "secret", "cam", "video", 2)
        await asyncio.to_thread(reboot, server, down_s=1.0)
        while not run.logged(b"device_restored"):
            await asyncio.sleep(0.1)
        await wait_for_emitted(client, run.url, "secret", "cam", "video", 4)
        for path in ("/api/flows", "/api/flows/secret", "/metrics", "/live/secret/cam.m3u8"):
            async with client.get(run.url + path) as answer:
                assert answer.status == 200, path
                answers.append(await answer.text())
    text = (b"".join(run.log) + run.output).decode(errors="replace")
    assert run.logged(b"device_lost") and "rtsp://admin@127.0.0.1" in text
    assert "rtsp://admin@127.0.0.1" in answers[1]  # the camera is named, without it
    for seen in (text, *answers):
        assert secret not in seen
    for stored in (tmp_path / "data").rglob("*"):
        assert not stored.is_file() or secret.encode() not in stored.read_bytes(), stored


async def test_the_wall_plays_a_copied_camera_live_with_its_sound(
    tmp_path: Path, rtsp_server: RtspServerFactory, page: Page
) -> None:
    """Chromium's Media Source Extensions take the live parts made of a camera's own
    H.264 (Annex B over RTSP, as MP4 samples) and AAC."""
    server = rtsp_server(Mount(media=rtsp_media("h264", fps=FPS)))
    flow = camera_flow_file(tmp_path / "wall.toml", "wall", server.url())
    video = "[data-widget='cam.video'] video"
    async with running_flow(flow, tmp_path / "data") as run:
        await page.goto(run.url + "/?live=hls")  # the LL-HLS player, not WebRTC
        await page.wait_for_selector(f"{video}[data-live='playing']", timeout=30_000)
        first = await page.eval_on_selector(video, "v => v.currentTime")
        deadline = time.monotonic() + 20  # a second of it played, however busy the machine
        while True:
            await asyncio.sleep(0.5)
            state = await page.eval_on_selector(
                video,
                """v => ({time: v.currentTime, width: v.videoWidth, codecs: v.dataset.codecs,
                          frames: v.getVideoPlaybackQuality().totalVideoFrames,
                          sound: v.webkitAudioDecodedByteCount, error: v.dataset.error || null})""",
            )
            if state["time"] > first + 1.0 or time.monotonic() > deadline:
                break
        errors = page_errors(page)  # before the server stops under the page
    assert state["codecs"].startswith("avc1.") and state["codecs"].endswith(",mp4a.40.2"), state
    assert state["width"] == 320 and state["frames"] > 0 and state["sound"] > 0, state
    assert state["time"] > first + 1.0 and state["error"] is None, state
    assert errors == []


async def test_the_live_view_plays_the_cameras_own_pictures_and_sound(
    tmp_path: Path, rtsp_server: RtspServerFactory
) -> None:
    """The live parts of a copied camera hold its slices as it sent them, and its AAC:
    an HLS player (PyAV reading the init segment and the parts back to back) decodes
    both."""
    media = rtsp_media("h264", fps=FPS)
    server = rtsp_server(Mount(media=media))
    flow = FlowBuilder("livecopy").add(
        "cam", "camera", device=server.url(), segment_s=1, timeout_s=TIMEOUT_S, video=True
    )
    seen: list[bytes] = []
    hub = LiveHub()

    def enough_parts(_: list[Event]) -> bool:
        feed = hub.feed("livecopy", "cam")
        parts = feed.parts if feed is not None else []
        starts = [i for i, part in enumerate(parts) if part.independent]
        if feed is None or feed.init is None or len(starts) < 2:
            return False
        seen[:] = [feed.init, *(part.data for part in parts[starts[0] : starts[-1]])]
        return True

    await run_flow(flow, tmp_path, until=enough_parts, timeout=40, live=hub)
    stream = b"".join(seen)
    assert find_run(h264_slices(stream), h264_slices(media)) is not None
    facts = stream_facts(stream)
    assert facts["video"]["decoded"] == facts["video"]["packets"] >= FPS
    assert facts["audio"]["codec"] == "aac" and facts["audio"]["decoded"] > 0


def test_devices_probe_says_what_a_camera_offers_without_its_password(
    rtsp_server: RtspServerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    server = rtsp_server(
        Mount(media=rtsp_media("h264", fps=FPS), audio="pcmu", user="u", password="pw-0f-cam")
    )
    url = server.url(user="u", password="pw-0f-cam")
    assert cli.main(["devices", "--probe", url, "--listen", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"rtsp://u@127.0.0.1:{server.port}/cam" and "pw-0f-cam" not in out
    assert "h264" in lines[1] and "320x240  15 fps  keyframe every 1.00 s (15 frames)" in lines[1]
    assert lines[1].endswith("-> copied as it is")
    assert (
        lines[2].startswith("  audio  pcm_mulaw  8000 Hz mono")
        and "encoded to AAC once" in lines[2]
    )
