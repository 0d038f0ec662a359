// The mediaflow wall: one widget per output port of every flow. This file wires
// the page: the event stream, the timers, the "enable sound" button.
//
// The parts, loaded before it by index.html in this order, each a section of
// `window.MediaflowWall`: dom.js (page helpers), text.js (`MediaflowText`: the pure
// decisions of text widgets), widget.js (the widget base), media.js (image, audio,
// video widgets), text-widgets.js (text ports), status.js (status strip and
// transcripts panel), control.js (flow control and dead letters, for a browser that
// may write), timeline-draw.js, timeline-play.js and timeline.js (a recorder's
// timeline, player, events and export), flows.js (flows, their widgets, where values go).
"use strict";

(() => {
  const { report } = window.MediaflowWall.dom;
  const { audioContext } = window.MediaflowWall.media;
  const { STATUS_EVENTS, chip } = window.MediaflowWall.status;
  const { flows, refreshFlows, pollAll, latest, transcript, listed } = window.MediaflowWall.flows;
  const control = window.MediaflowWall.control;
  const POLL_MS = 500;
  const FLOW_LIST_MS = 5000;
  const CLOCK_MS = 250; // how often live lines check whether they went stale
  const TIMELINE_MS = 10_000; // recordings grow by a clip every clip_s (10 s by default)
  const EVENT_TYPES = [...new Set(["latest", "transcript", "run_started", "run_finished",
    ...Object.keys(STATUS_EVENTS), ...Object.keys(control.CONTROL_EVENTS)])];

  function connect() {
    const state = document.getElementById("connection");
    const source = new EventSource(`/api/events?types=${EVENT_TYPES.join(",")}`);
    source.onopen = () => { state.dataset.state = "live"; state.textContent = "live"; };
    source.onerror = () => { state.dataset.state = "polling"; state.textContent = "reconnecting… (polling)"; };
    const on = (type, handler) => source.addEventListener(type, (message) => {
      try { handler(JSON.parse(message.data)); } catch (err) { report(err); }
    });
    on("latest", latest);
    on("transcript", transcript);
    on("run_started", (data) => {
      const flow = flows.get(data.flow);
      if (flow) flow.run += 1;
      refreshFlows().catch(report);
    });
    on("run_finished", () => pollAll());
    for (const type of Object.keys(STATUS_EVENTS)) on(type, (data) => chip(type, data));
    for (const type of Object.keys(control.CONTROL_EVENTS)) {
      on(type, (data) => flows.get(data.flow)?.controls?.event(type, data));
    }
  }

  function start() {
    document.getElementById("sound").addEventListener("click", () => {
      audioContext().resume().catch(report);
    });
    control.start().catch(report);
    connect();
    refreshFlows().then(listed, (err) => { listed(); report(err); });
    setInterval(() => pollAll(), POLL_MS);
    setInterval(() => refreshFlows().catch(report), FLOW_LIST_MS);
    setInterval(() => { // dead letters of other processes (a worker's) come with no event here
      for (const flow of flows.values()) flow.controls?.refreshDead().catch(report);
    }, FLOW_LIST_MS);
    setInterval(() => { for (const flow of flows.values()) flow.clock(); }, CLOCK_MS);
    setInterval(() => {
      for (const flow of flows.values()) flow.recordings?.refresh().catch(report);
    }, TIMELINE_MS);
  }

  start();
})();
