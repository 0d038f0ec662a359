"""The WebRTC peer's sender: GStreamer's ``webrtcbin``, one per viewer, fed one stream.

Run by :mod:`bench.live.gst_peer` with Debian's ``/usr/bin/python3`` (the project's
venv has no ``gi``), so it imports only ``gi`` and the standard library::

    /usr/bin/python3 bench/live/gst_send.py CLIP

``CLIP`` is a Matroska file with H.264 video and Opus sound. It is read once, in real
time (``clocksync``), packetized once (``rtph264pay`` with payloads of at most 1,200
bytes, as mediaflow's; ``rtpopuspay``) and split by a ``tee`` per medium: every
viewer's ``webrtcbin`` gets the same RTP, as every mediaflow viewer gets the same
payloads. Each ``webrtcbin`` then does in C what a mediaflow viewer's sender does in
Python: its own RTP header rewrite, SRTP (libsrtp), RTCP, ICE (libnice) and DTLS.

Signalling is one JSON object per line: on stdout ``{"ready": true}`` once the
pipeline plays, then for each ``{"add": ID}`` read from stdin an offer (``sendonly``
video and sound, bundled, its host candidates gathered first) as ``{"offer": ID,
"sdp": ...}``; ``{"answer": ID, "sdp": ...}`` completes that viewer. ``{"done":
true}`` on stdout when the file ended. The end of stdin stops it (exit status 0); a
pipeline error exits with 1, its reason on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC  # noqa: E402

PAYLOAD = 1200  # bench.live.floor's, mediaflow.live.rtp.MAX_PAYLOAD
MTU = PAYLOAD + 12  # rtph264pay counts the RTP header in its MTU
STDIN = 0
# The profile the offer names: aiortc answers only constrained baseline (42e01f), and
# mediaflow's own answers (aiortc's) name it too, whatever profile x264 encoded.
PROFILE = "42e01f"

PIPELINE = (
    'filesrc location="{clip}" ! matroskademux name=demux '
    "demux.video_0 ! queue ! h264parse config-interval=-1 "
    f"! rtph264pay config-interval=-1 pt=96 mtu={MTU} aggregate-mode=zero-latency "
    f"! capssetter caps=application/x-rtp,profile-level-id=(string){PROFILE} "
    "! clocksync ! tee name=video allow-not-linked=true "
    "demux.audio_0 ! queue ! opusparse ! rtpopuspay pt=111 "
    "! clocksync ! tee name=audio allow-not-linked=true"
)


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Offerer:
    """A ``webrtcbin``'s offer, handed to ``on_offer`` with its host candidates once
    they are all gathered (non-trickle), and the answer applied to it. ``on_failure``
    hears why an offer could not be made. Shared with the tests' GStreamer client
    (``tests/gst_webrtc_client.py``)."""

    def __init__(
        self,
        webrtc: Gst.Element,
        on_offer: Callable[[str], None],
        on_failure: Callable[[str], None],
    ) -> None:
        self.webrtc = webrtc
        self.on_offer, self.on_failure = on_offer, on_failure
        self.candidates: list[tuple[int, str]] = []
        self.offer: str | None = None
        webrtc.connect("on-ice-candidate", self._candidate)
        webrtc.connect("notify::ice-gathering-state", self._gathering)

    def create(self) -> None:
        promise = Gst.Promise.new_with_change_func(self._offered, None)
        self.webrtc.emit("create-offer", None, promise)

    def _offered(self, promise: Gst.Promise, _: Any) -> None:
        reply = promise.get_reply()
        offer = reply.get_value("offer") if reply is not None else None
        if offer is None:
            self.on_failure(f"webrtcbin made no offer: {reply}")
            return
        self.webrtc.emit("set-local-description", offer, Gst.Promise.new())
        self.offer = offer.sdp.as_text()

    def _candidate(self, _: Any, mline: int, candidate: str) -> None:
        self.candidates.append((mline, candidate))

    def _gathering(self, *_: Any) -> None:
        state = self.webrtc.get_property("ice-gathering-state")
        if state == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            GLib.idle_add(self._hand_over)

    def _hand_over(self) -> bool:
        if self.offer is None:
            return True  # the offer's promise has not answered yet: try again
        self.on_offer(with_candidates(self.offer, self.candidates))
        return False

    def answer(self, sdp: str) -> None:
        _, message = GstSdp.SDPMessage.new_from_text(sdp)
        answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, message)
        self.webrtc.emit("set-remote-description", answer, Gst.Promise.new())


class Viewer:
    """One viewer's ``webrtcbin``, fed from the tees through a queue per medium."""

    def __init__(self, pipeline: Gst.Pipeline, viewer_id: str) -> None:
        self.pipeline = pipeline
        self.webrtc = Gst.ElementFactory.make("webrtcbin")
        self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        # Its sinks preroll by themselves: the file is not a live source, and a new sink
        # waiting for its first buffer would otherwise hold the whole pipeline in PAUSED.
        self.webrtc.set_property("async-handling", True)
        pipeline.add(self.webrtc)
        queues = []
        for _ in ("video", "audio"):
            queue = Gst.ElementFactory.make("queue")
            queue.set_property("leaky", 2)  # a viewer that falls behind drops, as mediaflow's
            pipeline.add(queue)
            queue.link(self.webrtc)
            queues.append(queue)
        for index, name in enumerate(("video", "audio")):
            transceiver = self.webrtc.emit("get-transceiver", index)
            transceiver.set_property("direction", GstWebRTC.WebRTCRTPTransceiverDirection.SENDONLY)
            # The offer is made from these (the RTP the tee carries), not from caps
            # that reach webrtcbin later.
            caps = pipeline.get_by_name(name).get_static_pad("sink").get_current_caps()
            transceiver.set_property("codec-preferences", caps)
        self.offerer = Offerer(
            self.webrtc,
            lambda sdp: say({"offer": viewer_id, "sdp": sdp}),
            lambda why: print(why, file=sys.stderr),
        )
        self.webrtc.sync_state_with_parent()
        for name, queue in zip(("video", "audio"), queues, strict=True):
            # Linked to the tee only once playing: a branch still flushing would stop
            # the tee, and every viewer with it.
            queue.sync_state_with_parent()
            tee = pipeline.get_by_name(name)
            tee.request_pad_simple("src_%u").link(queue.get_static_pad("sink"))
        self.offerer.create()

    def answer(self, sdp: str) -> None:
        self.offerer.answer(sdp)


