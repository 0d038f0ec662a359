// Operating flows from the wall: pause / resume / step and disable / enable for a flow
// the server runs, and the flow's dead letters with retry and discard buttons.
//
// Shown only to a browser that may write. The wall's cookie opens reads only (its
// HMAC cannot be replayed as the token), so writes carry the token itself as
// `Authorization: Bearer`. The browser gets it from a fragment link, `/#token=T`
// (a fragment never reaches the server or its logs; `/?token=T#token=T` also sets
// the read cookie), or from the "operate" button's prompt, and keeps it in
// sessionStorage (this tab only). GET /api/session says what the server lets this
// browser do; with no token configured anyone may write and the controls show.
"use strict";

(() => {
  const { h, report } = window.MediaflowWall.dom;
  const KEY = "mediaflow-token";
  const DEAD_LIMIT = 20;
  // Events that change what the controls show, by type -> the status they mean (or null).
  const CONTROL_EVENTS = {
    flow_paused: "paused",
    flow_resumed: "running",
    flow_disabled: "disabled",
    flow_enabled: "running",
    flow_stepped: null,
    cascade_dropped: null,
    dead_letter_requeued: null,
    dead_letter_deleted: null,
  };
  const access = { write: false, tokenRequired: false };
  const views = new Set(); // every FlowControls, re-rendered when access changes

  function storedToken() {
    try { return sessionStorage.getItem(KEY); } catch { return null; }
  }

  function keepToken(token) {
    try { sessionStorage.setItem(KEY, token); } catch (err) { report(err); }
  }

  // `#token=T` in the address: keep it, then take it out of the address bar.
  function takeFragmentToken() {
    const match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
    if (!match) return;
    keepToken(decodeURIComponent(match[1]));
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
  }

  async function call(method, url) {
    const headers = { Accept: "application/json" };
    const token = storedToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(url, { method, headers, cache: "no-store", credentials: "same-origin" });
    const body = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new Error((body && body.error) || `${method} ${url}: ${response.status}`);
    return body;
  }

  async function checkAccess() {
    try {
      const session = await call("GET", "/api/session");
      access.write = session.write === true;
      access.tokenRequired = session.token_required === true;
    } catch (err) {
      access.write = false;
      report(err);
    }
    const unlock = document.getElementById("unlock");
    if (unlock) unlock.hidden = access.write || !access.tokenRequired;
    for (const view of views) view.render();
    return access.write;
  }

  async function unlock(button) {
    const token = window.prompt("The server's MEDIAFLOW_TOKEN (kept in this tab only):");
    if (!token) return;
    keepToken(token.trim());
    if (!await checkAccess()) button.textContent = "token refused: try again";
  }

  function start() {
    takeFragmentToken();
    const button = document.getElementById("unlock");
    if (button) button.addEventListener("click", () => unlock(button).catch(report));
    return checkAccess();
  }

  const path = (flow, rest) => `/api/flows/${encodeURIComponent(flow)}/${rest}`;

  // The controls of one flow. `status` is null for a flow this server does not run
  // (then only its dead letters can be operated: they live in the queue).
  class FlowControls {
    constructor(flow) {
      this.flow = flow;
      this.status = null;
      this.statusLine = h("span", { class: "flow-status" });
      this.buttons = {};
      for (const action of ["pause", "resume", "step", "toggle"]) {
        this.buttons[action] = h("button", { type: "button", "data-action": action, text: action });
        this.buttons[action].addEventListener("click", () => this.act(action).catch((err) => this.say(err.message)));
      }
      this.message = h("span", { class: "control-message" });
      this.flowButtons = h("span", { class: "flow-buttons" },
        this.buttons.pause, this.buttons.resume, this.buttons.step, this.buttons.toggle);
      this.deadCount = h("span", { text: "dead letters" });
      this.deadList = h("ol", { class: "dead-list" });
      this.dead = h("details", { class: "dead-letters" }, h("summary", {}, this.deadCount), this.deadList);
      this.root = h("div", { class: "controls" }, this.flowButtons, this.message, this.dead);
      views.add(this);
      this.render();
    }
    // The flow's status from a poll, an event or an answer (null: not run here).
    setStatus(status) {
      this.status = typeof status === "string" ? status : null;
      this.render();
    }
    render() {
      this.statusLine.textContent = this.status || "";
      this.statusLine.dataset.status = this.status || "";
      this.root.hidden = !access.write;
      this.flowButtons.hidden = this.status === null;
      const { pause, resume, step, toggle } = this.buttons;
      const disabled = this.status === "disabled";
      pause.disabled = this.status !== "running";
      resume.disabled = this.status !== "paused";
      step.disabled = this.status !== "paused";
      toggle.textContent = disabled ? "enable" : "disable";
      toggle.disabled = this.status === "stopping";
      if (access.write && !this.deadLoaded) {
        this.deadLoaded = true;
        this.refreshDead().catch(report);
      }
    }
    say(text) { this.message.textContent = text; }
    async act(action) {
      const verb = action === "toggle" ? (this.status === "disabled" ? "enable" : "disable") : action;
      const answer = await call("POST", path(this.flow, verb));
      this.setStatus(answer.status);
      if (verb === "step") {
        const s = answer.stepped;
        this.say(s ? `stepped ${s.node} #${s.seq}${s.deliveries > 1 ? " (redelivery)" : ""}` : "nothing waited");
      } else {
        this.say(answer.changed ? "" : `already ${answer.status}`);
      }
    }
    event(type, data) {
      const status = CONTROL_EVENTS[type];
      if (status) this.setStatus(status);
      if (type === "flow_stepped") this.say(`stepped ${data.node} #${data.seq}`);
      if (type === "cascade_dropped" || type.startsWith("dead_letter_")) this.refreshDead().catch(report);
    }
    async refreshDead() {
      if (!access.write) return;
      const answer = await call("GET", `${path(this.flow, "dead-letters")}?limit=${DEAD_LIMIT}`);
      const letters = answer.dead_letters || [];
      this.deadCount.textContent = `dead letters (${letters.length}${letters.length === DEAD_LIMIT ? "+" : ""})`;
      this.dead.dataset.count = String(letters.length);
      this.deadList.replaceChildren(...letters.map((dead) => this.deadItem(dead)));
    }
    deadItem(dead) {
      const item = h("li", { "data-id": dead.id },
        h("span", { class: "what", text: `${dead.node} #${dead.seq} · ${dead.deliveries} tries` }),
        h("span", { class: "reason", title: dead.payload_preview, text: dead.reason }));
      for (const [label, method, suffix] of [["retry", "POST", "/requeue"], ["discard", "DELETE", ""]]) {
        const button = h("button", { type: "button", "data-action": label, text: label });
        button.addEventListener("click", () => {
          button.disabled = true;
          call(method, `${path(this.flow, "dead-letters")}/${encodeURIComponent(dead.id)}${suffix}`)
            .then(() => { item.remove(); return this.refreshDead(); })
            .catch((err) => { button.disabled = false; this.say(err.message); });
        });
        item.append(button);
      }
      return item;
    }
  }

  window.MediaflowWall.control = Object.freeze({ CONTROL_EVENTS, FlowControls, start, checkAccess });
})();
