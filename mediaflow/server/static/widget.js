// What every port's widget is, and the one for values no other widget knows.
//
// A widget shows the latest value of one output port; `update` skips a value
// equal to the last (a poll repeats the port's latest value until it changes).
"use strict";

(() => {
  const { h, clock } = window.MediaflowWall.dom;

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

  // Any other kind: the value itself, as JSON.
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

  window.MediaflowWall.widget = Object.freeze({ Widget, ValueWidget });
})();
