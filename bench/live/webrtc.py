"""The wall over WebRTC: each frame shown, and its capture time found from the flashes.

The LL-HLS player knows each frame's capture time (its part's
``PROGRAM-DATE-TIME``); a WebRTC frame carries only an RTP timestamp, whose origin
aiortc picks at random. The flashes close that gap. :data:`COLLECT` runs in the page:
for every frame the compositor shows (``requestVideoFrameCallback``) it keeps the
frame's ``rtpTimestamp``, its expected display time and the time its last packet was
received (``receiveTime``), both on the wall clock (``performance.timeOrigin`` plus),
and the mean brightness of the flash box, drawn from that frame into a 4x4 canvas.

:func:`derive` then, in Python:

1. unwraps the RTP timestamps to seconds of stream time ``t`` (90 kHz);
2. finds the flash onsets in ``t`` with the A/V check's detector
   (:func:`bench.live.sync.video_onsets`): each is a frame the camera captured at the
   start of a source second ``k``, that is at ``anchor + k`` on the capture clock
   (``anchor`` is the camera's ``captured_at - pts`` from the flow API, as there);
3. takes for ``k`` the last second that began before the frame was received, which
   holds as long as capture to reception is under a second (it is about 0.1 s);
4. so each onset gives the stream's origin on the capture clock,
   ``anchor + k - t``; their median is the origin, and their spread says how well
   they agree (a frame's time in the tens of milliseconds, or a whole second if step 3
   ever failed);
5. every frame's latency is then its display time minus ``origin + t``, and it splits
   into *to the browser* (received - captured: the camera's encoder, the server,
   the network) and *in the browser* (shown - received: jitter buffer, decode,
   render).

:data:`STATS` reads the page's inbound video from ``RTCPeerConnection.getStats`` for
the same split as Chromium sees it (its jitter buffer's mean delay, decode time).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bench.live.flow import BOX
from bench.live.sync import video_onsets

RTP_CLOCK = 90000
RTP_WRAP = 2**32

# Installs the collector on the <video> (idempotent); ``v.mediaflowFrames`` is then
# [rtpTimestamp, shown at (s), received at (s), brightness 0-255] per frame shown.
COLLECT = f"""v => {{
  if (v.mediaflowFrames) {{ v.mediaflowFrames.length = 0; return; }}
  v.mediaflowFrames = [];
  const canvas = document.createElement("canvas");
  canvas.width = 4; canvas.height = 4;
  const ctx = canvas.getContext("2d", {{ willReadFrequently: true }});
  const origin = performance.timeOrigin;
  const shown = (now, meta) => {{
    if (meta.rtpTimestamp !== undefined && meta.receiveTime !== undefined) {{
      ctx.drawImage(v, 0, 0, {BOX}, {BOX}, 0, 0, 4, 4);
      const px = ctx.getImageData(0, 0, 4, 4).data;
      let sum = 0;
      for (let i = 0; i < px.length; i += 4) sum += px[i] + px[i + 1] + px[i + 2];
      v.mediaflowFrames.push([meta.rtpTimestamp, (origin + meta.expectedDisplayTime) / 1000,
        (origin + meta.receiveTime) / 1000, sum / (3 * 16)]);
    }}
    v.requestVideoFrameCallback(shown);
  }};
  v.requestVideoFrameCallback(shown);
}}"""

# The page's peer connection is the player's (whep.js keeps it as ``player.pc``, not
# reachable from the page): the collector looks it up through the video's stream
# instead, so the bench wraps RTCPeerConnection before the page loads (:data:`KEEP_PCS`).
KEEP_PCS = """(() => {
  const Native = window.RTCPeerConnection;
  window.mediaflowPcs = [];
  window.RTCPeerConnection = function (...args) {
    const pc = new Native(...args);
    window.mediaflowPcs.push(pc);
    return pc;
  };
  window.RTCPeerConnection.prototype = Native.prototype;
})();"""

STATS = """async () => {
  const out = [];
  for (const pc of window.mediaflowPcs || []) {
    if (pc.connectionState !== "connected") continue;
    (await pc.getStats()).forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "video") out.push({
        framesDecoded: s.framesDecoded || 0, framesDropped: s.framesDropped || 0,
        jitterBufferDelay: s.jitterBufferDelay || 0,
        jitterBufferEmittedCount: s.jitterBufferEmittedCount || 0,
        totalDecodeTime: s.totalDecodeTime || 0, packetsLost: s.packetsLost || 0,
        nackCount: s.nackCount || 0, pliCount: s.pliCount || 0,
        freezeCount: s.freezeCount || 0,
      });
    });
  }
  return out;
}"""


@dataclass
class Derived:
    """What :func:`derive` found; times in seconds."""

    latencies: list[float] = field(default_factory=list)  # shown - captured, per frame
    to_browser: list[float] = field(default_factory=list)  # received - captured
    in_browser: list[float] = field(default_factory=list)  # shown - received
    flashes: int = 0  # onsets found
    origin_spread: float | None = None  # max - min of the origins they gave
    error: str | None = None


def unwrap(rtp: Sequence[int]) -> np.ndarray:
    """RTP timestamps (32-bit, wrapping) as seconds since the first. Pure."""
    steps = np.mod(np.diff(np.asarray(rtp, dtype=np.int64)), RTP_WRAP)
    steps = np.where(steps >= RTP_WRAP // 2, steps - RTP_WRAP, steps)  # a step back
    return np.concatenate([[0.0], np.cumsum(steps) / RTP_CLOCK])


def derive(frames: Sequence[Sequence[float]], anchor: float) -> Derived:
    """Per-frame latencies from the collector's ``frames`` (module doc) and the camera's
    ``captured_at - pts``. Pure. No flash found gives a result with ``error`` set."""
    if len(frames) < 3:
        return Derived(error=f"{len(frames)} frames shown")
    rows = np.asarray(frames, dtype=np.float64)
    t = unwrap([int(x) for x in rows[:, 0]])
    shown, received, levels = rows[:, 1], rows[:, 2], rows[:, 3]
    onsets = set(video_onsets(t, levels))
    origins = []
    for i in np.flatnonzero([x in onsets for x in t]):
        k = np.floor(received[i] - anchor)  # the last source second begun before it came
        origins.append(anchor + k - t[i])
    if not origins:
        return Derived(error=f"no flash found in {len(frames)} frames shown")
    origin = statistics.median(origins)
    captured = origin + t
    return Derived(
        latencies=(shown - captured).tolist(),
        to_browser=(received - captured).tolist(),
        in_browser=(shown - received).tolist(),
        flashes=len(origins),
        origin_spread=max(origins) - min(origins),
    )
