// The status page's only script: refresh <main> from ui/state every few seconds, without a
// reload, and keep every "in 4 min" current between refreshes. No framework, no build step.
"use strict";
(function () {
  const body = document.body;
  const poll = Number.parseFloat(body.dataset.poll || "0");
  if (!(poll > 0)) {
    return; // the sign-in page: nothing to refresh
  }
  const base = body.dataset.base || "/";
  let skew = Date.parse(body.dataset.now) - Date.now(); // the server's clock minus ours
  let version = null;

  function left(ms) {
    const seconds = Math.floor(ms / 1000);
    if (seconds < 0) return "due";
    if (seconds < 60) return "in " + seconds + " s";
    if (seconds < 3600) return "in " + Math.floor(seconds / 60) + " min";
    if (seconds < 48 * 3600) {
      const minutes = Math.floor(seconds / 60);
      return "in " + Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
    }
    return "in " + Math.floor(seconds / 86400) + " d";
  }

  function elapsed(ms) {
    const seconds = Math.max(0, Math.floor(ms / 1000));
    if (seconds < 120) return "(" + seconds + " s)";
    return "(" + Math.floor(seconds / 60) + " min)";
  }

  function tick() {
    const now = Date.now() + skew;
    for (const el of document.querySelectorAll(".left[data-at]")) {
      const text = left(Date.parse(el.dataset.at) - now);
      if (el.textContent !== text) el.textContent = text;
    }
    for (const el of document.querySelectorAll(".elapsed[data-at]")) {
      const text = elapsed(now - Date.parse(el.dataset.at));
      if (el.textContent !== text) el.textContent = text;
    }
  }

  async function refresh() {
    try {
      const answer = await fetch(base + "ui/state", {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
      });
      if (answer.status === 401) {
        window.location.reload(); // signed out or the cookie expired: show the sign-in form
        return;
      }
      if (!answer.ok) throw new Error("HTTP " + answer.status);
      const state = await answer.json();
      skew = Date.parse(state.now) - Date.now();
      if (state.version !== version) {
        version = state.version;
        // An output opened by a click stays open across the swap.
        const opened = new Set();
        for (const el of document.querySelectorAll("details[data-key][open]")) {
          opened.add(el.dataset.key);
        }
        // Rendered and escaped by the server, exactly as the first paint was.
        document.getElementById("main").innerHTML = state.main;
        for (const el of document.querySelectorAll("details[data-key]")) {
          if (opened.has(el.dataset.key)) el.open = true;
        }
      }
      body.classList.remove("stale");
      body.dataset.refreshes = String(Number(body.dataset.refreshes || "0") + 1);
      tick();
    } catch (error) {
      body.classList.add("stale"); // shown by the style sheet; the next poll tries again
    }
    window.setTimeout(refresh, poll * 1000);
  }

  tick();
  window.setInterval(tick, 1000);
  window.setTimeout(refresh, poll * 1000);
})();
