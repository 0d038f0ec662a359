// The mediaflow wall: one widget per output port of every flow.
//
// Values arrive two ways. The event stream (/api/events) carries `latest`
// events ({flow, node, port, value}) when the engine publishes them, plus
// transcripts and status events; a flow that has had no `latest` event for a
// while is polled instead (GET /api/flows/{flow} every POLL_MS), so the wall
// works with an engine that does not publish them. No framework, no build
// step; all text goes into the page through textContent, never as HTML.
//
// Text ports: each value is shown once, however many ways it arrives (the
// decisions are pure functions in text.js). A port of finished lines (`asr.text`)
// is a list that only grows, numbered from the first line this page saw and
// keeping the last MAX_LINES (the title says how many went). A port of
// hypotheses (`asr.partial`) is one live line, replaced while the speaker talks,
// gone once the node's next finished line comes or it goes stale. A transcript
// event goes to its port's widget if it has one, else to the transcripts panel.
"use strict";

(() => {
  const POLL_MS = 500;
  const EVENTS_FRESH_MS = 2000; // a flow with a `latest` event this recent is not polled
  const FLOW_LIST_MS = 5000;
  const CLOCK_MS = 250; // how often live lines check whether they went stale
  const MAX_LINES = 100; // lines kept per text widget and in the transcripts panel: the newest
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

  const text = window.MediaflowText;
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
    update(value, _ident) {
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

  // A numbered list that keeps its newest MAX_LINES lines; numbers are explicit
  // elements (an <ol>'s markers clip past 9 in a narrow gutter, and restart at 1
  // when old lines go), counting every line the list was given.
  class Lines {
    constructor(list, info) {
      this.list = list;
      this.info = info;
      this.count = 0;
    }
    add(line) {
      this.count += 1;
      const item = h("li", { "data-n": String(this.count) },
        h("span", { class: "n", text: `${this.count}.` }), h("span", { class: "t", text: line }));
      const follow = this.list.scrollTop + this.list.clientHeight >= this.list.scrollHeight - 4;
      this.list.append(item);
      while (this.list.children.length > MAX_LINES) this.list.firstElementChild.remove();
      const gone = this.count - this.list.children.length;
      if (this.info) {
        this.info.textContent = gone ? `last ${MAX_LINES} of ${this.count} lines` : `${this.count} lines`;
      }
      if (follow) this.list.scrollTop = this.list.scrollHeight; // unless the reader scrolled up
      return item;
    }
  }

  const asText = (value) => (typeof value === "string" ? value : JSON.stringify(value));

  // Finished lines: each emission once, in arrival order.
  class TextWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.list = h("ol", { class: "lines" });
      this.lines = new Lines(this.list, this.info);
      this.entries = []; // what is shown, oldest first: {text, seq?, item?, start?}
      this.root.append(this.list);
    }
    // Returns whether the entry is new (and now shown).
    admit(entry) {
      const shown = text.findShown(this.entries, entry);
      if (shown >= 0) {
        this.entries[shown] = text.merged(this.entries[shown], entry);
        return false;
      }
      this.entries.push(entry);
      if (this.entries.length > MAX_LINES) this.entries.shift();
      this.updates += 1;
      this.root.dataset.updates = String(this.updates);
      const li = this.lines.add(entry.text);
      if (entry.item !== undefined) li.dataset.item = String(entry.item);
      return true;
    }
  }

  // Hypotheses: one line, replaced, gone when the utterance ends.
  class LiveTextWidget extends Widget {
    constructor(...args) {
      super(...args);
      this.state = text.LIVE_IDLE;
      this.line = h("p", { class: "live-line", "aria-live": "polite", hidden: "" });
      this.root.dataset.live = "";
      this.root.append(this.line);
    }
    step(tick) {
      const before = this.state.line;
      this.state = text.live(this.state, tick, Date.now());
      const line = this.state.line;
      if (line === before) return;
      this.line.textContent = line ? line.text : "";
      this.line.hidden = !line;
      if (line && line.item !== undefined) this.line.dataset.item = String(line.item);
      else delete this.line.dataset.item;
      this.root.dataset.state = line ? "speaking" : "idle";
      if (line) {
        this.updates += 1;
        this.root.dataset.updates = String(this.updates);
      }
    }
    admit(entry) { this.step({ type: "partial", entry }); return true; }
    ended(entry) { this.step({ type: "final", entry }); }
    clock() { this.step({ type: "clock" }); }
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
  const widgetClass = (port, kind) =>
    (kind === "text" && text.isLivePort(port) ? LiveTextWidget : WIDGETS[kind] || ValueWidget);

  // -- flows ---------------------------------------------------------------------------

  class FlowView {
    constructor(name) {
      this.name = name;
      this.widgets = new Map();
      this.lastEventAt = 0;
      this.applied = false;
      this.run = 1; // bumped by each run_started: emission seqs start again
      this.early = []; // transcript events that came before the first poll
      this.badge = h("span", { class: "badge" });
      this.grid = h("div", { class: "widgets" });
      this.root = h("section", { class: "flow", "data-flow": name },
        h("h2", {}, h("span", { text: name }), this.badge), this.grid);
    }
    apply(view) {
      let backlog = 0;
      for (const node of view.nodes) {
        backlog += node.backlog ? node.backlog.items : 0;
        for (const [port, info] of Object.entries(node.outputs)) this.widget(node.id, port, info.kind);
      }
      // Values once every widget is there: a node's finished line must reach its live line.
      for (const node of view.nodes) {
        for (const [port, info] of Object.entries(node.outputs)) this.offer(node.id, port, info.latest, info);
      }
      this.badge.textContent = `${view.live ? "live" : "stored"} · backlog ${backlog}`;
    }
    widget(node, port, kind) {
      const key = `${node}.${port}`;
      let widget = this.widgets.get(key);
      if (!widget) {
        widget = new (widgetClass(port, kind))(this.name, node, port, kind);
        this.widgets.set(key, widget);
        this.grid.append(widget.root);
      }
      return widget;
    }
    // A port's value (from a poll or a `latest` event, with its emission's
    // identity `ident`: {seq?, item?}) to its widget, if it has one.
    offer(node, port, value, ident = {}) {
      const widget = this.widgets.get(`${node}.${port}`);
      if (!widget || value === null || value === undefined) return;
      if (widget instanceof TextWidget || widget instanceof LiveTextWidget) {
        this.text(node, widget, {
          text: asText(value),
          seq: Number.isInteger(ident.seq) ? `${this.run}/${ident.seq}` : undefined,
          item: Number.isInteger(ident.item) ? ident.item : undefined,
        });
      } else {
        widget.update(value, ident);
      }
    }
    text(node, widget, entry) {
      // A finished line of a node ends the hypothesis its live ports show.
      if (widget.admit(entry) && widget instanceof TextWidget) {
        for (const other of this.textWidgets(node)) if (other instanceof LiveTextWidget) other.ended(entry);
      }
    }
    textWidgets(node) {
      return [...this.widgets.values()].filter((w) => w.key.startsWith(`${node}.`)
        && (w instanceof TextWidget || w instanceof LiveTextWidget));
    }
    // A transcript event to the widget of its port; false if it has none.
    transcript(data) {
      if (!this.applied) { // its widgets come with the first poll: keep it until then
        this.early.push(data);
        if (this.early.length > MAX_LINES) this.early.shift();
        return true;
      }
      const widgets = this.textWidgets(data.node);
      const port = text.transcriptPort(data, widgets.map((w) => ({
        port: w.key.slice(data.node.length + 1), live: w instanceof LiveTextWidget })));
      const widget = port === null ? null : this.widgets.get(`${data.node}.${port}`);
      if (!widget) return false;
      this.text(data.node, widget, {
        text: data.text,
        item: Number.isInteger(data.item) ? data.item : undefined,
        start: typeof data.start === "number" ? data.start : undefined,
      });
      return true;
    }
    clock() {
      for (const widget of this.widgets.values()) if (widget instanceof LiveTextWidget) widget.clock();
    }
    // Transcripts that came before this flow's widgets did, to their place now.
    settle() {
      for (const data of this.early.splice(0)) if (!this.transcript(data)) toPanel(data);
    }
    async poll() {
      // Widgets are made from a poll (events do not say a port's kind), so the first
      // answer is always applied, however busy the event stream is.
      const started = Date.now();
      if (this.applied && started - this.lastEventAt < EVENTS_FRESH_MS) return;
      const view = await getJson(`/api/flows/${encodeURIComponent(this.name)}`);
      if (this.applied && this.lastEventAt > started) return; // an event overtook it: newer
      this.apply(view);
      if (!this.applied) {
        this.applied = true;
        this.settle();
      }
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

  // Transcripts no widget takes: finished lines listed, hypotheses on one live line.
  const panel = {
    lines: null,
    live: text.LIVE_IDLE,
    early: [], // events that came before the first flow listing: they may be a widget's
    listed: false,
  };

  function transcript(data) {
    if (typeof data.text !== "string" || !data.text) return;
    if (!panel.listed) {
      panel.early.push(data);
      if (panel.early.length > MAX_LINES) panel.early.shift();
      return;
    }
    const flow = flows.get(data.flow);
    if (flow && typeof data.node === "string" && flow.transcript(data)) return;
    toPanel(data);
  }

  function toPanel(data) {
    const root = document.getElementById("transcripts");
    root.hidden = false;
    panel.lines = panel.lines || new Lines(root.querySelector(".transcript-lines"), null);
    const who = [data.flow, data.node].filter(Boolean).join("/");
    const entry = { text: who ? `${who}: ${data.text}` : data.text,
      item: Number.isInteger(data.item) ? data.item : undefined,
      start: typeof data.start === "number" ? data.start : undefined };
    if (data.final === false) {
      panelLive({ type: "partial", entry });
    } else {
      panel.lines.add(entry.text);
      panelLive({ type: "final", entry });
    }
  }

  function panelLive(tick) {
    const before = panel.live.line;
    panel.live = text.live(panel.live, tick, Date.now());
    if (panel.live.line === before) return;
    const line = document.querySelector("#transcripts .live-line");
    line.textContent = panel.live.line ? panel.live.line.text : "";
    line.hidden = !panel.live.line;
  }

  function listed() {
    if (panel.listed) return;
    panel.listed = true;
    for (const data of panel.early.splice(0)) transcript(data);
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
      flow.offer(data.node, data.port, data.value, data);
    });
    on("transcript", transcript);
    on("run_started", (data) => {
      const flow = flows.get(data.flow);
      if (flow) flow.run += 1;
      refreshFlows().catch(report);
    });
    on("run_finished", () => pollAll());
    for (const type of Object.keys(STATUS_EVENTS)) on(type, (data) => chip(type, data));
  }

  function start() {
    document.getElementById("sound").addEventListener("click", () => {
      audio = audio || new AudioContext();
      audio.resume().catch(report);
    });
    connect();
    refreshFlows().then(listed, (err) => { listed(); report(err); });
    setInterval(() => pollAll(), POLL_MS);
    setInterval(() => refreshFlows().catch(report), FLOW_LIST_MS);
    setInterval(() => { for (const flow of flows.values()) flow.clock(); }, CLOCK_MS);
  }

  start();
})();
