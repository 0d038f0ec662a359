"""GStreamer's WebRTC stack (``webrtcbin``) as a WHEP viewer or a WHIP publisher.

A third client beside Chromium and aiortc, written in C, whose DTLS certificate is
RSA: the one ``whepsrc`` and ``whipsink`` (GStreamer's WHEP and WHIP elements, not in
Debian) wrap. Run by ``tests/test_webrtc_gstreamer.py`` with Debian's
``/usr/bin/python3`` (the project's venv has no ``gi``)::

    /usr/bin/python3 tests/gst_webrtc_client.py whep URL SECONDS
    /usr/bin/python3 tests/gst_webrtc_client.py whip URL SECONDS TOKEN

It offers (``recvonly`` H.264 and Opus to view; ``sendonly`` VP8 and Opus of
``videotestsrc`` and a 440 Hz ``audiotestsrc`` to publish) with its host candidates
gathered first, POSTs the offer, applies the 201's answer, and after ``SECONDS``
connected DELETEs its ``Location``. A viewer decodes what it receives
(``decodebin``: FFmpeg's H.264 decoder through ``gstreamer1.0-libav``, ``opusdec``).
It prints one JSON line: the HTTP status, the connection's state, the frames
decoded (viewer) or sent (publisher) per medium, the picture's size, and any error.
Exit status 0 when it connected, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
from gi.repository import GLib, Gst, GstWebRTC  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.live.gst_send import Offerer  # noqa: E402

CONNECT_S = 15.0
VIEW_CAPS = (
    "application/x-rtp,media=video,encoding-name=H264,payload=96,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42e01f",
    "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000",
)
PUBLISH = (
    "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=15/1"
    " ! vp8enc deadline=1 ! rtpvp8pay pt=96 ! identity name=video_sent ! webrtc. "
    "audiotestsrc is-live=true wave=sine freq=440 ! audio/x-raw,rate=48000,channels=1"
    " ! opusenc ! rtpopuspay pt=111 ! identity name=audio_sent ! webrtc. "
    "webrtcbin name=webrtc bundle-policy=max-bundle"
)


class Client:
    def __init__(self, mode: str, url: str, token: str | None) -> None:
        self.mode, self.url, self.token = mode, url, token
        self.result: dict[str, Any] = {"frames": {"video": 0, "audio": 0}}
        self.location: str | None = None
        self.loop = GLib.MainLoop()
        if mode == "whep":
            self.pipeline = Gst.Pipeline.new("viewer")
            self.webrtc = Gst.ElementFactory.make("webrtcbin", "webrtc")
            self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
            self.pipeline.add(self.webrtc)
            recvonly = GstWebRTC.WebRTCRTPTransceiverDirection.RECVONLY
            for caps in VIEW_CAPS:
                self.webrtc.emit("add-transceiver", recvonly, Gst.Caps.from_string(caps))
            self.webrtc.connect("pad-added", self._received)
        else:
            self.pipeline = Gst.parse_launch(PUBLISH)
            self.webrtc = self.pipeline.get_by_name("webrtc")
            sendonly = GstWebRTC.WebRTCRTPTransceiverDirection.SENDONLY
            for index in range(2):
                self.webrtc.emit("get-transceiver", index).set_property("direction", sendonly)
            for kind in ("video", "audio"):
                pad = self.pipeline.get_by_name(f"{kind}_sent").get_static_pad("src")
                pad.add_probe(Gst.PadProbeType.BUFFER, self._counter(kind))
        self.offerer = Offerer(self.webrtc, self._post, self._fail)
        self.webrtc.connect("on-negotiation-needed", lambda _: self.offerer.create())
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self._error)

    def _counter(self, kind: str) -> Any:
        def count(*_: Any) -> Gst.PadProbeReturn:
            self.result["frames"][kind] += 1
            return Gst.PadProbeReturn.OK

        return count

    def _received(self, _: Any, pad: Gst.Pad) -> None:
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        decode = Gst.ElementFactory.make("decodebin")
        decode.connect("pad-added", self._decoded)
        self.pipeline.add(decode)
        decode.sync_state_with_parent()
        pad.link(decode.get_static_pad("sink"))

    def _decoded(self, _: Any, pad: Gst.Pad) -> None:
        caps = pad.get_current_caps() or pad.query_caps(None)
        structure = caps.get_structure(0)
        kind = "video" if structure.get_name().startswith("video/") else "audio"
        if kind == "video":
            self.result["size"] = [structure.get_value("width"), structure.get_value("height")]
        sink = Gst.ElementFactory.make("fakesink")
        sink.set_property("sync", False)
        self.pipeline.add(sink)
        sink.sync_state_with_parent()
        pad.link(sink.get_static_pad("sink"))
        pad.add_probe(Gst.PadProbeType.BUFFER, self._counter(kind))

    def _post(self, offer: str) -> None:
        headers = {"Content-Type": "application/sdp"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.url, data=offer.encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                self.result["status"] = response.status
                self.location = response.headers.get("Location")
                answer = response.read().decode()
        except urllib.error.HTTPError as error:
            self.result["status"] = error.code
            self._fail(f"the offer was answered {error.code}: {error.read()[:200]!r}")
            return
        self.offerer.answer(answer)
        self.result["answer_setup"] = [
            line.strip() for line in answer.splitlines() if line.startswith("a=setup:")
        ][:1]

    def _error(self, _: Any, message: Gst.Message) -> None:
        error, debug = message.parse_error()
        self._fail(f"{error.message} ({debug})")

    def _fail(self, reason: str) -> None:
        self.result.setdefault("error", reason)
        self.loop.quit()

    def run(self, seconds: float) -> int:
        self.pipeline.set_state(Gst.State.PLAYING)
        started = time.monotonic()

        def check() -> bool:
            state = self.webrtc.get_property("connection-state")
            connected = state == GstWebRTC.WebRTCPeerConnectionState.CONNECTED
            if connected and "connected_s" not in self.result:
                self.result["connected_s"] = round(time.monotonic() - started, 3)
                GLib.timeout_add(int(seconds * 1000), self.loop.quit)
            if state == GstWebRTC.WebRTCPeerConnectionState.FAILED:
                self._fail("the connection failed")
            elif not connected and time.monotonic() - started > CONNECT_S:
                self._fail(f"not connected in {CONNECT_S:g} s ({state.value_nick})")
            return "error" not in self.result

        GLib.timeout_add(100, check)
        self.loop.run()
        self.result["state"] = self.webrtc.get_property("connection-state").value_nick
        self.pipeline.set_state(Gst.State.NULL)
        if self.location is not None:
            end = urllib.parse.urljoin(self.url, self.location)
            headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
            request = urllib.request.Request(end, headers=headers, method="DELETE")
            try:
                with urllib.request.urlopen(request, timeout=15) as response:
                    self.result["deleted"] = response.status
            except urllib.error.HTTPError as error:
                self.result["deleted"] = error.code
        print(json.dumps(self.result), flush=True)
        return 0 if "connected_s" in self.result else 1


def main() -> int:
    if len(sys.argv) not in (4, 5) or sys.argv[1] not in ("whep", "whip"):
        print(__doc__, file=sys.stderr)
        return 2
    Gst.init(None)
    token = sys.argv[4] if len(sys.argv) == 5 else None
    return Client(sys.argv[1], sys.argv[2], token).run(float(sys.argv[3]))


if __name__ == "__main__":
    raise SystemExit(main())
