// A recorder's timeline drawn on the page, and the decisions behind it: where a time
// falls on the bar, which clip holds a time, which clip follows another, which
// event is nearest. The decisions are pure functions of the answer of
// GET /api/recordings/{flow}/{node} (times in seconds since the epoch); `draw`
// only puts them on the page.
//
// The bar is a window [start, end) of the clock: spans (recorded), gaps (not
// recorded, or evicted by the disk cap) and event marks, each an absolutely placed
// element whose left and width are percentages of the window; below it an axis of
// local-time labels at round steps.
"use strict";

(() => {
  const { h } = window.MediaflowWall.dom;
  // Tick steps in seconds; the first giving at most MAX_TICKS labels is used.
  const STEPS = [10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200];
  const MAX_TICKS = 8;
  const KNOWN_TYPES = new Set(["motion", "loudness", "transcript"]); // others: one colour

  const fraction = (t, range) => (t - range.start) / (range.end - range.start);
  const percent = (value) => `${(Math.max(0, Math.min(1, value)) * 100).toFixed(4)}%`;

  // Every clip of the spans, oldest first (each with the span it is in).
  function clipsOf(spans) {
    return spans.flatMap((span) => span.clips.map((clip) => ({ ...clip, span })))
      .sort((a, b) => a.start - b.start);
  }

  // Where to play time `t`: the clip holding it and the offset into it; past a gap,
  // the next clip from its start. null when nothing is recorded at or after `t`.
  function locate(spans, t) {
    for (const clip of clipsOf(spans)) {
      if (t < clip.start) return { clip, offset: 0 };
      if (t < clip.end) return { clip, offset: t - clip.start };
    }
    return null;
  }

  // The clip that plays after `clip` (same digest and start): the next one of its
  // span, or the first of the next span (a gap is jumped). null at the end.
  function following(spans, clip) {
    const all = clipsOf(spans);
    const at = all.findIndex((c) => c.digest === clip.digest && c.start === clip.start);
    if (at >= 0) return all[at + 1] || null;
    return all.find((c) => c.start >= clip.end - 0.25) || null; // it left the window
  }

  // The event nearest `t` that has a snapshot, no further than `within` seconds from
  // its start or end; null if none.
  function nearestSnapshot(events, t, within) {
    let best = null;
    let bestDistance = within;
    for (const event of events) {
      if (!event.snapshot) continue;
      const end = event.end ?? event.start;
      const distance = t < event.start ? event.start - t : Math.max(0, t - end);
      if (distance <= bestDistance) { best = event; bestDistance = distance; }
    }
    return best;
  }

  // Round local times in [start, end): {t, label}. Steps of a day or less are aligned
  // to local midnight (an hour step falls on the hour of this time zone).
  function ticks(start, end) {
    const step = STEPS.find((s) => (end - start) / s <= MAX_TICKS) || STEPS[STEPS.length - 1];
    const zone = new Date(start * 1000).getTimezoneOffset() * 60; // UTC minus local, seconds
    const marks = [];
    for (let t = Math.ceil((start - zone) / step) * step + zone; t < end; t += step) {
      const options = step < 60 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
        : { hour: "2-digit", minute: "2-digit" };
      marks.push({ t, label: new Date(t * 1000).toLocaleTimeString([], options) });
    }
    return marks;
  }

  // A piece of the bar from `from` to `to`, at least visible (CSS gives a min-width).
  function piece(cls, from, to, range, attrs = {}) {
    const node = h("div", { class: cls, ...attrs });
    node.style.left = percent(fraction(from, range));
    node.style.width = percent(fraction(to, range) - fraction(from, range));
    return node;
  }

  function timeLabel(seconds) {
    return new Date(seconds * 1000).toLocaleTimeString();
  }

  // Redraws `track` (the bar) and `axis` for the answer `view` over `range`.
  function draw(track, axis, view, range) {
    const pieces = [];
    for (const span of view.spans) {
      pieces.push(piece("tl-span", span.start, span.end, range,
        { title: `recorded ${timeLabel(span.start)} – ${timeLabel(span.end)}` }));
    }
    for (const gap of view.gaps) {
      pieces.push(piece("tl-gap", gap.start, gap.end, range, { "data-reason": gap.reason,
        title: `${gap.reason} ${timeLabel(gap.start)} – ${timeLabel(gap.end)}` }));
    }
    for (const event of view.events) {
      const type = KNOWN_TYPES.has(event.type) ? event.type : "other";
      pieces.push(piece("tl-mark", event.start, event.end ?? range.end, range, {
        "data-type": type, title: `${event.type} ${timeLabel(event.start)}` }));
    }
    const keep = [...track.children].filter((c) => !/^tl-(span|gap|mark)$/.test(c.className));
    track.replaceChildren(...pieces, ...keep);
    axis.replaceChildren(...ticks(range.start, range.end).map(({ t, label }) => {
      const tick = h("span", { class: "tl-tick", text: label });
      tick.style.left = percent(fraction(t, range));
      return tick;
    }));
  }

  // Places a marker (the playhead, the hover line) at time `t`; hidden outside the window.
  function place(node, t, range) {
    const at = fraction(t, range);
    node.hidden = !(at >= 0 && at <= 1);
    node.style.left = percent(at);
  }

  window.MediaflowWall.timelineDraw = Object.freeze({
    locate, following, nearestSnapshot, ticks, draw, place, fraction, timeLabel,
  });
})();
