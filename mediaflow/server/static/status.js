// The status strip (engine, device and storage events as chips, newest first) and
// the transcripts panel (transcripts no widget takes: finished lines listed,
// hypotheses on one live line). Events that come in bursts (an eviction per
// artifact, the cap warning at every check) update one chip instead of pushing the
// others out: "evicted 12 artifacts (34.0 MB)".
"use strict";

(() => {
  const { h, clock } = window.MediaflowWall.dom;
  const { Lines } = window.MediaflowWall.textWidgets;
  const text = window.MediaflowText;
  const MAX_CHIPS = 12;
  const STATUS_EVENTS = { // event type -> how bad it is (the chip's data-level)
    engine_degraded: "bad",
    engine_recovered: "ok",
    device_lost: "bad",
    device_restored: "ok",
    cascade_dropped: "bad",
    queue_unavailable: "bad",
    queue_available: "ok",
    events_dropped: "warn",
    store_over_cap: "warn",
    artifact_evicted: "warn",
    gc_failed: "bad",
  };
  const MERGE_MS = 60_000; // a burst event within this long of its chip updates that chip
  const MERGED = {
    artifact_evicted: (sum, data) => ({ count: (sum.count || 0) + 1,
      bytes: (sum.bytes || 0) + (Number(data.bytes) || 0) }),
    store_over_cap: (_, data) => data, // the latest figures say it all
  };
  const merging = new Map(); // event type -> { node, sum, at }

  function humanBytes(size) { // as the command line prints sizes (mediaflow.gc.format_bytes)
    let value = Number(size) || 0;
    if (value < 1000) return `${Math.round(value)} B`;
    for (const unit of ["KB", "MB", "GB", "TB"]) {
      value /= 1000;
      if (value < 999.95) return `${value.toFixed(1)} ${unit}`;
    }
    return `${(value / 1000).toFixed(1)} PB`;
  }

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
      case "store_over_cap": return `store over cap: ${humanBytes(data.stored_bytes)} of `
        + `${humanBytes(data.max_bytes)}, ${humanBytes(data.live_bytes)} held by live references`;
      case "artifact_evicted": return `evicted ${data.count} artifact${data.count === 1 ? "" : "s"} `
        + `(${humanBytes(data.bytes)})`;
      case "gc_failed": return `sweep failed: ${data.error || "?"}`;
      default: return type;
    }
  }

  function chip(type, data) {
    const strip = document.getElementById("strip");
    const merge = MERGED[type];
    if (merge) {
      const open = merging.get(type);
      const now = Date.now();
      const fresh = open && open.node.isConnected && now - open.at < MERGE_MS;
      const sum = merge(fresh ? open.sum : {}, data);
      const node = fresh ? open.node : h("span", { class: "chip", "data-type": type,
        "data-level": STATUS_EVENTS[type] || "warn" });
      node.textContent = `${clock(data.time)} ${describe(type, sum)}`;
      node.title = JSON.stringify(data);
      merging.set(type, { node, sum, at: now });
      strip.prepend(node); // an existing chip moves to the front
    } else {
      strip.prepend(h("span", { class: "chip", "data-type": type, "data-level": STATUS_EVENTS[type] || "warn",
        title: JSON.stringify(data), text: `${clock(data.time)} ${describe(type, data)}` }));
    }
    while (strip.children.length > MAX_CHIPS) strip.lastElementChild.remove();
  }

  const panel = {
    lines: null, // made when the panel first shows
    live: text.LIVE_IDLE,
  };

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

  window.MediaflowWall.status = Object.freeze({ STATUS_EVENTS, chip, toPanel, humanBytes });
})();
