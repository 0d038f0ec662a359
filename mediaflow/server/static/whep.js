// A camera live over WebRTC (WHEP, /whep/{flow}/{node}): the browser offers to receive
// video and sound, with its ICE candidates gathered first (the server does not trickle),
// POSTs the offer and plays the answer's tracks in the <video>. The picture is the
// camera's own H.264, as the server's live feed has it. Ending the player (a clip
// clicked, the page left) DELETEs the session. A browser without RTCPeerConnection, a
// server without WebRTC (501), a full camera (503) or no picture within FIRST_FRAME_MS
// make start() throw: the wall then plays the LL-HLS view (live.js) instead. The wall
// opened as /?live=hls plays LL-HLS only.
"use strict";

(() => {
  const GATHER_MS = 3000; // host candidates on a LAN take milliseconds
  const FIRST_FRAME_MS = 8000; // the next keyframe: a camera's group of pictures or less

  function supported() {
    const asked = new URLSearchParams(window.location.search).get("live");
    return asked !== "hls" && typeof window.RTCPeerConnection === "function";
  }

  function gathered(pc) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        if (pc.iceGatheringState !== "complete") return;
        pc.removeEventListener("icegatheringstatechange", done);
        resolve();
      };
      pc.addEventListener("icegatheringstatechange", done);
      setTimeout(resolve, GATHER_MS); // offer what was gathered so far
    });
  }

  function firstFrame(video) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no WebRTC picture in time")), FIRST_FRAME_MS);
      const check = () => {
        if (video.videoWidth > 0) { clearTimeout(timer); resolve(); } else setTimeout(check, 100);
      };
      check();
    });
  }

  class WhepPlayer {
    constructor(video, url, badge) {
      this.video = video;
      this.url = url; // "/whep/{flow}/{node}"
      this.badge = badge;
      this.stopped = false;
      this.pc = null;
      this.location = null;
      this.onLeave = () => this.stop();
    }

    async start() {
      if (!supported()) throw new Error("this browser has no WebRTC");
      const pc = new RTCPeerConnection({ iceServers: [] });
      this.pc = pc;
      pc.addTransceiver("video", { direction: "recvonly" });
      pc.addTransceiver("audio", { direction: "recvonly" });
      const stream = new MediaStream();
      pc.addEventListener("track", (event) => stream.addTrack(event.track));
      pc.addEventListener("connectionstatechange", () => {
        if (pc.connectionState === "failed") this.video.dataset.error = "WebRTC connection failed";
      });
      await pc.setLocalDescription(await pc.createOffer());
      await gathered(pc);
      const resp = await fetch(this.url, {
        method: "POST", credentials: "same-origin", cache: "no-store",
        headers: { "Content-Type": "application/sdp" }, body: pc.localDescription.sdp,
      });
      if (resp.status !== 201) throw new Error(`WebRTC offer: ${resp.status}`);
      this.location = resp.headers.get("Location");
      await pc.setRemoteDescription({ type: "answer", sdp: await resp.text() });
      window.addEventListener("pagehide", this.onLeave);
      this.video.removeAttribute("src");
      this.video.muted = true; // autoplay is allowed muted; the controls unmute
      this.video.srcObject = stream;
      this.video.dataset.transport = "webrtc";
      this.video.play().catch(() => {});
      await firstFrame(this.video);
      this.video.dataset.live = "playing";
      this.badge.textContent = "live · WebRTC";
    }

    jumpToLive() {} // nothing buffers: it is always at the newest frame

    stop() {
      if (this.stopped) return;
      this.stopped = true;
      window.removeEventListener("pagehide", this.onLeave);
      if (this.location) { // keepalive: the DELETE outlives a page being left
        fetch(this.location, { method: "DELETE", credentials: "same-origin", keepalive: true })
          .catch(() => {});
      }
      if (this.pc) this.pc.close();
      if (this.video.srcObject) this.video.srcObject = null;
      delete this.video.dataset.transport;
      this.video.dataset.live = "stopped";
    }
  }

  window.MediaflowWall.whep = Object.freeze({ WhepPlayer, supported });
})();
