// mnemosync dashboard: live views over server-sent events. No library, no build step.
// An element with data-live="URL" receives HTML fragments from URL ("html" events) and either replaces its
// content (data-live-mode="replace") or puts them first (data-live-mode="prepend"). "problem" events show the
// server's error above it; "ok" events clear it. The page's [data-live-state] says whether the stream is up.
"use strict";

function follow(target) {
  const mode = target.dataset.liveMode || "replace";
  const state = document.querySelector("[data-live-state]");
  const problem = document.querySelector("[data-live-problem]");
  const source = new EventSource(target.dataset.live);
  const setState = (text, cls) => {
    if (state) { state.textContent = text; state.className = "live-state " + cls; }
  };
  source.addEventListener("open", () => setState("live", "up"));
  source.addEventListener("error", () => setState("reconnecting…", "down"));
  source.addEventListener("html", (event) => {
    if (mode === "prepend") {
      const empty = target.querySelector("tr.none");
      if (empty) empty.remove();
      target.insertAdjacentHTML("afterbegin", event.data);
    } else {
      target.innerHTML = event.data;
    }
    setState("live", "up");
  });
  source.addEventListener("problem", (event) => {
    if (problem) { problem.textContent = event.data; problem.hidden = false; }
  });
  source.addEventListener("ok", () => { if (problem) problem.hidden = true; });
  window.addEventListener("pagehide", () => source.close());
}

function mergeChoice(form) {
  const text = form.querySelector("textarea[name=merged]");
  if (!text) return;
  text.addEventListener("focus", () => {
    const merge = form.querySelector("input[name=keep][value=merge]");
    if (merge) merge.checked = true;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(follow);
  document.querySelectorAll("form.resolve").forEach(mergeChoice);
});