def with_candidates(sdp: str, candidates: list[tuple[int, str]]) -> str:
    """``sdp`` with each ``(m-line index, candidate)`` written into its media section
    (non-trickle: the viewer learns them from the offer)."""
    out: list[str] = []
    section = -1
    for line in sdp.splitlines():
        if line.startswith("m="):
            out += [f"a={c}" for m, c in candidates if m == section and section >= 0]
            section += 1
        out.append(line)
    out += [f"a={c}" for m, c in candidates if m == section]
    return "\r\n".join(out) + "\r\n"


def main() -> int:
    Gst.init(None)
    if len(sys.argv) != 2:
        print("usage: gst_send.py CLIP", file=sys.stderr)
        return 2
    pipeline = Gst.parse_launch(PIPELINE.format(clip=sys.argv[1]))
    loop = GLib.MainLoop()
    viewers: dict[str, Viewer] = {}
    status = {"code": 0}

    def on_message(_: Any, message: Gst.Message) -> None:
        if message.type == Gst.MessageType.ERROR:
            error, debug = message.parse_error()
            print(f"pipeline error: {error.message} ({debug})", file=sys.stderr)
            status["code"] = 1
            loop.quit()
        elif message.type == Gst.MessageType.EOS:
            say({"done": True})
        elif (
            message.type == Gst.MessageType.STATE_CHANGED
            and message.src is pipeline
            and message.parse_state_changed().newstate == Gst.State.PLAYING
        ):
            say({"ready": True})  # the tees carry RTP: their caps make the offers

    def on_line(_: Any, condition: GLib.IOCondition) -> bool:
        line = sys.stdin.readline()
        if not line:
            loop.quit()
            return False
        command = json.loads(line)
        if "add" in command:
            viewers[command["add"]] = Viewer(pipeline, command["add"])
        elif "answer" in command:
            viewers[command["answer"]].answer(command["sdp"])
        return True

    bus = pipeline.get_bus()
    bus.add_signal_watch()
    bus.connect("message", on_message)
    GLib.io_add_watch(STDIN, GLib.IO_IN | GLib.IO_HUP, on_line)
    pipeline.set_state(Gst.State.PLAYING)
    try:
        loop.run()
    finally:
        pipeline.set_state(Gst.State.NULL)
    return status["code"]


if __name__ == "__main__":
    raise SystemExit(main())
