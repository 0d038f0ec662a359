// A camera live in a <video>: the server's HLS window (/live/{flow}/{node}.m3u8) fed
// to Media Source Extensions part by part (its EXT-X-PART lines). It starts at the
// newest part that begins with a keyframe, asks for the next one with a blocking
// reload (?after=SEQ), and keeps at most BUFFER_KEEP_S behind the playhead. Once the
// parts from that keyframe are in, it seeks to the newest frame; a viewer more than
// maxBehind() behind it (a stalled tab), or whose next part left the window, jumps to
// live again. Latency is the moment a frame is shown minus its capture time: a part's
// capture time (its segment's EXT-X-PROGRAM-DATE-TIME plus the parts before it)
// minus its own decode time (tfdt) is the stream's origin on
// the capture clock, a frame's media time is seconds from that origin, and
// requestVideoFrameCallback says when the compositor shows it (where a browser lacks
// it, the playhead stands in). The sound plays muted until the viewer unmutes it.
"use strict";

(() => {
  const BUFFER_KEEP_S = 10;
  const MAX_BEHIND_S = 1.5; // further from the newest frame than this: jump (0.5 s parts)
  const LIVE_MARGIN_S = 0.25; // where a jump lands, before the newest frame
  const RETRY_MS = 1000;
  const LATENCY_SAMPLES = 3000; // per-frame latencies kept for a benchmark to read
  const PACE_WINDOW_S = 1.5; // the trough of what is buffered ahead, over this long
  // A trough above CATCH_UP_ABOVE_S: play at CATCH_UP_RATE (FAR_RATE above FAR_ABOVE_S,
  // after a stall) until it is below STEADY_BELOW_S. Not lower: each part's sound ends a
  // little before its picture, and a Chromium whose sound runs dry stalls for most of a
  // second before it plays again.
  const CATCH_UP_ABOVE_S = 0.4;
  const STEADY_BELOW_S = 0.25;
  const CATCH_UP_RATE = 1.1;
  const FAR_ABOVE_S = 0.8;
  const FAR_RATE = 1.25;

  // The parts (EXT-X-PART) of the playlist, each with the capture time of its first
  // frame: its segment's EXT-X-PROGRAM-DATE-TIME plus the parts before it.
  function parsePlaylist(text) {
    const parts = [];
    let pdt = null;
    let init = null;
    for (const line of text.split("\n")) {
      if (line.startsWith("#EXT-X-MAP:")) init = /URI="([^"]+)"/.exec(line)[1];
      else if (line.startsWith("#EXT-X-PROGRAM-DATE-TIME:")) pdt = Date.parse(line.slice(25));
      else if (line.startsWith("#EXT-X-PART:")) {
        const uri = /URI="([^"]+)"/.exec(line)[1];
        const duration = parseFloat(/DURATION=([\d.]+)/.exec(line)[1]);
        parts.push({ uri, seq: parseInt(/(\d+)\.m4s$/.exec(uri)[1], 10), pdt, duration,
          independent: line.includes("INDEPENDENT=YES") });
        if (pdt !== null) pdt += duration * 1000;
      }
    }
    return { init, parts };
  }

  // The payload offset of the first box named `name` (4 ASCII letters), or -1.
  function findBox(bytes, name) {
    const codes = [...name].map((c) => c.charCodeAt(0));
    for (let i = 4; i + 4 <= bytes.length; i += 1) {
      if (bytes[i] === codes[0] && bytes[i + 1] === codes[1] && bytes[i + 2] === codes[2]
          && bytes[i + 3] === codes[3]) return i + 4;
    }
    return -1;
  }

  // The codecs of an init segment: H.264 from its avcC, and AAC-LC (what the server
  // encodes a microphone's sound as) when it has a sound track.
  function codecsOf(init) {
    const at = findBox(init, "avcC"); // version, profile, compatibility, level
    const hex = (b) => b.toString(16).padStart(2, "0");
    const video = at < 0 ? "avc1.42e01e" : `avc1.${hex(init[at + 1])}${hex(init[at + 2])}${hex(init[at + 3])}`;
    return findBox(init, "mp4a") < 0 ? video : `${video},mp4a.40.2`;
  }

  function decodeSeconds(part) {
    const at = findBox(part, "tfdt");
    const view = new DataView(part.buffer, part.byteOffset);
    const time = part[at] === 1 ? Number(view.getBigUint64(at + 4)) : view.getUint32(at + 4);
    return time / 90000; // the video track's timescale; the first traf is video's
  }

  class LivePlayer {
    constructor(video, base, badge) {
      this.video = video;
      this.base = base; // "/live/{flow}/{node}"
      this.badge = badge;
      this.stopped = false;
      this.origin = null;
      this.jumps = 0;
      this.appended = 0;
      this.shown = null; // the newest frame shown: when, and how late
      this.aheads = []; // seconds buffered ahead of each frame shown lately
      this.partS = 0; // the longest part seen
    }

    async fetchBytes(path) {
      const resp = await fetch(path, { credentials: "same-origin", cache: "no-store" });
      if (!resp.ok) throw Object.assign(new Error(`${path}: ${resp.status}`), { status: resp.status });
      return new Uint8Array(await resp.arrayBuffer());
    }

    async playlist(after) {
      const query = after === undefined ? "" : `?after=${after}`;
      const resp = await fetch(`${this.base}.m3u8${query}`, { credentials: "same-origin", cache: "no-store" });
      if (!resp.ok) throw Object.assign(new Error(`playlist: ${resp.status}`), { status: resp.status });
      return parsePlaylist(await resp.text());
    }

    url(uri) { return this.base.slice(0, this.base.lastIndexOf("/") + 1) + uri; }

    async start() {
      const listed = await this.playlist();
      const init = await this.fetchBytes(this.url(listed.init));
      const mime = `video/mp4; codecs="${codecsOf(init)}"`;
      this.video.dataset.codecs = codecsOf(init);
      if (!window.MediaSource || !MediaSource.isTypeSupported(mime)) throw new Error(`cannot play ${mime}`);
      this.source = new MediaSource();
      this.video.src = URL.createObjectURL(this.source);
      await new Promise((resolve) => this.source.addEventListener("sourceopen", resolve, { once: true }));
      this.buffer = this.source.addSourceBuffer(mime);
      await this.append(init);
      this.video.muted = true; // autoplay is allowed muted; the controls unmute
      this.video.dataset.live = "playing";
      this.timer = setInterval(() => this.tick(), 250);
      this.watchFrames();
      this.follow(listed);
    }

    async follow(listed) {
      let next = this.newestStart(listed);
      while (!this.stopped) {
        try {
          for (const part of listed.parts.filter((p) => p.seq >= next)) {
            const bytes = await this.fetchBytes(this.url(part.uri));
            const start = decodeSeconds(bytes);
            this.partS = Math.max(this.partS, part.duration);
            this.origin = part.pdt / 1000 - start;
            await this.append(bytes);
            this.appended += 1;
            if (part.seq !== next) this.skipTo(start); // a hole: go on at this part
            next = part.seq + 1;
          }
          if (!this.caughtUp) { // started at a keyframe up to a GOP back: go to the edge
            this.caughtUp = true;
            this.jumpToLive();
          }
          listed = await this.playlist(next - 1);
          if (listed.parts.length && listed.parts[0].seq > next) { // it fell out of the window
            next = this.newestStart(listed);
            this.jumps += 1;
          }
        } catch (err) {
          this.video.dataset.error = String(err.message || err);
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
          listed = await this.playlist().catch(() => ({ parts: [] }));
          next = this.newestStart(listed);
        }
      }
    }

    newestStart(listed) {
      // The newest part that starts with a keyframe: the least latency a player can
      // decode from (the window always begins with one).
      const starts = listed.parts.filter((p) => p.independent);
      return starts.length ? starts[starts.length - 1].seq : 0;
    }

    append(bytes) {
      return new Promise((resolve, reject) => {
        this.buffer.addEventListener("updateend", resolve, { once: true });
        this.buffer.addEventListener("error", reject, { once: true });
        this.buffer.appendBuffer(bytes);
      });
    }

    skipTo(start) { this.video.currentTime = start; this.jumps += 1; }

    jumpToLive() {
      const ranges = this.video.buffered;
      if (ranges.length) this.video.currentTime = Math.max(0, ranges.end(ranges.length - 1) - LIVE_MARGIN_S);
    }

    watchFrames() {
      if (!this.video.requestVideoFrameCallback) return;
      this.video.mediaflowLatencies = [];
      const shown = (now, meta) => {
        if (this.stopped) return;
        if (this.origin !== null) {
          const at = (performance.timeOrigin + meta.expectedDisplayTime) / 1000;
          this.shown = { at, latency: at - (this.origin + meta.mediaTime) };
          const ranges = this.video.buffered;
          if (ranges.length) this.aheads.push({ at, ahead: ranges.end(ranges.length - 1) - meta.mediaTime });
          const samples = this.video.mediaflowLatencies; // for the benchmark
          samples.push(this.shown.latency);
          if (samples.length > LATENCY_SAMPLES) samples.splice(0, samples.length - LATENCY_SAMPLES);
        }
        this.video.requestVideoFrameCallback(shown);
      };
      this.video.requestVideoFrameCallback(shown);
    }

    // Parts arrive every part_s, so what is buffered ahead of the playhead falls to a
    // trough just before each arrives. A trough well above zero is latency for nothing:
    // play a little fast until it is small (hls.js's live sync does the same).
    keepPace() {
      const now = Date.now() / 1000;
      while (this.aheads.length && this.aheads[0].at < now - PACE_WINDOW_S) this.aheads.shift();
      if (this.aheads.length < 5) return;
      const trough = Math.min(...this.aheads.map((a) => a.ahead));
      let rate = this.video.playbackRate;
      if (trough > FAR_ABOVE_S) rate = FAR_RATE;
      else if (trough > CATCH_UP_ABOVE_S || (rate > 1 && trough >= STEADY_BELOW_S)) rate = CATCH_UP_RATE;
      else rate = 1;
      if (rate !== this.video.playbackRate) this.video.playbackRate = rate;
    }

    // Just before a part arrives the playhead is a part and a little behind the newest
    // frame; longer parts (live_part_s) need more room before a jump.
    maxBehind() { return Math.max(MAX_BEHIND_S, 2 * this.partS + 0.5); }

    tick() {
      const ranges = this.video.buffered;
      if (!ranges.length) return;
      const end = ranges.end(ranges.length - 1);
      if (this.video.currentTime < ranges.start(0)) this.video.currentTime = ranges.start(0);
      if (end - this.video.currentTime > this.maxBehind()) { this.jumpToLive(); this.jumps += 1; }
      if (this.video.paused) this.video.play().catch(() => {});
      this.keepPace();
      if (!this.buffer.updating && this.video.currentTime - ranges.start(0) > BUFFER_KEEP_S * 1.5) {
        this.buffer.remove(0, this.video.currentTime - BUFFER_KEEP_S);
      }
      if (this.origin !== null) {
        const now = Date.now() / 1000;
        // A frame shown within the last second says how late it was; a frozen picture
        // is as late as its age.
        const latency = this.shown && now - this.shown.at < 1 ? this.shown.latency
          : now - (this.origin + this.video.currentTime);
        this.video.dataset.latency = latency.toFixed(3);
        this.video.dataset.jumps = String(this.jumps);
        this.badge.textContent = `live · ${latency.toFixed(1)} s`;
      }
    }

    stop() {
      this.stopped = true;
      clearInterval(this.timer);
      this.video.dataset.live = "stopped";
    }
  }

  window.MediaflowWall.live = Object.freeze({ LivePlayer, parsePlaylist });
})();
