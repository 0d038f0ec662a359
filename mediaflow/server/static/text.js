// Decisions of the wall's text widgets, as pure functions (no DOM, time passed in),
// loaded before the wall's scripts that use it (text-widgets.js, status.js, flows.js)
// as `window.MediaflowText`.
//
// A text value reaches the wall one way (flows.js): in a `latest` event, or in a
// poll of /api/flows for a flow not running in the server; a `transcript` event
// that names no port is a line of its own. Each is an *entry*: {text, seq?, item?,
// start?}. `seq` is the emission's number on its port in this run (the wall
// prefixes the run it saw, so a new run does not look like an old one), `item`
// the seq of the input item the node ran for. A stream that reconnects starts
// again with each port's current value, and a poll repeats a port's value until it
// changes: identity tells those from new lines, never the text (the same sentence
// said twice is two entries).
"use strict";

(() => {
  const STALE_MS = 3000; // a hypothesis not updated for this long is gone
  const LIVE_PORT = /(^|[._-])partial$/i; // a port of hypotheses, replaced while spoken

  const known = (x) => x !== undefined && x !== null;

  // Whether two entries are the same emission (false when either has no identity).
  function sameEmission(a, b) {
    if (known(a.seq) && known(b.seq)) {
      return a.seq === b.seq && (!known(a.item) || !known(b.item) || a.item === b.item);
    }
    if (known(a.item) && known(b.item)) return a.item === b.item;
    return false;
  }

  // Where `entry` is already shown among `entries` (oldest first), or -1. An entry
  // with no identity at all (a stored flow's latest value, seen poll after poll)
  // can only be told apart from the last one by its text.
  function findShown(entries, entry) {
    if (!known(entry.seq) && !known(entry.item)) {
      const last = entries.length - 1;
      return last >= 0 && entries[last].text === entry.text ? last : -1;
    }
    for (let i = entries.length - 1; i >= 0; i -= 1) {
      if (sameEmission(entries[i], entry)) return i;
    }
    return -1;
  }

  // The entry one emission makes when seen again: whatever identity either way knew.
  function merged(shown, entry) {
    return {
      ...shown,
      seq: known(shown.seq) ? shown.seq : entry.seq,
      item: known(shown.item) ? shown.item : entry.item,
      start: known(shown.start) ? shown.start : entry.start,
    };
  }

  // The live hypothesis of one node's current utterance.
  //   state: {line: null | {text, item?, start?, at}, ended: null | {item?, start?}}
  //   tick:  {type: "partial", entry} | {type: "final", entry} | {type: "clock"}
  // A final ends the line when it is of the same utterance (same start) or of a
  // later item: a chunk that ends one utterance may start the next, whose
  // hypothesis then has the final's item. A hypothesis of an utterance that has
  // ended, or older than the one shown, is not shown. Nothing heard for STALE_MS
  // (no final came: the recogniser made nothing of it) ends it too.
  const LIVE_IDLE = Object.freeze({ line: null, ended: null });

  function live(state, tick, now) {
    const { line, ended } = state;
    switch (tick.type) {
      case "partial": {
        const entry = tick.entry;
        if (!entry.text) return state;
        if (ended && known(ended.item) && known(entry.item) && entry.item < ended.item) return state;
        if (ended && known(ended.start) && entry.start === ended.start) return state;
        if (line) {
          if (known(line.item) && known(entry.item) && entry.item < line.item) return state;
          if (findShown([line], entry) === 0) return state; // this hypothesis, seen again
        }
        return { line: { ...entry, at: now }, ended };
      }
      case "final": {
        const entry = tick.entry;
        const next = { item: entry.item, start: entry.start };
        if (!line) return { line, ended: next };
        const ends = !known(entry.item) || !known(line.item) || line.item < entry.item
          || (known(entry.start) && entry.start === line.start);
        return { line: ends ? null : line, ended: next };
      }
      case "clock":
        return line && now - line.at > STALE_MS ? { line: null, ended } : state;
      default:
        throw new Error(`unknown tick ${tick.type}`);
    }
  }

  // Which port of a node a transcript event belongs to: the one it names, else the
  // only text port of its kind (hypotheses for `final: false`, else finished
  // lines); null when that is not one port (the event goes to the transcripts panel).
  //   ports: [{port, live}] -- the node's text widgets
  function transcriptPort(data, ports) {
    if (typeof data.port === "string") return ports.some((p) => p.port === data.port) ? data.port : null;
    const wanted = data.final === false;
    const matching = ports.filter((p) => p.live === wanted);
    return matching.length === 1 ? matching[0].port : null;
  }

  const isLivePort = (port) => LIVE_PORT.test(port);

  window.MediaflowText = Object.freeze({
    STALE_MS, LIVE_IDLE, sameEmission, findShown, merged, live, transcriptPort, isLivePort,
  });
})();
