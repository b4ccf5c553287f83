"""The console's own stylesheet, script and icon, served from the same listener (no CDN, no external file).

The script only adds to pages that are complete without it: countdowns tick every second between refreshes,
and the page's ``<main>`` is re-fetched every ``data-refresh`` seconds (not while a form field has focus).
"""

from __future__ import annotations

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #1f2d3d; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: center; }
header a { color: #fff; text-decoration: none; } header a.here { text-decoration: underline; }
header .who { margin-left: auto; } header form { display: inline; }
main { padding: 12px 16px; }
table { border-collapse: collapse; margin: 8px 0 16px; background: #fff; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
table.incidents td, table.decisions td { overflow-wrap: anywhere; max-width: 28ch; }
.num { text-align: right; }
.flash { background: #e8f4e8; border: 1px solid #9c9; padding: 6px; }
.error { background: #fbeaea; border: 1px solid #d99; padding: 6px; }
.late { color: #b00; font-weight: bold; } .soon { color: #b60; }
.paused { color: #b60; font-weight: bold; }
.open { background: #fff7e6; }
pre { margin: 0; font-size: 12px; white-space: pre-wrap; max-width: 60ch; }
form.inline { display: inline; margin: 0; }
form.filters label { margin-right: 8px; }
.muted { color: #777; }
footer { color: #777; padding: 8px 16px; font-size: 12px; }
"""

JS = """
"use strict";
(function () {
  function fmt(s) {
    var neg = s < 0, a = Math.abs(Math.round(s));
    var h = Math.floor(a / 3600), m = Math.floor((a % 3600) / 60), r = a % 60;
    var t = (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
    return neg ? "overdue " + t : t;
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("data-deadline")) - now) / 1000;
      el.textContent = fmt(left);
      el.classList.toggle("late", left < 0);
      el.classList.toggle("soon", left >= 0 && left < 300);
    });
  }
  function busy() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
  }
  function refresh() {
    if (busy()) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text || busy()) { return; }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main"), old = document.querySelector("main");
        if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); tick(); }
      })
      .catch(function () { /* the next refresh tries again */ });
  }
  tick();
  setInterval(tick, 1000);
  var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (every > 0) { setInterval(refresh, every * 1000); }
})();
"""

FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#1f2d3d"/><path d="M3 12 L6 7 L9 9 L13 4" stroke="#6cf" '
    'stroke-width="2" fill="none"/></svg>'
)
