/* Live runs: the runs table and the run page poll the JSON API and update in place. */
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
    const params = new URLSearchParams({ page: table.dataset.page, limit: table.dataset.limit });
    if (table.dataset.status) params.set("status", table.dataset.status);
    let last = "";

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
        const order = rows.map((r) => r.dataset.runId).join();
        if (order !== [...tbody.rows].map((r) => r.dataset.runId).join()) tbody.replaceChildren(...rows);
        DF.setText(document, "total", data.total);
        if (empty) empty.hidden = items.length > 0;
      }
      return { changed, active: items.some((r) => ACTIVE.has(r.status)) };
    }

    DF.poll(refresh);
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
      DF.field(root, "error_box").hidden = !run.error;
      retryBox.hidden = !(canRetry && run.status === "failed");
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

    const poller = DF.poll(refresh);

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

  // Pipeline order, as gateway/web/format.stats_entries; unknown keys follow, sorted.
  const STAT_ORDER = ["docs_processed", "chunks_created", "tokens_total", "chars", "pages",
    "duration_ms", "stages", "read_ms", "extract_ms", "chunk_ms", "embed_ms", "index_ms"];

  function ordered(obj) {
    const rank = (k) => (STAT_ORDER.indexOf(k) + 1 || STAT_ORDER.length + 1);
    return Object.entries(obj).sort(([a], [b]) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  }

  function renderStats(dl, stats) {
    const entries = ordered(stats).map(([k, v]) => [
      k.replace(/_/g, " "),
      v !== null && typeof v === "object"
        ? ordered(v).map(([a, b]) => a.replace(/_/g, " ") + ": " + b).join(", ")
        : v ?? "—",
    ]);
    if (!entries.length) entries.push(["—", "No stats yet; they appear when the run finishes."]);
    const text = JSON.stringify(entries);
    if (dl.dataset.rendered === text) return;
    dl.dataset.rendered = text;
    DF.facts(dl, entries);
  }

  const table = document.querySelector("[data-runs]");
  if (table) runsTable(table);
  const page = document.querySelector("[data-run]");
  if (page) runPage(page);
})();
