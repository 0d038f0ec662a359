// "Use this device's camera": publish this browser's camera and microphone into a
// flow's WebRTC node over WHIP (POST /whip/{flow}/{node} with the SDP offer; DELETE
// on the answer's Location hangs up). ICE candidates travel in the SDP: the offer is
// sent once gathering is complete, no trickle.
//
// Credentials: the token the wall keeps for writes (control.js, sessionStorage), or
// the wall link's cookie, which the server takes for this one write.
// `MediaflowWall.publish.start(flow, node)` is the API (tests call it too);
// `button(flow, node)` makes the toggle the wall shows beside a webrtc node.
"use strict";

(() => {
  const { h, report } = window.MediaflowWall.dom;
  const KEY = "mediaflow-token";
  const GATHER_MS = 3000; // host candidates come in milliseconds; never wait forever

  function gathered(pc) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
      pc.addEventListener("icegatheringstatechange", done);
      setTimeout(resolve, GATHER_MS);
    });
  }

  async function start(flow, node, constraints = { video: true, audio: true }) {
    const stream = await navigator.mediaDevices.getUserMedia(constraints);
    const pc = new RTCPeerConnection({ iceServers: [] });
    for (const track of stream.getTracks()) pc.addTransceiver(track, { direction: "sendonly", streams: [stream] });
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    const headers = { "Content-Type": "application/sdp" };
    const token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const path = `/whip/${encodeURIComponent(flow)}/${encodeURIComponent(node)}`;
    const answer = await fetch(path, { method: "POST", headers, body: pc.localDescription.sdp, credentials: "same-origin" });
    if (answer.status !== 201) {
      pc.close();
      for (const track of stream.getTracks()) track.stop();
      const detail = await answer.json().catch(() => ({}));
      throw new Error(`publishing refused: ${answer.status} ${detail.error || ""}`);
    }
    const location = answer.headers.get("Location");
    await pc.setRemoteDescription({ type: "answer", sdp: await answer.text() });
    return {
      location,
      pc,
      async stop() {
        pc.close();
        for (const track of stream.getTracks()) track.stop();
        await fetch(location, { method: "DELETE", headers, credentials: "same-origin" }).catch(() => null);
      },
    };
  }

  function button(flow, node) {
    let session = null;
    const el = h("button", { type: "button", class: "publish", title: `Publish this device's camera and microphone into ${node}` }, "use this device's camera");
    el.addEventListener("click", async () => {
      el.disabled = true;
      try {
        if (session) {
          await session.stop();
          session = null;
        } else {
          session = await start(flow, node);
        }
      } catch (err) {
        report(err);
      } finally {
        el.disabled = false;
        el.textContent = session ? "stop publishing" : "use this device's camera";
      }
    });
    return el;
  }

  window.MediaflowWall.publish = { start, button };
})();
