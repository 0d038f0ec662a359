// The mediaflow wall: one widget per output port of every flow.
//
// Values arrive two ways. The event stream (/api/events) carries `latest`
// events ({flow, node, port, value}) when the engine publishes them, plus
// transcripts and status events; a flow that has had no `latest` event for a
// while is polled instead (GET /api/flows/{flow} every POLL_MS), so the wall
// works with an engine that does not publish them. No framework, no build
// step; all text goes into the page through textContent, never as HTML.
"use strict";

(() => {
  const POLL_MS = 500;
  const EVENTS_FRESH_MS = 2000; // a flow with a `latest` event this recent is not polled
  const FLOW_LIST_MS = 5000;
  const MAX_LINES = 200;
  const MAX_CHIPS = 12;
  const MAX_CLIPS = 30;
  const AUDIO_MAX_AHEAD_S = 2.0; // drop chunks rather than fall further behind live
  const DIGEST = /^sha256:[0-9a-f]{64}$/;
  const SERVABLE = /^(image|audio|video)\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/;
  const STATUS_EVENTS = {
    engine_degraded: "bad",
    engine_recovered: "ok",
    device_lost: "bad",
    device_restored: "ok",
    cascade_dropped: "bad",
    queue_unavailable: "bad",
    queue_available: "ok",
    events_dropped: "warn",
  };
  const EVENT_TYPES = ["latest", "transcript", "run_started", "run_finished",
    ...Object.keys(STATUS_EVENTS)];

  const flows = new Map(); // name -> FlowView
  let audio = null; // AudioContext, created on first use

  // -- small DOM helpers ---------------------------------------------------------

  function h(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function clock(seconds) {
    const when = seconds ? new Date(seconds * 1000) : new Date();
    return when.toLocaleTimeString();
  }

  function artifactUrl(ref, kind) {
    if (!ref || typeof ref.digest !== "string" || !DIGEST.test(ref.digest)) return null;
    const type = typeof ref.media_type === "string" && SERVABLE.test(ref.media_type.split(";")[0])
      ? ref.media_type.split(";")[0]
      : (kind === "video" ? "video/mp4" : "application/octet-stream");
    return `/artifacts/${ref.digest}?type=${encodeURIComponent(type)}`;
  }

  async function getJson(url) {
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    return response.json();
  }

  // -- widgets -----------------------------------------------------------------------

  class Widget {
    constructor(flow, node, port, kind) {
      this.key = `${node}.${port}`;
      this.kind = kind;
      this.updates = 0;
      this.info = h("span", { class: "info" });
      this.root = h("article", { class: "widget", "data-widget": this.key, "data-kind": kind },
        h("div", { class: "title" }, h("span", { text: `${node}.${port} · ${kind}` }), this.info));
    }
    same(a, b) { return JSON.stringify(a) === JSON.stringify(b); }
    update(value) {
      if (value === null || value === undefined || this.same(value, this.last)) return;
      this.last = value;
      this.updates += 1;
      this.root.dataset.updates = String(this.updates);
      this.show(value);
    }
    show() {}
  }

  class ImageWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.img = h("img", { alt: `${this.key}: latest frame` });
      this.root.append(this.img);
    }
    same(a, b) { return !!a && !!b && a.digest === b.digest; }
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
    same(a, b) { return !!a && !!b && a.digest === b.digest; }
    async show(ref) {
      const url = artifactUrl(ref, "audio");
      if (!url) return;
      try {
        const bytes = await (await fetch(url, { credentials: "same-origin" })).arrayBuffer();
        audio = audio || new AudioContext();
        const buffer = await audio.decodeAudioData(bytes);
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
      const now = audio.currentTime;
      if (this.nextAt < now) this.nextAt = now + 0.05;
      if (this.nextAt - now > AUDIO_MAX_AHEAD_S) {
        this.dropped += 1;
      } else {
        const source = audio.createBufferSource();
        source.buffer = buffer;
        source.connect(audio.destination);
        source.start(this.nextAt);
        this.nextAt += buffer.duration;
        this.played += 1;
      }
      const state = audio.state === "running" ? "" : " (click “enable sound”)";
      this.status.textContent = `${this.played} chunks queued, ${this.dropped} dropped${state}`;
    }
  }

  class VideoWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.video = h("video", { controls: "", preload: "metadata", playsinline: "" });
      this.clips = h("ol", { class: "clips" });
      this.known = new Set();
      this.root.append(this.video, this.clips);
    }
    same(a, b) { return !!a && !!b && a.digest === b.digest; }
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
      // Follow the newest clip only while the viewer is not watching one.
      if (!this.video.getAttribute("src") || this.video.paused) this.play(url, button, false);
    }
    play(url, button, start) {
      for (const other of this.clips.querySelectorAll("button")) other.setAttribute("aria-pressed", "false");
      button.setAttribute("aria-pressed", "true");
      this.video.dataset.digest = button.dataset.digest;
      this.video.src = url;
      if (start) this.video.play().catch(() => {});
    }
  }

  class TextWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.lines = h("ol", { class: "lines" });
      this.root.append(this.lines);
    }
    show(value) { this.line(typeof value === "string" ? value : JSON.stringify(value)); }
    line(text) {
      this.lines.append(h("li", { text }));
      while (this.lines.children.length > MAX_LINES) this.lines.firstElementChild.remove();
      this.lines.scrollTop = this.lines.scrollHeight;
    }
  }

  class ValueWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.pre = h("pre");
      this.root.append(this.pre);
    }
    show(value) {
      this.pre.textContent = typeof value === "string" ? value : JSON.stringify(value, null, 1);
      this.info.textContent = clock();
    }
  }

  const WIDGETS = { image: ImageWidget, audio: AudioWidget, video: VideoWidget, text: TextWidget };

  // -- flows ---------------------------------------------------------------------------

  class FlowView {
    constructor(name) {
      this.name = name;
      this.widgets = new Map();
      this.lastEventAt = 0;
      this.applied = false;
      this.badge = h("span", { class: "badge" });
      this.grid = h("div", { class: "widgets" });
      this.root = h("section", { class: "flow", "data-flow": name },
        h("h2", {}, h("span", { text: name }), this.badge), this.grid);
    }
    apply(view) {
      let backlog = 0;
      for (const node of view.nodes) {
        backlog += node.backlog ? node.backlog.items : 0;
        for (const [port, info] of Object.entries(node.outputs)) {
          const widget = this.widget(node.id, port, info.kind);
          widget.update(info.latest);
        }
      }
      this.badge.textContent = `${view.live ? "live" : "stored"} · backlog ${backlog}`;
    }
    widget(node, port, kind) {
      const key = `${node}.${port}`;
      let widget = this.widgets.get(key);
      if (!widget) {
        widget = new (WIDGETS[kind] || ValueWidget)(this.name, node, port, kind);
        this.widgets.set(key, widget);
        this.grid.append(widget.root);
      }
      return widget;
    }
    async poll() {
      // Widgets are made from a poll (events do not say a port's kind), so the first
      // answer is always applied, however busy the event stream is.
      const started = Date.now();
      if (this.applied && started - this.lastEventAt < EVENTS_FRESH_MS) return;
      const view = await getJson(`/api/flows/${encodeURIComponent(this.name)}`);
      if (this.applied && this.lastEventAt > started) return; // an event overtook it: newer
      this.apply(view);
      this.applied = true;
    }
  }

  async function refreshFlows() {
    const listing = await getJson("/api/flows");
    const main = document.getElementById("flows");
    const empty = main.querySelector(".empty");
    if (empty && listing.flows.length === 0) {
      // Said only once the server answered: before that, the page is still loading.
      empty.replaceChildren("No flows yet. Run one with ",
        h("code", { text: "mediaflow run FLOW.toml --port N" }), ".");
    }
    for (const summary of listing.flows) {
      if (!flows.has(summary.name)) {
        const view = new FlowView(summary.name);
        flows.set(summary.name, view);
        main.querySelector(".empty")?.remove();
        main.append(view.root);
        await view.poll().catch(report);
      }
    }
  }

  async function pollAll() {
    await Promise.all([...flows.values()].map((flow) => flow.poll().catch(report)));
  }

  // -- the status strip and transcripts ----------------------------------------------

  function describe(type, data) {
    const where = [data.flow, data.node].filter(Boolean).join("/");
    switch (type) {
      case "engine_degraded": return `engine degraded: ${data.flow} backlog ${data.backlog}`;
      case "engine_recovered": return `engine recovered (backlog ${data.backlog})`;
      case "device_lost": return `device lost: ${where || data.device || "?"}${data.error ? ` (${data.error})` : ""}`;
      case "device_restored": return `device restored: ${where || data.device || "?"}`;
      case "cascade_dropped": return `dead letter: ${where}${data.reason ? ` — ${data.reason}` : ""}`;
      case "queue_unavailable": return `queue unavailable${data.error ? `: ${data.error}` : ""}`;
      case "queue_available": return "queue available again";
      case "events_dropped": return `missed ${data.missed} events`;
      default: return type;
    }
  }

  function chip(type, data) {
    const strip = document.getElementById("strip");
    strip.prepend(h("span", { class: "chip", "data-type": type, "data-level": STATUS_EVENTS[type] || "warn",
      title: JSON.stringify(data), text: `${clock(data.time)} ${describe(type, data)}` }));
    while (strip.children.length > MAX_CHIPS) strip.lastElementChild.remove();
  }

  function transcript(data) {
    if (typeof data.text !== "string" || !data.text) return;
    const flow = flows.get(data.flow);
    const widget = flow && data.node && [...flow.widgets.values()]
      .find((w) => w.key.startsWith(`${data.node}.`) && w instanceof TextWidget);
    if (widget) {
      widget.line(data.text);
      return;
    }
    const panel = document.getElementById("transcripts");
    panel.hidden = false;
    const lines = panel.querySelector(".transcript-lines");
    const who = [data.flow, data.node].filter(Boolean).join("/");
    lines.append(h("li", { text: who ? `${who}: ${data.text}` : data.text }));
    while (lines.children.length > MAX_LINES) lines.firstElementChild.remove();
  }

  // -- wiring --------------------------------------------------------------------------

  function report(err) {
    console.warn("mediaflow wall:", err);
  }

  function connect() {
    const state = document.getElementById("connection");
    const source = new EventSource(`/api/events?types=${EVENT_TYPES.join(",")}`);
    source.onopen = () => { state.dataset.state = "live"; state.textContent = "live"; };
    source.onerror = () => { state.dataset.state = "polling"; state.textContent = "reconnecting… (polling)"; };
    const on = (type, handler) => source.addEventListener(type, (message) => {
      try { handler(JSON.parse(message.data)); } catch (err) { report(err); }
    });
    on("latest", (data) => {
      const flow = flows.get(data.flow);
      if (!flow) { refreshFlows().catch(report); return; }
      flow.lastEventAt = Date.now();
      const existing = flow.widgets.get(`${data.node}.${data.port}`);
      if (existing) existing.update(data.value);
    });
    on("transcript", transcript);
    on("run_started", () => refreshFlows().catch(report));
    on("run_finished", () => pollAll());
    for (const type of Object.keys(STATUS_EVENTS)) on(type, (data) => chip(type, data));
  }

  function start() {
    document.getElementById("sound").addEventListener("click", () => {
      audio = audio || new AudioContext();
      audio.resume().catch(report);
    });
    connect();
    refreshFlows().catch(report);
    setInterval(() => pollAll(), POLL_MS);
    setInterval(() => refreshFlows().catch(report), FLOW_LIST_MS);
  }

  start();
})();
