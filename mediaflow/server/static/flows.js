// The flows on the wall: one section per flow, one widget per output port, and
// where each value that arrives goes.
//
// Each value reaches the wall one way. A flow running in this server sends its
// values as `latest` events ({flow, node, port, value, seq, item?}), each once it
// is durable; the stream starts with every port's current value (sse.py), so the
// polls of GET /api/flows/{flow} only make its widgets (events do not say a
// port's kind) and show its status. A flow not running here (another process's,
// or a stored one) has no events: its values come with the polls. A value that
// comes before its widget waits for it. A transcript event that names a port is
// that port's value (it comes as `latest`); one that names none goes to a text
// port of its node (text.js) or the transcripts panel.
"use strict";

(() => {
  const { h, getJson, report } = window.MediaflowWall.dom;
  const { ValueWidget } = window.MediaflowWall.widget;
  const { ImageWidget, AudioWidget, VideoWidget } = window.MediaflowWall.media;
  const { MAX_LINES, TextWidget, LiveTextWidget, asText, isTextWidget } = window.MediaflowWall.textWidgets;
  const { toPanel } = window.MediaflowWall.status;
  const text = window.MediaflowText;

  const WIDGETS = { image: ImageWidget, audio: AudioWidget, video: VideoWidget, text: TextWidget };
  const widgetClass = (port, kind) =>
    (kind === "text" && text.isLivePort(port) ? LiveTextWidget : WIDGETS[kind] || ValueWidget);

  const WEBRTC = "connectors.webrtc:WebRTCConnector"; // its nodes get publish.js's button
  const flows = new Map(); // name -> FlowView
  const unlisted = new Map(); // flow -> values that came before the flow was listed

  class FlowView {
    constructor(name, waiting = new Map()) {
      this.name = name;
      this.widgets = new Map();
      this.waiting = waiting; // "node.port" -> {node, port, value, ident}: no widget yet
      this.applied = false;
      this.run = 1; // bumped by each run_started: emission seqs start again
      this.early = []; // transcript events that came before the first poll
      this.badge = h("span", { class: "badge" });
      this.grid = h("div", { class: "widgets" });
      // Flow control (control.js): its status in the title, its buttons below it.
      const control = window.MediaflowWall.control;
      this.controls = control ? new control.FlowControls(name) : null;
      const title = h("h2", {}, h("span", { text: name }), this.badge);
      this.root = h("section", { class: "flow", "data-flow": name }, title);
      if (this.controls) {
        title.append(this.controls.statusLine);
        this.root.append(this.controls.root);
      }
      this.root.append(this.grid);
      // Recordings (timeline.js): a panel per recorder node, in the grid beside the live view.
      const timeline = window.MediaflowWall.timeline;
      this.recordings = timeline ? new timeline.Recordings(name, this.grid) : null;
      this.publishers = new Set(); // webrtc nodes given a "use this device's camera" button
    }
    apply(view) {
      let backlog = 0;
      for (const node of view.nodes) {
        backlog += node.backlog ? node.backlog.items : 0;
        for (const [port, info] of Object.entries(node.outputs)) this.widget(node.id, port, info.kind, node.live);
        if (view.live && node.class === WEBRTC && !this.publishers.has(node.id)) { // publish.js
          this.publishers.add(node.id);
          this.grid.append(window.MediaflowWall.publish.button(this.name, node.id));
        }
      }
      // Values once every widget is there: a node's finished line must reach its live line.
      for (const [key, { node, port, value, ident }] of [...this.waiting]) {
        if (this.widgets.has(key)) this.offer(node, port, value, ident);
      }
      if (!view.live) { // no events carry this flow's values: the poll is their one way
        for (const node of view.nodes) {
          for (const [port, info] of Object.entries(node.outputs)) this.offer(node.id, port, info.latest, info);
        }
      }
      this.badge.textContent = `${view.live ? "live" : "stored"} · backlog ${backlog}`;
      if (this.controls) this.controls.setStatus(view.status ?? null);
    }
    widget(node, port, kind, live) {
      const key = `${node}.${port}`;
      let widget = this.widgets.get(key);
      if (!widget) {
        widget = new (widgetClass(port, kind))(this.name, node, port, kind, live);
        this.widgets.set(key, widget);
        this.grid.append(widget.root);
      } else if (live && widget.setLive) {
        widget.setLive(live); // the camera became watchable after the widget was made
      }
      return widget;
    }
    // A port's value (from a poll or a `latest` event, with its emission's
    // identity `ident`: {seq?, item?}) to its widget, if it has one.
    offer(node, port, value, ident = {}) {
      const key = `${node}.${port}`;
      const widget = this.widgets.get(key);
      if (value === null || value === undefined) return;
      if (!widget) { this.waiting.set(key, { node, port, value, ident }); return; }
      this.waiting.delete(key);
      if (isTextWidget(widget)) {
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
      return [...this.widgets.values()].filter((w) => w.key.startsWith(`${node}.`) && isTextWidget(w));
    }
    // A transcript event to the widget of its port; false if it has none.
    transcript(data) {
      if (!this.applied) { // its widgets come with the first poll: keep it until then
        this.early.push(data);
        if (this.early.length > MAX_LINES) this.early.shift();
        return true;
      }
      if (typeof data.port === "string" && this.widgets.has(`${data.node}.${data.port}`)) {
        return true; // the port's value: it comes as a `latest` event once durable
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
      // Widgets are made from a poll (events do not say a port's kind).
      const view = await getJson(`/api/flows/${encodeURIComponent(this.name)}`);
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
        const view = new FlowView(summary.name, unlisted.get(summary.name));
        unlisted.delete(summary.name);
        flows.set(summary.name, view);
        main.querySelector(".empty")?.remove();
        main.append(view.root);
        await view.poll().catch(report);
        view.recordings?.refresh().catch(report);
      }
    }
  }

  async function pollAll() {
    await Promise.all([...flows.values()].map((flow) => flow.poll().catch(report)));
  }

  // A `latest` event: a value of a flow running here, once durable.
  function latest(data) {
    const flow = flows.get(data.flow);
    if (flow) { flow.offer(data.node, data.port, data.value, data); return; }
    if (typeof data.flow !== "string") return;
    const waiting = unlisted.get(data.flow) || new Map();
    const { node, port, value } = data;
    unlisted.set(data.flow, waiting.set(`${node}.${port}`, { node, port, value, ident: data }));
    refreshFlows().catch(report);
  }

  // Transcripts that came before the first flow listing: they may be a widget's.
  const early = [];
  let listedOnce = false;

  function transcript(data) {
    if (typeof data.text !== "string" || !data.text) return;
    if (!listedOnce) {
      early.push(data);
      if (early.length > MAX_LINES) early.shift();
      return;
    }
    const flow = flows.get(data.flow);
    if (flow && typeof data.node === "string" && flow.transcript(data)) return;
    toPanel(data);
  }

  // The first flow listing came (or failed): transcripts kept till now go to their place.
  function listed() {
    if (listedOnce) return;
    listedOnce = true;
    for (const data of early.splice(0)) transcript(data);
  }

  window.MediaflowWall.flows = Object.freeze({ flows, refreshFlows, pollAll, latest, transcript, listed });
})();
