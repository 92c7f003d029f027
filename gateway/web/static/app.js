/* Shared helpers of every page: JSON API calls with the CSRF header, polling with backoff,
 * formatting like gateway/web/format.py, and safe DOM building (text only, never HTML). */
(function () {
  "use strict";

  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  // What to tell people when the server gave no sentence of its own.
  const FALLBACK = {
    0: "The server could not be reached; check your connection and try again.",
    400: "The request was not accepted; check the form and try again.",
    401: "Your session has ended; sign in again.",
    403: "You are not allowed to do this; ask an admin of your tenant.",
    404: "That no longer exists; reload the page to see what is there now.",
    409: "That changed meanwhile; reload the page and try again.",
    413: "The file is larger than the upload limit; split or compress it and upload again.",
    415: "This file type is not supported; upload one of the allowed types.",
    500: "Something went wrong on our side; try again, and tell an admin if it keeps happening.",
    503: "A service the gateway needs is unavailable; try again in a minute.",
  };

  class ApiError extends Error {
    constructor(status, code, detail, body) {
      super(detail);
      this.status = status;
      this.code = code;
      this.body = body || {};
    }
  }

  function fallback(status) {
    return FALLBACK[status] || FALLBACK[status >= 500 ? 500 : 400];
  }

  function errorFrom(status, body) {
    const detail = body && typeof body.detail === "string" && body.detail ? body.detail : fallback(status);
    return new ApiError(status, (body && body.code) || "error", detail, body);
  }

  function toSignIn() {
    const next = location.pathname + location.search;
    location.assign("/login?expired=true&next=" + encodeURIComponent(next));
  }

  async function api(method, url, body) {
    const headers = { Accept: "application/json" };
    if (csrf) headers["X-CSRF-Token"] = csrf;
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (e) {
      throw new ApiError(0, "network", fallback(0));
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (response.status === 401) {
      toSignIn();
    }
    if (!response.ok) throw errorFrom(response.status, data);
    return data;
  }

  /* Call fn now and again: after `min` ms while it reports a change, doubling up to
   * maxFor(result) while nothing changes (docs/decisions/0030-live-run-status.md). fn returns
   * {changed, active, stop}. Pauses while the tab is hidden and catches up when it shows. */
  /* ── live updates: one EventSource per page on GET /v1/live (docs/decisions/0160) ─────
   * Listeners get {type, data}: the server's events (ingestion.complete, run.status,
   * batch.status, live.resync) and live.open / live.closed as the stream comes and goes.
   * <html data-live> says whether the stream is open. The browser reconnects by itself with
   * Last-Event-ID; a refusal (503, 401) closes it for good and the pages keep polling. */
  const live = (function () {
    const listeners = [];
    const TYPES = ["ingestion.complete", "webhook.test", "run.status", "batch.status", "live.resync"];
    let source = null;
    function emit(type, data) { listeners.forEach((fn) => fn({ type, data: data || {} })); }
    function state(open) {
      document.documentElement.dataset.live = open ? "open" : "closed";
      emit(open ? "live.open" : "live.closed");
    }
    function start() {
      if (source || !window.EventSource) return;
      source = new EventSource("/v1/live");
      source.onopen = () => state(true);
      source.onerror = () => state(false);
      TYPES.forEach(function (type) {
        source.addEventListener(type, function (e) {
          let data = {};
          try { data = JSON.parse(e.data); } catch (err) { data = {}; }
          emit(type, data);
        });
      });
    }
    return {
      on(fn) { listeners.push(fn); start(); },
      get open() { return !!source && source.readyState === 1; },
    };
  })();

  /* Poll fn with backoff. With opts.live(msg) (a test of a live message), the stream takes
   * over while it is open: a matching message refreshes at once, and polling stops, except
   * every opts.liveActiveMs while something is under way (for what no event announces, e.g.
   * progress); when the stream drops, polling resumes. */
  function poll(fn, opts) {
    const min = (opts && opts.min) || 1000;
    const activeMax = (opts && opts.activeMax) || 2000;
    const idleMax = (opts && opts.idleMax) || 15000;
    const follows = opts && opts.live;
    let delay = min, timer = null, busy = false, stopped = false, again = false;
    if (follows) {
      live.on(function (msg) {
        if (stopped) return;
        const always = ["live.open", "live.closed", "live.resync"].includes(msg.type);
        if (always || follows(msg)) { delay = min; schedule(0); }
      });
    }

    async function tick() {
      timer = null;
      if (busy) { again = true; return; } // news during a fetch: look again after it
      if (stopped) return;
      if (document.hidden) return; // visibilitychange restarts us
      busy = true;
      let result;
      try {
        result = (await fn()) || {};
        liveStatus("");
      } catch (e) {
        result = { changed: false, active: false, failed: true };
        if (e.status !== 401) liveStatus("Live updates paused, retrying shortly: " + e.message);
      } finally {
        busy = false;
      }
      if (stopped || result.stop) { stopped = true; return; }
      if (again) { again = false; schedule(0); return; }
      if (follows && live.open && !result.failed) {
        if (result.active && opts.liveActiveMs) schedule(opts.liveActiveMs);
        return; // the stream says when to look again
      }
      const cap = result.active ? activeMax : idleMax;
      delay = result.changed ? min : Math.min(cap, delay * 2);
      schedule(delay);
    }

    function schedule(ms) {
      if (timer) clearTimeout(timer);
      timer = setTimeout(tick, ms);
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !stopped) { delay = min; schedule(0); }
    });
    schedule(min);
    return {
      stop() { stopped = true; if (timer) clearTimeout(timer); },
      now() { stopped = false; delay = min; schedule(0); },
    };
  }

  function liveStatus(text) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.textContent = text;
    el.hidden = !text;
  }

  /* ── formatting, as gateway/web/format.py ─────────────────────────────────────────── */
  const STATUS = { queued: "Queued", running: "Running", succeeded: "Succeeded", failed: "Failed",
    completed_with_errors: "Completed with errors", skipped: "Skipped" };
  const RUN_TYPES = { manual_upload: "Upload", s3_sync: "S3 sync", attachment: "E-mail attachment" };

  function statusLabel(s) { return STATUS[s] || s || "—"; }
  function runType(t) { return RUN_TYPES[t] || t || "—"; }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || isNaN(seconds)) return "—";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    let minutes = Math.floor(Math.round(seconds) / 60);
    const secs = Math.round(seconds) % 60;
    if (minutes < 60) return minutes + " min " + secs + " s";
    const hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    return hours + " h " + minutes + " min";
  }

  function size(n) {
    if (n === null || n === undefined) return "—";
    const units = ["bytes", "KB", "MB", "GB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i === 0 ? n.toFixed(0) + " bytes" : n.toFixed(1) + " " + units[i];
  }

  function seconds(from, to) {
    if (!from || !to) return null;
    return (Date.parse(to) - Date.parse(from)) / 1000;
  }

  function localTime(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toLocaleString();
  }

  // Server-rendered times are UTC; show them in the reader's own zone.
  function localiseTimes(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      const iso = el.getAttribute("datetime");
      if (iso) { el.textContent = localTime(iso); el.title = iso; }
    });
  }

  function setTime(el, iso) {
    if (!el) return;
    el.setAttribute("datetime", iso || "");
    el.textContent = localTime(iso);
    if (iso) el.title = iso;
  }

  /* ── DOM ──────────────────────────────────────────────────────────────────────────── */
  function h(tag, attrs) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") el.textContent = v;
      else if (k === "class") el.className = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  function field(root, name) { return root.querySelector('[data-field="' + name + '"]'); }

  function setText(root, name, text) {
    const el = field(root, name);
    if (el && el.textContent !== String(text)) el.textContent = text;
    return el;
  }

  function pill(status, name) {
    return h("span", { class: "pill status-" + (status || "none"), "data-field": name || null },
      statusLabel(status));
  }

  function setPill(el, status) {
    if (!el) return;
    el.className = "pill status-" + (status || "none");
    el.textContent = statusLabel(status);
  }

  function setProgress(root, fraction) {
    const pct = Math.round((fraction || 0) * 100);
    const bar = field(root, "progress");
    if (bar && Number(bar.value) !== pct) { bar.value = pct; bar.textContent = pct + "%"; }
    setText(root, "progress_text", pct + "%");
  }

  function facts(dl, entries) {
    dl.replaceChildren();
    for (const [k, v] of entries) {
      dl.append(h("dt", { text: k }), h("dd", {}, v instanceof Node ? v : String(v ?? "—")));
    }
  }

  function message(el, text, isError) {
    if (!el) return;
    el.textContent = text;
    el.hidden = !text;
    el.classList.toggle("is-error", Boolean(isError));
  }

  function link(href, text) { return h("a", { href: href }, text); }

  /* One action button: disabled while `work` runs, its answer (or error) in `result`, then
     `after` (e.g. reload the list) whatever happened. */
  async function act(button, result, work, after) {
    button.disabled = true;
    message(result, "Working…");
    try {
      message(result, await work());
    } catch (e) {
      message(result, e.message, true);
    } finally {
      button.disabled = false;
      if (after) await after();
    }
  }

  document.addEventListener("DOMContentLoaded", function () { localiseTimes(document); });

  window.DF = { api, ApiError, errorFrom, fallback, poll, live, liveStatus, statusLabel, runType,
    duration, size, seconds, localTime, localiseTimes, setTime, h, field, setText, pill,
    setPill, setProgress, facts, message, link, act, csrf, toSignIn };
})();
