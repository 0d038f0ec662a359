// The status strip (engine and device events as chips, newest first) and the
// transcripts panel (transcripts no widget takes: finished lines listed,
// hypotheses on one live line).
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
  };

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

  window.MediaflowWall.status = Object.freeze({ STATUS_EVENTS, chip, toPanel });
})();
