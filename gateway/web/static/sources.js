/* Admin S3 sources, over /v1/sources: list, create, edit, delete, Sync now and live sync
 * progress with the counters and the objects that were skipped or failed. */
(function () {
  "use strict";
  const DF = window.DF;
  const COUNTERS = [["listed", "Listed"], ["excluded", "Excluded"], ["new", "New"],
    ["changed", "Changed"], ["unchanged", "Unchanged"], ["deleted", "Deleted"],
    ["skipped", "Skipped"], ["failed", "Failed"], ["still_failed", "Still failed"]];
  // The field a server refusal is about, from its code or the field named at its start.
  const FIELDS = ["name", "bucket", "prefix", "endpoint_url", "region", "sync_every_minutes"];

  function clearFieldErrors(form) {
    form.querySelectorAll("[data-error-for]").forEach((el) => DF.message(el, ""));
  }

  /* Put a refusal next to the field that caused it; return false when it names none. */
  function showFieldError(form, err) {
    const detail = err.message || "";
    let name = null;
    if (err.code === "bucket_not_granted" || err.code === "platform_bucket") name = "bucket";
    else if (/^(Patterns|include_patterns|exclude_patterns)/.test(detail)) name = "patterns";
    else if (/endpoint/i.test(detail) && err.status === 400) name = "endpoint_url";
    else name = FIELDS.find((f) => detail.startsWith(f + " ") || detail.startsWith("A source named") && f === "name") || null;
    const slot = name && form.querySelector('[data-error-for="' + name + '"]');
    if (!slot) return false;
    DF.message(slot, detail, true);
    const input = name === "patterns" ? form.elements.include_patterns : form.elements[name];
    if (input) input.focus();
    return true;
  }

  function failForm(form, err) {
    clearFieldErrors(form);
    const formError = DF.field(form, "form_error");
    if (showFieldError(form, err)) DF.message(formError, "");
    else DF.message(formError, err.message, true);
  }

  function bindTest(form, creating) {
    const button = form.querySelector('[data-action="test-connection"]');
    const out = DF.field(form, "test_result");
    button.addEventListener("click", async function () {
      clearFieldErrors(form);
      const body = readForm(form, true);
      body.bucket = form.elements.bucket.value.trim();
      if (!body.bucket) {
        DF.message(form.querySelector('[data-error-for="bucket"]'), "Enter the bucket's name.", true);
        form.elements.bucket.focus();
        return;
      }
      button.disabled = true;
      DF.message(out, "Testing…");
      try {
        const r = await DF.api("POST", "/v1/sources/test-connection", {
          bucket: body.bucket, prefix: body.prefix, endpoint_url: body.endpoint_url || null,
          region: body.region || null });
        DF.message(out, r.detail, !r.ok);
      } catch (err) {
        DF.message(out, "");
        failForm(form, err);
      } finally {
        button.disabled = false;
      }
    });
  }

  function ingestText(ingest) {
    if (!ingest) return "";
    const total = ingest.queued + ingest.running + ingest.succeeded + ingest.failed;
    if (!total) return "No file of this sync needed ingesting.";
    const parts = [ingest.succeeded + " succeeded", ingest.failed + " failed"];
    const waiting = ingest.queued + ingest.running;
    if (waiting) parts.push(waiting + " still " + (ingest.running ? "running" : "queued"));
    return total + " file" + (total === 1 ? "" : "s") + " queued by this sync: " + parts.join(", ") + ".";
  }

  /* ── the form, shared by create and edit ──────────────────────────────────────────── */
  function lines(text) {
    return text.split("\n").map((s) => s.trim()).filter(Boolean);
  }

  function readForm(form, creating) {
    const v = (name) => form.elements[name].value.trim();
    const body = {
      prefix: v("prefix"),
      include_patterns: lines(form.elements.include_patterns.value),
      exclude_patterns: lines(form.elements.exclude_patterns.value),
      enabled: form.elements.enabled.checked,
    };
    if (creating) body.bucket = v("bucket");
    const every = v("sync_every_minutes");
    // A number the server checks (5 to 10080); text that is not one is sent as is and refused.
    if (every) body.sync_every_minutes = /^\d+$/.test(every) ? Number(every) : every;
    else if (!creating) body.sync_every_minutes = null;
    // Empty optional fields: left out on create (server defaults), cleared on edit.
    for (const name of ["name", "endpoint_url", "region"]) {
      if (v(name)) body[name] = v(name);
      else if (!creating && name !== "name") body[name] = null;
    }
    return body;
  }

  function fillForm(form, source) {
    form.elements.name.value = source.name || "";
    form.elements.bucket.value = source.bucket;
    form.elements.bucket.readOnly = true;
    form.elements.bucket.setAttribute("aria-describedby", "bucket-fixed");
    if (!document.getElementById("bucket-fixed")) {
      form.elements.bucket.after(DF.h("p", { class: "hint", id: "bucket-fixed" },
        "The bucket cannot change; create a new source for another bucket."));
    }
    form.elements.prefix.value = source.prefix || "";
    form.elements.endpoint_url.value = source.endpoint_url || "";
    form.elements.region.value = source.region || "";
    form.elements.include_patterns.value = (source.include_patterns || []).join("\n");
    form.elements.exclude_patterns.value = (source.exclude_patterns || []).join("\n");
    form.elements.enabled.checked = Boolean(source.enabled);
    form.elements.sync_every_minutes.value = source.sync_every_minutes || "";
  }

  function lastSync(source) {
    const s = source.last_sync;
    if (!s) return "Never synced";
    const span = DF.h("span", {}, DF.pill(s.status), " ",
      DF.h("time", { datetime: s.started_at }, DF.localTime(s.started_at)));
    return span;
  }

  async function trigger(sourceId) {
    try {
      const started = await DF.api("POST", "/v1/sources/" + sourceId + "/sync");
      return { syncId: started.sync_id, note: "Sync started." };
    } catch (e) {
      if (e.status === 409 && e.body.sync_id) {
        return { syncId: e.body.sync_id, note: "A sync of this source was already running; showing it." };
      }
      throw e;
    }
  }

  /* ── the list page ────────────────────────────────────────────────────────────────── */
  function listPage(root) {
    const rows = DF.field(root, "rows");
    const table = DF.field(root, "table");
    const form = document.querySelector('[data-source-form="create"]');
    const formError = DF.field(form, "form_error");

    async function load() {
      try {
        const data = await DF.api("GET", "/v1/sources?limit=100");
        rows.replaceChildren(...data.items.map(row));
        table.hidden = data.items.length === 0;
        DF.field(root, "empty").hidden = data.items.length > 0;
        DF.message(DF.field(root, "error"), "");
      } catch (e) {
        DF.message(DF.field(root, "error"), e.message, true);
      } finally {
        DF.field(root, "loading").hidden = true;
      }
    }

    function row(source) {
      const sync = DF.h("button", { type: "button", class: "secondary",
        "aria-label": "Sync " + source.name + " now" }, "Sync now");
      sync.addEventListener("click", async function () {
        sync.disabled = true;
        try {
          const started = await trigger(source.source_id);
          location.assign("/admin/sources/" + source.source_id + "?sync=" + started.syncId);
        } catch (e) {
          DF.message(DF.field(root, "error"), e.message, true);
          sync.disabled = false;
        }
      });
      return DF.h("tr", { "data-source-id": source.source_id },
        DF.h("td", { "data-label": "Name" }, DF.link("/admin/sources/" + source.source_id, source.name)),
        DF.h("td", { "data-label": "Bucket / prefix" }, DF.h("code", { class: "wrap" },
          source.bucket + "/" + (source.prefix || ""))),
        DF.h("td", { "data-label": "Enabled" }, source.enabled ? "Yes" : "No"),
        DF.h("td", { "data-label": "Last sync" }, lastSync(source)),
        DF.h("td", { "data-label": "Actions" }, sync));
    }

    form.addEventListener("submit", async function (e) {
      e.preventDefault();
      const button = form.querySelector('button[type="submit"]');
      if (!form.elements.bucket.value.trim()) {
        DF.message(formError, "Enter the bucket's name; it is the only required field.", true);
        form.elements.bucket.focus();
        return;
      }
      button.disabled = true;
      try {
        const created = await DF.api("POST", "/v1/sources", readForm(form, true));
        location.assign("/admin/sources/" + created.source_id);
      } catch (err) {
        failForm(form, err);
        button.disabled = false;
      }
    });
    bindTest(form, true);

    load();
  }

  /* ── one source's page ────────────────────────────────────────────────────────────── */
  function sourcePage(root) {
    const sourceId = root.dataset.source;
    const base = "/v1/sources/" + sourceId;
    const form = root.querySelector('[data-source-form="edit"]');
    const result = DF.field(root, "action_result");
    const panel = root.querySelector("[data-sync]");
    let watching = null;

    async function load() {
      try {
        const source = await DF.api("GET", base);
        DF.setText(root, "title", source.name);
        document.title = source.name + " · Dragonfly Ingest";
        fillForm(form, source);
        DF.message(DF.field(root, "error"), "");
      } catch (e) {
        DF.message(DF.field(root, "error"), e.status === 404
          ? "This source does not exist (it may have been deleted); go back to the list of sources."
          : e.message, true);
        root.querySelectorAll("button, input, textarea").forEach((el) => { el.disabled = true; });
      } finally {
        DF.field(root, "loading").hidden = true;
      }
    }

    async function history() {
      const data = await DF.api("GET", base + "/syncs?limit=10");
      DF.field(root, "syncs").replaceChildren(...data.items.map((s) => DF.h("tr", {},
        DF.h("td", { "data-label": "Started" }, DF.h("time", { datetime: s.started_at }, DF.localTime(s.started_at))),
        DF.h("td", { "data-label": "Status" }, DF.pill(s.status)),
        DF.h("td", { "data-label": "New" }, s.counters.new),
        DF.h("td", { "data-label": "Changed" }, s.counters.changed),
        DF.h("td", { "data-label": "Deleted" }, s.counters.deleted),
        DF.h("td", { "data-label": "Failed" }, s.counters.failed + s.counters.still_failed),
        DF.h("td", { "data-label": "Ingested" }, s.ingest.succeeded + " ok, " + s.ingest.failed +
          " failed" + (s.ingest.queued + s.ingest.running ? ", " + (s.ingest.queued + s.ingest.running) + " to go" : "")),
        DF.h("td", {}, DF.h("button", { type: "button", class: "secondary",
          "aria-label": "Show the sync of " + DF.localTime(s.started_at),
          onclick: () => watch(s.sync_id) }, "Show")))));
      if (!data.items.length) {
        DF.field(root, "syncs").append(DF.h("tr", {}, DF.h("td", { colspan: "8" },
          "Not synced yet; press Sync now.")));
      }
      return data.items;
    }

    function showSync(sync) {
      panel.hidden = false;
      panel.dataset.syncId = sync.sync_id;
      panel.dataset.status = sync.status;
      const status = DF.field(panel, "sync_status");
      status.replaceChildren(DF.pill(sync.status, "sync_pill"));
      DF.setText(panel, "sync_times", "Started " + DF.localTime(sync.started_at) +
        (sync.finished_at ? ", finished " + DF.localTime(sync.finished_at) +
          " (" + DF.duration(DF.seconds(sync.started_at, sync.finished_at)) + ")" : ", running…"));
      const counters = DF.field(panel, "counters");
      counters.replaceChildren(...COUNTERS.map(([key, label]) => DF.h("div", {},
        DF.h("dt", {}, label), DF.h("dd", { "data-counter": key }, sync.counters[key]))),
        DF.h("div", {}, DF.h("dt", {}, "Downloaded"),
          DF.h("dd", { "data-counter": "bytes" }, DF.size(sync.counters.bytes))));
      const listing = DF.field(panel, "sync_listing");
      const incomplete = sync.status !== "running" && !sync.listing_complete;
      DF.message(listing, incomplete ? "The bucket listing did not complete, so nothing was " +
        "deactivated; fix the cause and sync again." : "");
      DF.message(DF.field(panel, "sync_error"), sync.error || "", true);
      DF.setText(panel, "ingest", ingestText(sync.ingest));
      DF.field(panel, "sync_runs").replaceChildren(...(sync.runs || []).map((r) => DF.h("li", {},
        DF.pill(r.status), " ", DF.link("/runs/" + r.run_id, r.title || r.run_id),
        r.error ? " — " + r.error : "")));
      const issues = sync.issues || [];
      DF.field(panel, "issues_box").hidden = issues.length === 0;
      DF.field(panel, "issues").replaceChildren(...issues.map((i) => DF.h("tr", {},
        DF.h("td", { "data-label": "Key" }, DF.h("code", { class: "wrap" }, i.key)),
        DF.h("td", { "data-label": "Outcome" }, i.run_id
          ? DF.link("/runs/" + i.run_id, i.outcome === "still_failed" ? "Still failed" : i.outcome)
          : ({ skipped: "Skipped", failed: "Failed" }[i.outcome] || i.outcome)),
        DF.h("td", { "data-label": "Reason" }, i.reason))));
    }

    function watch(syncId) {
      if (watching) watching.stop();
      let last = "";
      watching = DF.poll(async function () {
        const sync = await DF.api("GET", base + "/syncs/" + syncId);
        const now = JSON.stringify([sync.status, sync.counters, sync.issues, sync.error,
          sync.ingest, sync.runs]);
        const changed = now !== last;
        last = now;
        if (changed) showSync(sync);
        const running = sync.status === "running";
        // Runs go on after the sync: keep watching until none of its files is waiting.
        const waiting = sync.ingest && sync.ingest.queued + sync.ingest.running > 0;
        if (!running && changed) history().catch(() => {});
        return { changed, active: running || waiting, stop: !running && !waiting };
      });
      watching.now();
    }

    root.querySelector('[data-action="sync"]').addEventListener("click", async function () {
      const button = this;
      button.disabled = true;
      try {
        const started = await trigger(sourceId);
        DF.message(result, started.note + " Its counters update below.");
        watch(started.syncId);
        history().catch(() => {});
      } catch (e) {
        DF.message(result, e.message, true);
      } finally {
        button.disabled = false;
      }
    });

    root.querySelector('[data-action="delete"]').addEventListener("click", async function () {
      if (!window.confirm("Delete this source? Its documents stop being served; nothing in the bucket is touched.")) return;
      try {
        await DF.api("DELETE", base);
        location.assign("/admin/sources");
      } catch (e) {
        DF.message(result, e.message, true);
      }
    });

    form.addEventListener("submit", async function (e) {
      e.preventDefault();
      const error = DF.field(form, "form_error");
      try {
        const source = await DF.api("PATCH", base, readForm(form, false));
        fillForm(form, source);
        DF.setText(root, "title", source.name);
        DF.message(error, "");
        clearFieldErrors(form);
        DF.message(result, "Saved; the changes apply from the next sync.");
      } catch (err) {
        failForm(form, err);
      }
    });
    bindTest(form, false);

    load().then(async function () {
      const wanted = new URLSearchParams(location.search).get("sync");
      const items = await history().catch(() => []);
      const latest = wanted || (items[0] && items[0].sync_id);
      if (latest) watch(latest);
    });
  }

  const list = document.querySelector("[data-sources-list]");
  if (list) listPage(list);
  const one = document.querySelector("[data-source]");
  if (one) sourcePage(one);
})();
