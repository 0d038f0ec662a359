// Recordings on the wall: per recorder node of a flow (GET /api/recordings/{flow}),
// a panel beside the flow's widgets (and so beside the camera's live view) with
// - a timeline of the last hour (10 min, 6 h, 24 h on a click): spans, gaps (not recorded,
//   or evicted), event marks by type, local-time labels, and on hover the time and
//   the snapshot of the nearest event that has one (within 2 % of the window);
// - a player: a click on the timeline plays from that moment across clips
//   (timeline-play.js);
// - the events, newest first (local time, type, snapshot, length, a transcript's
//   words); a click plays from the event's start;
// - an export link (GET /api/recordings/{flow}/{node}/export.mp4?start&end) for a
//   range in two time inputs, set to a minute either side of the last moment played.
// `refresh` reads the timeline again (wall.js calls it every 10 s); the clip playing
// goes on. Errors are shown in the panel's status line.
"use strict";

(() => {
  const { h, getJson, artifactUrl, report } = window.MediaflowWall.dom;
  const draw = window.MediaflowWall.timelineDraw;
  const { RecordingPlayer } = window.MediaflowWall.timelinePlay;
  const ZOOMS = [["10 min", 600], ["1 h", 3600], ["6 h", 21600], ["24 h", 86400]];
  const HOVER_WITHIN = 0.02; // of the window: how near an event's snapshot shows on hover
  const EXPORT_AROUND_S = 60;
  const MAX_EVENTS_LISTED = 100;

  const pad = (n) => String(n).padStart(2, "0");
  // Seconds since the epoch as a datetime-local input's value (local time, to the second).
  function localInput(seconds) {
    const d = new Date(seconds * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T`
      + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  const fromInput = (value) => (value ? new Date(value).getTime() / 1000 : NaN); // read as local

  function lengthLabel(event) {
    return event.length === null || event.length === undefined ? "ongoing" : `${event.length.toFixed(1)} s`;
  }

  class RecorderTimeline {
    constructor(flow, node) {
      this.flow = flow;
      this.node = node;
      this.zoom = 3600; // the last hour until the viewer picks another window
      this.view = null;
      this.range = null;
      this.listed = ""; // the events list drawn, as JSON: redrawn only when it changes
      const base = `/api/recordings/${encodeURIComponent(flow)}/${encodeURIComponent(node)}`;
      this.base = base;
      this.status = h("span", { class: "tl-status", role: "status" });
      this.zooms = ZOOMS.map(([label, seconds]) => {
        const button = h("button", { type: "button", "data-zoom": String(seconds),
          "aria-pressed": String(seconds === this.zoom), text: label });
        button.addEventListener("click", () => this.setZoom(seconds));
        return button;
      });
      this.playhead = h("div", { class: "tl-playhead", hidden: "" });
      this.hoverLine = h("div", { class: "tl-hover-line", hidden: "" });
      this.thumb = h("img", { alt: "", hidden: "" });
      this.hoverTime = h("span");
      this.hover = h("div", { class: "tl-hover", hidden: "" }, this.thumb, this.hoverTime);
      // Pointer only: the events list is the keyboard's way to a moment.
      this.track = h("div", { class: "tl-track", title: "click to play from that moment" },
        this.playhead, this.hoverLine, this.hover);
      this.axis = h("div", { class: "tl-axis" });
      this.video = h("video", { controls: "", preload: "metadata", playsinline: "", class: "tl-video" });
      this.events = h("ol", { class: "tl-events" });
      this.exportPart = this.exporter();
      this.message = h("span", { class: "tl-message", "data-level": "warn" });
      this.root = h("article", { class: "widget recording", "data-recorder": node },
        h("div", { class: "title" }, h("span", { text: `${node} · recording` }),
          h("span", { class: "tl-zooms" }, ...this.zooms)),
        this.track, this.axis, h("div", { class: "tl-line" }, this.status, this.message),
        h("div", { class: "tl-body" }, h("div", { class: "tl-player" }, this.video, this.exportPart),
          this.events));
      this.player = new RecordingPlayer(this.video, {
        onTime: (t) => { if (this.range) draw.place(this.playhead, t, this.range); },
        onMessage: (text) => { this.message.textContent = text; },
      });
      this.track.addEventListener("click", (e) => this.playAt(this.timeAt(e)));
      this.track.addEventListener("mousemove", (e) => this.hovering(this.timeAt(e)));
      this.track.addEventListener("mouseleave", () => { this.hover.hidden = true; this.hoverLine.hidden = true; });
    }

    exporter() {
      this.from = h("input", { type: "datetime-local", step: "1", class: "tl-from", "aria-label": "export from" });
      this.to = h("input", { type: "datetime-local", step: "1", class: "tl-to", "aria-label": "export to" });
      this.link = h("a", { class: "tl-export", download: `${this.flow}-${this.node}.mp4`, text: "export MP4" });
      for (const input of [this.from, this.to]) input.addEventListener("change", () => this.exportLink());
      const now = Date.now() / 1000;
      this.setExport(now - 2 * EXPORT_AROUND_S, now);
      return h("div", { class: "tl-export-range" }, h("span", { text: "export" }), this.from,
        h("span", { text: "to" }), this.to, this.link);
    }

    setExport(start, end) {
      this.from.value = localInput(start);
      this.to.value = localInput(end);
      this.exportLink();
    }

    exportLink() {
      const start = fromInput(this.from.value);
      const end = fromInput(this.to.value);
      if (Number.isFinite(start) && Number.isFinite(end) && start < end) {
        this.link.href = `${this.base}/export.mp4?start=${start}&end=${end}`;
        this.link.removeAttribute("aria-disabled");
      } else {
        this.link.removeAttribute("href");
        this.link.setAttribute("aria-disabled", "true");
      }
    }

    setZoom(seconds) {
      this.zoom = seconds;
      for (const button of this.zooms) button.setAttribute("aria-pressed", String(button.dataset.zoom === String(seconds)));
      this.refresh().catch(report);
    }

    timeAt(event) {
      const box = this.track.getBoundingClientRect();
      const at = Math.max(0, Math.min(1, (event.clientX - box.left) / Math.max(1, box.width)));
      return this.range ? this.range.start + at * (this.range.end - this.range.start) : null;
    }

    say(text, level) {
      this.status.textContent = text;
      this.status.dataset.level = level;
    }

    playAt(t) {
      if (t === null) return;
      if (this.player.playAt(t)) this.setExport(t - EXPORT_AROUND_S, t + EXPORT_AROUND_S);
    }

    hovering(t) {
      if (t === null || !this.view) return;
      draw.place(this.hoverLine, t, this.range);
      draw.place(this.hover, t, this.range);
      const near = draw.nearestSnapshot(this.view.events, t, HOVER_WITHIN * (this.range.end - this.range.start));
      const url = near ? artifactUrl(near.snapshot, "image") : null;
      if (url && this.thumb.getAttribute("src") !== url) this.thumb.src = url;
      this.thumb.hidden = !url;
      this.hoverTime.textContent = near ? `${draw.timeLabel(t)} · ${near.type}` : draw.timeLabel(t);
    }

    // Reads the window ending now again and redraws; the player keeps its clip.
    async refresh() {
      if (this.reading) { this.again = true; return; } // once this read ends (a new zoom)
      this.reading = true;
      this.again = false;
      const end = Date.now() / 1000;
      const range = { start: end - this.zoom, end };
      try {
        const view = await getJson(`${this.base}?start=${range.start.toFixed(3)}&end=${range.end.toFixed(3)}`);
        this.view = view;
        this.range = range;
        this.player.setSpans(view.spans);
        draw.draw(this.track, this.axis, view, range);
        const shown = this.player.now();
        if (shown !== null) draw.place(this.playhead, shown, range);
        this.list(view.events);
        const evicted = view.gaps.filter((g) => g.reason === "evicted").length;
        this.say(`${view.recorded_s.toFixed(0)} s recorded · ${view.events.length} event${view.events.length === 1 ? "" : "s"}`
          + `${evicted ? ` · ${evicted} evicted` : ""} · updated ${draw.timeLabel(end)}`, "");
      } catch (err) {
        this.say(`cannot read the timeline: ${err.message || err}`, "bad");
      } finally {
        this.reading = false;
      }
      if (this.again) await this.refresh();
    }

    list(events) {
      const newest = events.slice(-MAX_EVENTS_LISTED).reverse();
      const signature = JSON.stringify(newest);
      if (signature === this.listed) return; // a redraw would lose a hovered or focused row
      this.listed = signature;
      this.events.replaceChildren(...newest.map((event) => {
        const url = event.snapshot ? artifactUrl(event.snapshot, "image") : null;
        const button = h("button", { type: "button", class: "tl-event", "data-type": event.type,
          "data-start": String(event.start) },
        h("time", { text: draw.timeLabel(event.start) }), h("span", { class: "tl-type", text: event.type }),
        url ? h("img", { src: url, alt: `${event.type} snapshot`, loading: "lazy" }) : h("span", { class: "tl-noshot" }),
        h("span", { class: "tl-length", text: lengthLabel(event) }),
        event.text ? h("q", { text: event.text }) : "");
        button.addEventListener("click", () => this.playAt(event.start));
        return h("li", {}, button);
      }));
    }
  }

  // The recordings of one flow: a RecorderTimeline per recorder, added to `grid`.
  class Recordings {
    constructor(flow, grid) {
      this.flow = flow;
      this.grid = grid;
      this.timelines = new Map();
    }

    async refresh() {
      const listing = await getJson(`/api/recordings/${encodeURIComponent(this.flow)}`);
      for (const node of listing.recorders) {
        if (!this.timelines.has(node)) {
          const timeline = new RecorderTimeline(this.flow, node);
          this.timelines.set(node, timeline);
          this.grid.append(timeline.root);
        }
      }
      await Promise.all([...this.timelines.values()].map((t) => t.refresh()));
    }
  }

  window.MediaflowWall.timeline = Object.freeze({ Recordings, RecorderTimeline });
})();
