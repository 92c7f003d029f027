/* Live runs: the runs table and the run page update in place from the JSON API, when the live
 * stream announces a status change or, without the stream, by polling. */
(function () {
  "use strict";
  const DF = window.DF;
  const ACTIVE = new Set(["queued", "running"]);

  /* ── one run's fields, on a table row or on the run page ──────────────────────────── */
  function fillRun(root, run) {
    DF.setPill(DF.field(root, "status"), run.status);
    root.dataset.status = run.status;
    DF.setText(root, "stage", run.stage || "—");
    DF.setProgress(root, run.progress);
    const queueWait = DF.seconds(run.created_at, run.started_at);
    const processing = DF.seconds(run.started_at, run.finished_at);
    DF.setText(root, "queue_wait", DF.duration(queueWait));
    DF.setText(root, "processing", DF.duration(processing));
    for (const name of ["created_at", "started_at", "finished_at"]) {
      const el = DF.field(root, name);
      if (el && el.getAttribute("datetime") !== (run[name] || "")) DF.setTime(el, run[name]);
    }
    // The wait of the latest attempt: a retry waits from the retry, not from the upload.
    const last = (run.attempts || []).slice(-1)[0];
    if (last && last.started_at) DF.setText(root, "queue_wait", DF.duration(last.queue_wait_s));
    relativeTimes(root);
  }

  /* ── "3 min ago", with the absolute time on hover (the <time>'s title) ─────────────── */
  function ago(iso, now) {
    const s = Math.round((now - new Date(iso).getTime()) / 1000);
    if (s < 10) return "just now";
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    const d = Math.floor(s / 86400);
    return d === 1 ? "yesterday" : d + " days ago";
  }

  function relativeTimes(root) {
    const now = Date.now();
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      const iso = el.getAttribute("datetime");
      if (!iso) return;
      el.title = DF.localTime(iso);
      el.textContent = ago(iso, now);
    });
  }

  function title(run) {
    const c = run.config || {};
    return c.title || c.original_filename || c.key || run.run_id;
  }

  // A fingerprint of what the table shows: a change resets the polling delay.
  function signature(run) {
    return [run.run_id, run.status, run.stage, run.progress, run.started_at, run.finished_at].join("|");
  }

  /* ── the runs table ───────────────────────────────────────────────────────────────── */
  function runsTable(table) {
    const tbody = table.tBodies[0];
    const template = document.getElementById("run-row");
    const empty = document.querySelector("[data-empty]");
    let params = new URLSearchParams({ page: table.dataset.page, limit: table.dataset.limit });
    if (table.dataset.status) params.set("status", table.dataset.status);
    let last = "";
    const filters = document.querySelector("[data-run-filters]");

    function newRow(run) {
      const row = template.content.firstElementChild.cloneNode(true);
      row.dataset.runId = run.run_id;
      const a = DF.field(row, "link");
      a.href = "/runs/" + run.run_id;
      a.textContent = title(run);
      DF.setText(row, "run_type", DF.runType(run.run_type));
      return row;
    }

    async function refresh() {
      const data = await DF.api("GET", "/v1/ingestion-runs?" + params.toString());
      const items = data.items;
      const now = items.map(signature).join(";");
      const changed = now !== last;
      last = now;
      if (changed) {
        const existing = new Map([...tbody.rows].map((r) => [r.dataset.runId, r]));
        const rows = items.map((run) => {
          const row = existing.get(run.run_id) || newRow(run);
          fillRun(row, run);
          return row;
        });
        relativeTimes(tbody);
        const order = rows.map((r) => r.dataset.runId).join();
        if (order !== [...tbody.rows].map((r) => r.dataset.runId).join()) tbody.replaceChildren(...rows);
        DF.setText(document, "total", data.total);
        if (empty) empty.hidden = items.length > 0;
      }
      return { changed, active: items.some((r) => ACTIVE.has(r.status)) };
    }

    // Live (docs/decisions/0160): any run's status change redraws; progress, which no event
    // announces, is looked up every 15 s while a run is under way.
    const poller = DF.poll(refresh, { live: (m) => m.type === "run.status", liveActiveMs: 15000 });
    if (filters) {
      // Applied as you type or choose: the same query string the form submits without script.
      let typing = null;
      const apply = function () {
        const form = new FormData(filters);
        params = new URLSearchParams({ page: "1", limit: table.dataset.limit });
        for (const [k, v] of form) if (String(v).trim()) params.set(k, String(v).trim());
        history.replaceState(null, "", "/runs?" + [...params].filter(([k]) => k !== "limit" && k !== "page")
          .map(([k, v]) => encodeURIComponent(k) + "=" + encodeURIComponent(v)).join("&"));
        last = null; // redraw even when the filtered listing is empty
        poller.now();
      };
      filters.addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(apply, 250); });
      filters.addEventListener("change", apply);
      filters.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
    }
    setInterval(() => relativeTimes(table), 30000);
  }

  /* ── the run page ─────────────────────────────────────────────────────────────────── */
  function runPage(root) {
    const runId = root.dataset.run;
    const canRetry = root.dataset.canRetry === "true";
    const retryBox = root.querySelector("[data-retry]");
    const retryButton = root.querySelector('[data-action="retry"]');
    const result = DF.field(root, "retry_result");
    let last = "";
    let retried = false;

    function showRun(run) {
      fillRun(root, run);
      DF.setText(root, "delivery_count", run.delivery_count);
      DF.setText(root, "takeover_count", run.takeover_count);
      DF.setText(root, "error", run.error || "");
      DF.setText(root, "advice", run.advice || "");
      DF.field(root, "error_box").hidden = !run.error;
      retryBox.hidden = !(canRetry && run.status === "failed");
      showRetryable(run.retryable === true);
      renderTimeline(DF.field(root, "timeline"), run);
      renderAttempts(DF.field(root, "attempts"), run.attempts || []);
      if (retried && run.status === "succeeded") {
        DF.message(result, "The retry succeeded.");
        retried = false;
      } else if (retried && run.status === "failed") {
        DF.message(result, "The retry failed too; the error below says why. Fix the file " +
          "and upload it again.", true);
        retried = false;
      }
      renderStats(DF.field(root, "stats"), run.stats || {});
    }

    async function refresh() {
      let run;
      try {
        run = await DF.api("GET", "/v1/ingestion-runs/" + encodeURIComponent(runId));
      } catch (e) {
        if (e.status === 404) {
          DF.message(result, "This run no longer exists in your tenant; go back to the list of runs.", true);
          return { stop: true };
        }
        throw e;
      }
      const now = signature(run) + JSON.stringify(run.stats) + (run.error || "");
      const changed = now !== last;
      last = now;
      if (changed) showRun(run);
      const active = ACTIVE.has(run.status);
      // A finished run changes again only through a retry, which restarts polling.
      return { changed, active, stop: !active };
    }

    const poller = DF.poll(refresh, { liveActiveMs: 15000,
      live: (m) => m.type === "run.status" && m.data.run_id === runId });
    // Elapsed time of the stage under way, between polls.
    setInterval(function () {
      const el = root.querySelector(".step-active .step-time[data-since]");
      if (el) el.textContent = "running for " + DF.duration(DF.seconds(el.dataset.since, new Date().toISOString()));
    }, 1000);

    function showRetryable(retryable) {
      retryBox.dataset.retryable = String(retryable);
      retryButton.className = retryable ? "" : "secondary";
      retryButton.textContent = retryable ? "Retry this run" : "Retry anyway";
      DF.setText(root, "retry_hint", retryable ? "Runs it again with the same uploaded file."
        : "The same file will most likely fail the same way; upload a fixed file instead.");
    }

    if (retryButton) {
      retryButton.addEventListener("click", async function () {
        retryButton.disabled = true;
        DF.message(result, "");
        try {
          await DF.api("POST", "/v1/ingestion-runs/" + encodeURIComponent(runId) + "/retry",
            { reason: "retried from the web UI" });
          DF.message(result, "The run is queued again; this page follows it.");
          retryBox.hidden = true;
          retried = true;
          last = "";
        } catch (e) {
          DF.message(result, retryError(e), true);
        } finally {
          retryButton.disabled = false;
          poller.now();
        }
      });
    }
  }

  function retryError(e) {
    if (e.status === 404) {
      return "Retry is not possible: the run no longer exists, or this server cannot retry " +
        "runs yet; reload the page, and upload the file again if you need it processed.";
    }
    if (e.status === 409) return e.message; // run_not_failed, upload_expired, already_ingested
    return e.message;
  }

  // As gateway/web/format.STAGES and stage_timeline.
  const STAGES = [["read", "Read the file"], ["extract", "Extract the text"],
    ["chunk", "Split into chunks"], ["embed", "Compute embeddings"], ["index", "Index for search"]];
  const KINDS = { delivery: "First pick-up", takeover: "Takeover", retry: "Retry", redrive: "Redrive" };
  const OUTCOMES = { succeeded: "Succeeded", failed: "Failed", released: "Released (passing fault)",
    taken_over: "Taken over" };

  function renderTimeline(ol, run) {
    const attempts = run.attempts || [];
    const latest = attempts[attempts.length - 1];
    const stages = (latest && latest.stages) || (run.stats || {}).stages || {};
    const items = STAGES.map(function ([key, label]) {
      const ms = stages[key + "_ms"];
      let state = "pending", text = "—", since = null;
      if (ms !== undefined && ms !== null) { state = "done"; text = DF.duration(ms / 1000); }
      else if (run.status === "running" && run.stage === key) {
        state = "active"; text = "under way"; since = run.updated_at;
        // The stage began when the stages before it ended: attempt start + their times.
        if (latest && latest.started_at) {
          const before = STAGES.slice(0, STAGES.findIndex(([k]) => k === key))
            .reduce((sum, [k]) => sum + (stages[k + "_ms"] || 0), 0);
          since = new Date(new Date(latest.started_at).getTime() + before).toISOString();
        }
      } else if (run.status === "failed" && run.stage === key) { state = "failed"; text = "failed here"; }
      const time = DF.h("span", { class: "step-time" }, text);
      if (since) time.dataset.since = since;
      return DF.h("li", { class: "step step-" + state }, DF.h("span", { class: "step-label" }, label), " ", time);
    });
    const key = JSON.stringify([stages, run.status, run.stage]);
    if (ol.dataset.rendered === key) return;
    ol.dataset.rendered = key;
    ol.replaceChildren(...items);
  }

  function renderAttempts(tbody, attempts) {
    const key = JSON.stringify(attempts);
    if (tbody.dataset.rendered === key) return;
    tbody.dataset.rendered = key;
    if (!attempts.length) {
      tbody.replaceChildren(DF.h("tr", {}, DF.h("td", { colspan: "8" }, "No worker has picked this run up yet.")));
      return;
    }
    tbody.replaceChildren(...attempts.map(function (a) {
      const cell = (label, content) => DF.h("td", { "data-label": label }, content);
      const started = DF.h("time", { datetime: a.started_at || "" }, a.started_at ? "" : "—");
      const outcome = a.outcome ? (OUTCOMES[a.outcome] || a.outcome)
        : (a.started_at ? "Running" : "Waiting for a worker");
      return DF.h("tr", {}, cell("#", String(a.attempt_no)), cell("Kind", KINDS[a.kind] || a.kind),
        cell("Worker", a.worker || "—"), cell("Waited", DF.duration(a.queue_wait_s)),
        cell("Started", started), cell("Took", DF.duration(a.duration_s)),
        cell("Outcome", outcome), cell("Error", a.error || "—"));
    }));
    relativeTimes(tbody);
  }

  // Pipeline order, as gateway/web/format.stats_entries; unknown keys follow, sorted.
  const STAT_ORDER = ["docs_processed", "chunks_created", "tokens_total", "chars", "pages",
    "duration_ms", "stages", "read_ms", "extract_ms", "chunk_ms", "embed_ms", "index_ms"];

  function ordered(obj) {
    const rank = (k) => (STAT_ORDER.indexOf(k) + 1 || STAT_ORDER.length + 1);
    return Object.entries(obj).sort(([a], [b]) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  }

  // As gateway/web/format.stat_label and stat_text; the labels are format.STAT_LABELS, which
  // the page carries in the stats list's data-labels.
  const STAGE_WORDS = Object.fromEntries(STAGES);

  function statLabel(labels, key) {
    if (labels[key]) return labels[key];
    const bare = key.endsWith("_ms") ? key.slice(0, -3) : key;
    const words = (key.endsWith("_ms") && STAGE_WORDS[bare]) || bare.replace(/_/g, " ");
    return words.charAt(0).toUpperCase() + words.slice(1);
  }

  function statText(key, value) {
    if (value === null || value === undefined) return "—";
    if (key.endsWith("_ms") && typeof value === "number") return DF.duration(value / 1000);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return String(value);
  }

  function renderStats(dl, stats) {
    const labels = JSON.parse(dl.dataset.labels || "{}");
    const entries = ordered(stats).map(([k, v]) => [
      statLabel(labels, k),
      v !== null && typeof v === "object"
        ? ordered(v).map(([a, b]) => statLabel(labels, a) + " " + statText(a, b)).join(", ")
        : statText(k, v),
    ]);
    if (!entries.length) entries.push(["—", "No stats yet; they appear when the run finishes."]);
    const text = JSON.stringify(entries);
    if (dl.dataset.rendered === text) return;
    dl.dataset.rendered = text;
    DF.facts(dl, entries);
  }

  document.addEventListener("DOMContentLoaded", () => relativeTimes(document.querySelector("main") || document));
  const table = document.querySelector("[data-runs]");
  if (table) runsTable(table);
  const page = document.querySelector("[data-run]");
  if (page) runPage(page);
})();
