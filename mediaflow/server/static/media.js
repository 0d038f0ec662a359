// The widgets of artifact ports: image frames, audio chunks, video clips. Their
// values are artifact refs ({digest, media_type, meta}); two refs with the same
// digest are the same value.
"use strict";

(() => {
  const { h, clock, artifactUrl } = window.MediaflowWall.dom;
  const { Widget } = window.MediaflowWall.widget;
  const MAX_CLIPS = 30;
  const AUDIO_MAX_AHEAD_S = 2.0; // drop chunks rather than fall further behind live

  // One AudioContext for the page, made on first use: by a chunk, or by the
  // "enable sound" click (browsers play sound only after a gesture resumes it).
  let audio = null;
  function audioContext() {
    audio = audio || new AudioContext();
    return audio;
  }

  const sameRef = (a, b) => !!a && !!b && a.digest === b.digest;

  class ImageWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.img = h("img", { alt: `${this.key}: latest frame` });
      this.root.append(this.img);
    }
    same(a, b) { return sameRef(a, b); }
    show(ref) {
      const url = artifactUrl(ref, "image");
      if (!url) return;
      this.img.src = url;
      this.img.dataset.digest = ref.digest;
      const meta = ref.meta || {};
      this.info.textContent = meta.seq !== undefined ? `#${meta.seq}` : clock();
    }
  }

  class AudioWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.level = h("div", { class: "level" });
      this.status = h("span", { text: "waiting for chunks" });
      this.root.append(h("div", { class: "meter", role: "meter", "aria-label": "level" }, this.level),
        this.status);
      this.nextAt = 0;
      this.played = 0;
      this.dropped = 0;
    }
    same(a, b) { return sameRef(a, b); }
    async show(ref) {
      const url = artifactUrl(ref, "audio");
      if (!url) return;
      try {
        const bytes = await (await fetch(url, { credentials: "same-origin" })).arrayBuffer();
        const buffer = await audioContext().decodeAudioData(bytes);
        this.meter(buffer);
        this.enqueue(buffer);
      } catch (err) {
        this.status.textContent = `cannot play: ${err.message || err}`;
      }
    }
    meter(buffer) {
      const samples = buffer.getChannelData(0);
      let sum = 0;
      for (let i = 0; i < samples.length; i += 1) sum += samples[i] * samples[i];
      const rms = Math.sqrt(sum / Math.max(1, samples.length));
      const db = 20 * Math.log10(Math.max(rms, 1e-5)); // -100 .. 0 dBFS
      this.level.style.width = `${Math.max(0, Math.min(100, (db + 60) * (100 / 60)))}%`;
      this.root.dataset.level = rms.toFixed(4);
    }
    enqueue(buffer) {
      // Chunks play back to back on the context's clock; a queue that runs too far
      // ahead of live (a burst, or a stalled tab) drops chunks instead of growing.
      const context = audioContext();
      const now = context.currentTime;
      if (this.nextAt < now) this.nextAt = now + 0.05;
      if (this.nextAt - now > AUDIO_MAX_AHEAD_S) {
        this.dropped += 1;
      } else {
        const source = context.createBufferSource();
        source.buffer = buffer;
        source.connect(context.destination);
        source.start(this.nextAt);
        this.nextAt += buffer.duration;
        this.played += 1;
      }
      const state = context.state === "running" ? "" : " (click “enable sound”)";
      this.status.textContent = `${this.played} chunks queued, ${this.dropped} dropped${state}`;
    }
  }

  // The newest clips as a list of buttons (newest first), one playing in the player;
  // a camera of the serving process plays live instead (live.js) until a clip is
  // clicked, and "live" goes back.
  class VideoWidget extends Widget {
    constructor(flow, node, port, kind, live) {
      super(flow, node, port, kind);
      this.video = h("video", { controls: "", preload: "metadata", playsinline: "" });
      this.clips = h("ol", { class: "clips" });
      this.known = new Set();
      this.badge = h("span", { class: "live-badge", hidden: "" });
      this.toLive = h("button", { type: "button", class: "to-live", hidden: "", text: "live" });
      this.toLive.addEventListener("click", () => this.goLive());
      this.root.querySelector(".title").append(this.badge, this.toLive);
      this.root.append(this.video, this.clips);
      this.port = port;
      this.liveBase = null;
      this.player = null;
      this.setLive(live);
    }
    // The flow view names where a camera plays live once a player can start there.
    setLive(live) {
      if (!live || this.liveBase || this.port !== "video") return;
      this.liveBase = live;
      this.goLive();
    }
    async goLive() {
      if (this.player && !this.player.stopped) {
        this.player.jumpToLive();
        return;
      }
      this.video.removeAttribute("data-digest");
      this.badge.hidden = false;
      this.toLive.hidden = false;
      // WebRTC (whep.js) where the browser and the server can; else LL-HLS (live.js).
      const { whep } = window.MediaflowWall;
      if (whep.supported()) {
        this.player = new whep.WhepPlayer(this.video, this.liveBase.replace(/^\/live\//, "/whep/"), this.badge);
        try {
          await this.player.start();
          return;
        } catch (err) {
          this.player.stop();
          this.video.dataset.whepError = String(err.message || err);
        }
      }
      this.player = new window.MediaflowWall.live.LivePlayer(this.video, this.liveBase, this.badge);
      try {
        await this.player.start();
      } catch (err) {
        this.player.stop();
        this.badge.textContent = `live unavailable: ${err.message || err}`;
      }
    }
    live() { return !!this.player && !this.player.stopped; }
    same(a, b) { return sameRef(a, b); }
    show(ref) {
      const url = artifactUrl(ref, "video");
      if (!url || this.known.has(ref.digest)) return;
      this.known.add(ref.digest);
      const meta = ref.meta || {};
      const label = meta.duration ? `${Number(meta.duration).toFixed(1)} s` : clock(meta.captured_at);
      const button = h("button", { type: "button", "data-digest": ref.digest, "aria-pressed": "false",
        text: `clip ${this.known.size} · ${label}` });
      button.addEventListener("click", () => this.play(url, button, true));
      this.clips.prepend(h("li", {}, button));
      while (this.clips.children.length > MAX_CLIPS) this.clips.lastElementChild.remove();
      // Follow the newest clip only while the viewer is not watching one, or live.
      if (this.live()) return;
      if (!this.video.getAttribute("src") || this.video.paused) this.play(url, button, false);
    }
    play(url, button, start) {
      if (this.live()) {
        this.player.stop();
        this.badge.textContent = "recorded";
      }
      for (const other of this.clips.querySelectorAll("button")) other.setAttribute("aria-pressed", "false");
      button.setAttribute("aria-pressed", "true");
      this.video.dataset.digest = button.dataset.digest;
      this.video.src = url;
      if (start) this.video.play().catch(() => {});
    }
  }

  window.MediaflowWall.media = Object.freeze({ ImageWidget, AudioWidget, VideoWidget, audioContext });
})();
