// The widgets of text ports, and the numbered list they and the transcripts panel
// share. Which entry is new, and what the live line shows, is decided in text.js;
// these only put the decisions on the page.
//
// A port of finished lines (`asr.text`) is a list that only grows, numbered from
// the first line this page saw and keeping the last MAX_LINES (the title says how
// many went). A port of hypotheses (`asr.partial`) is one live line, replaced
// while the speaker talks, gone once the node's next finished line comes or it
// goes stale.
"use strict";

(() => {
  const { h } = window.MediaflowWall.dom;
  const { Widget } = window.MediaflowWall.widget;
  const text = window.MediaflowText;
  const MAX_LINES = 100; // lines kept per text widget and in the transcripts panel: the newest

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

  const isTextWidget = (widget) => widget instanceof TextWidget || widget instanceof LiveTextWidget;

  window.MediaflowWall.textWidgets = Object.freeze({
    MAX_LINES, Lines, TextWidget, LiveTextWidget, asText, isTextWidget,
  });
})();
