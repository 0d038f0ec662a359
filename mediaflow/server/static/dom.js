// Small page helpers every part of the wall uses, and the wall's namespace.
//
// The wall is plain classic scripts, loaded with `defer` in dependency order by
// index.html (no build step, like text.js). Each file adds one frozen section to
// `window.MediaflowWall`; this one comes first and creates it. All text goes into
// the page through textContent (`h`'s `text`), never as HTML.
"use strict";

(() => {
  const DIGEST = /^sha256:[0-9a-f]{64}$/;
  const SERVABLE = /^(image|audio|video)\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/;

  function h(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function clock(seconds) {
    const when = seconds ? new Date(seconds * 1000) : new Date();
    return when.toLocaleTimeString();
  }

  // Where the server serves an artifact ref, or null for a ref that is not one. The
  // type is passed only when it is a media type the server will send as such.
  function artifactUrl(ref, kind) {
    if (!ref || typeof ref.digest !== "string" || !DIGEST.test(ref.digest)) return null;
    const type = typeof ref.media_type === "string" && SERVABLE.test(ref.media_type.split(";")[0])
      ? ref.media_type.split(";")[0]
      : (kind === "video" ? "video/mp4" : "application/octet-stream");
    return `/artifacts/${ref.digest}?type=${encodeURIComponent(type)}`;
  }

  async function getJson(url) {
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    return response.json();
  }

  function report(err) {
    console.warn("mediaflow wall:", err);
  }

  window.MediaflowWall = { dom: Object.freeze({ h, clock, artifactUrl, getJson, report }) };
})();
