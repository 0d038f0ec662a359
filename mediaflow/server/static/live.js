// A camera live in a <video>: the server's HLS window (/live/{flow}/{node}.m3u8) fed
// to Media Source Extensions part by part. It starts at the newest part that begins
// with a keyframe, asks for the next one with a blocking reload (?after=SEQ), and
// keeps at most BUFFER_KEEP_S behind the playhead. Once the parts from that keyframe
// are in, it seeks to the newest frame; a viewer more than MAX_BEHIND_S behind it
// (a stalled tab), or whose next part left the window, jumps to live again.
// Latency is now minus the capture time of the frame on screen: a part's
// EXT-X-PROGRAM-DATE-TIME minus its own decode time (tfdt) is the stream's origin
// on the capture clock, and the playhead is seconds from that origin.
"use strict";

(() => {
  const BUFFER_KEEP_S = 10;
  const MAX_BEHIND_S = 1.5; // further from the newest frame than this: jump
  const LIVE_MARGIN_S = 0.25; // where a jump lands, before the newest frame
  const RETRY_MS = 1000;

  function parsePlaylist(text) {
    const parts = [];
    let pdt = null;
    let duration = 0;
    let init = null;
    let independent = false;
    for (const line of text.split("\n")) {
      if (line === "#X-MEDIAFLOW-INDEPENDENT") independent = true;
      else if (line.startsWith("#EXT-X-MAP:")) init = /URI="([^"]+)"/.exec(line)[1];
      else if (line.startsWith("#EXT-X-PROGRAM-DATE-TIME:")) pdt = Date.parse(line.slice(25));
      else if (line.startsWith("#EXTINF:")) duration = parseFloat(line.slice(8));
      else if (line && !line.startsWith("#")) {
        parts.push({ uri: line, seq: parseInt(/(\d+)\.m4s$/.exec(line)[1], 10), pdt, duration,
          independent });
        independent = false;
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

  function codecOf(init) {
    const at = findBox(init, "avcC"); // version, profile, compatibility, level
    const hex = (b) => b.toString(16).padStart(2, "0");
    return at < 0 ? "avc1.42e01e" : `avc1.${hex(init[at + 1])}${hex(init[at + 2])}${hex(init[at + 3])}`;
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
      const mime = `video/mp4; codecs="${codecOf(init)}"`;
      if (!window.MediaSource || !MediaSource.isTypeSupported(mime)) throw new Error(`cannot play ${mime}`);
      this.source = new MediaSource();
      this.video.src = URL.createObjectURL(this.source);
      await new Promise((resolve) => this.source.addEventListener("sourceopen", resolve, { once: true }));
      this.buffer = this.source.addSourceBuffer(mime);
      await this.append(init);
      this.video.muted = true; // autoplay is allowed muted; the video has no sound yet
      this.video.dataset.live = "playing";
      this.timer = setInterval(() => this.tick(), 250);
      this.follow(listed);
    }

    async follow(listed) {
      let next = this.newestStart(listed);
      while (!this.stopped) {
        try {
          for (const part of listed.parts.filter((p) => p.seq >= next)) {
            const bytes = await this.fetchBytes(this.url(part.uri));
            const start = decodeSeconds(bytes);
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

    tick() {
      const ranges = this.video.buffered;
      if (!ranges.length) return;
      const end = ranges.end(ranges.length - 1);
      if (this.video.currentTime < ranges.start(0)) this.video.currentTime = ranges.start(0);
      if (end - this.video.currentTime > MAX_BEHIND_S) { this.jumpToLive(); this.jumps += 1; }
      if (this.video.paused) this.video.play().catch(() => {});
      if (!this.buffer.updating && this.video.currentTime - ranges.start(0) > BUFFER_KEEP_S * 1.5) {
        this.buffer.remove(0, this.video.currentTime - BUFFER_KEEP_S);
      }
      if (this.origin !== null) {
        const latency = Date.now() / 1000 - (this.origin + this.video.currentTime);
        this.video.dataset.latency = latency.toFixed(3);
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
