/* Upload page: pick or drop several files; each uploads with its own progress bar
 * (XMLHttpRequest, because fetch cannot report upload progress), then shows its answer and
 * follows its run live.
 *
 * Files the server would refuse by type or because they are empty never leave the browser:
 * the allowed extensions come from the gateway's own table (data-allowed). Each row can be
 * cancelled while waiting or uploading and tried again after a cancel or failure; a summary
 * line counts the batch; leaving the page mid-upload asks first. A file whose name matches one
 * of the tenant's uploaded documents is offered as a new version of it (doc_id, ADR 0045). */
(function () {
  "use strict";
  const DF = window.DF;
  const zone = document.querySelector("[data-dropzone]");
  if (!zone) return;
  const input = document.getElementById("files");
  const list = document.querySelector("[data-uploads]");
  const template = document.getElementById("upload-item");
  const summary = DF.field(document, "summary");
  const maxBytes = Number(zone.dataset.maxBytes);
  const allowed = new Set(zone.dataset.allowed.split(",").filter(Boolean));
  const PARALLEL = 3;
  const waiting = [];
  let uploading = 0;

  zone.querySelector('[data-action="pick"]').addEventListener("click", () => input.click());
  input.addEventListener("change", function () {
    add(input.files);
    input.value = ""; // choosing the same file again must fire change again
  });

  zone.addEventListener("dragover", function (e) {
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("is-over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("is-over"));
  zone.addEventListener("drop", function (e) {
    e.preventDefault();
    zone.classList.remove("is-over");
    add(e.dataTransfer.files);
  });
  // A file dropped beside the zone must not make the browser leave the page to open it.
  for (const type of ["dragover", "drop"]) {
    document.addEventListener(type, (e) => { if (!zone.contains(e.target)) e.preventDefault(); });
  }

  // Leaving mid-upload would abort the uploads silently: ask first.
  window.addEventListener("beforeunload", function (e) {
    if (uploading > 0 || waiting.length > 0 || list.querySelector('[data-outcome="deciding"]')) {
      e.preventDefault();
      e.returnValue = "";
    }
  });

  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }

  function refusal(file) {
    const ext = file.name.includes(".") ? file.name.split(".").pop().toLowerCase() : "";
    if (!allowed.has(ext)) {
      return "Unsupported type: ." + (ext || "?") + " files are not accepted; upload one of: " +
        [...allowed].join(", ") + ".";
    }
    if (file.size === 0) return "Empty file: " + file.name + " has no content; nothing was sent.";
    if (file.size > maxBytes) {
      return "Too large: " + file.name + " is " + DF.size(file.size) + ", over the " +
        DF.size(maxBytes) + " limit; split or compress it and upload again.";
    }
    return null;
  }

  function add(files) {
    const batch = document.createDocumentFragment();  // newest batch on top, in chosen order
    for (const file of files) {
      const item = template.content.firstElementChild.cloneNode(true);
      DF.setText(item, "name", file.name);
      DF.setText(item, "size", DF.size(file.size));
      DF.field(item, "progress").setAttribute("aria-label", "Upload of " + file.name);
      batch.append(item);
      const refused = refusal(file);
      if (refused) {
        refuse(item, refused);
        continue;
      }
      item.querySelector('[data-action="cancel"]').addEventListener("click", () => cancel(item));
      item.querySelector('[data-action="retry"]').addEventListener("click", () => enqueue(file, item));
      enqueue(file, item);
    }
    list.prepend(batch);
    count();
  }

  // Refused in the browser: an error row without a progress bar and without a request.
  function refuse(item, text) {
    item.querySelector(".progress").hidden = true;
    item.querySelector(".upload-actions").hidden = true;
    item.classList.add("is-error", "is-refused");
    item.dataset.outcome = "refused";
    outcome(item, text);
  }

  async function enqueue(file, item, docId) {
    item.classList.remove("is-error", "is-skipped");
    item.querySelector(".progress").hidden = false;
    buttons(item, true, false);
    progress(item, 0);
    if (docId === undefined) {
      docId = await chooseDocument(file, item);
      if (docId === false) return; // cancelled while asking
    }
    item.dataset.outcome = "waiting";
    outcome(item, "Waiting to upload…");
    const entry = { file, item, docId };
    item._entry = entry;
    waiting.push(entry);
    count();
    next();
  }

  // The tenant's uploaded documents made from a file of this name: offer a new version.
  async function chooseDocument(file, item) {
    let found = [];
    try {
      found = (await DF.api("GET", "/v1/documents?filename=" + encodeURIComponent(file.name))).items;
    } catch (e) {
      return null; // not knowing only loses the offer; the upload still works
    }
    if (!found.length) return null;
    const doc = found[0];
    item.dataset.outcome = "deciding";
    count();
    return new Promise(function (resolve) {
      item._decide = resolve;
      const yes = DF.h("button", { type: "button", "data-action": "new-version",
        onclick: () => resolve(doc.doc_id) }, "Upload as a new version");
      const no = DF.h("button", { type: "button", class: "secondary", "data-action": "new-document",
        onclick: () => resolve(null) }, "Keep it as a separate document");
      outcome(item, "Upload as a new version of " + doc.title + "?").append(" ", yes, " ", no);
    }).finally(() => { item._decide = null; });
  }

  function next() {
    while (uploading < PARALLEL && waiting.length) {
      const entry = waiting.shift();
      uploading++;
      send(entry).finally(() => { uploading--; count(); next(); });
    }
  }

  function cancel(item) {
    if (item._decide) { item._decide(false); }
    const entry = item._entry;
    const at = waiting.indexOf(entry);
    if (at >= 0) waiting.splice(at, 1);
    if (item._xhr) item._xhr.abort();
    item.dataset.outcome = "cancelled";
    item.querySelector(".progress").hidden = true;
    outcome(item, "Cancelled; nothing was ingested.");
    buttons(item, false, true);
    count();
  }

  function buttons(item, canCancel, canRetry) {
    item.querySelector('[data-action="cancel"]').hidden = !canCancel;
    item.querySelector('[data-action="retry"]').hidden = !canRetry;
  }

  function send(entry) {
    const { file, item, docId } = entry;
    return new Promise(function (resolve) {
      if (item.dataset.outcome === "cancelled") return resolve();
      const xhr = new XMLHttpRequest();
      item._xhr = xhr;
      xhr.open("POST", "/v1/ingest");
      xhr.setRequestHeader("Accept", "application/json");
      if (DF.csrf) xhr.setRequestHeader("X-CSRF-Token", DF.csrf);
      xhr.upload.onprogress = function (e) {
        if (e.lengthComputable) progress(item, e.loaded / e.total);
      };
      xhr.upload.onload = () => progress(item, 1);
      xhr.onload = function () {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
        item._xhr = null;
        answer(item, xhr.status, body);
        resolve();
      };
      xhr.onerror = function () {
        item._xhr = null;
        fail(item, "The upload was interrupted; check your connection and try again.");
        resolve();
      };
      xhr.onabort = function () { item._xhr = null; resolve(); };
      outcome(item, "Uploading…");
      item.dataset.outcome = "uploading";
      const form = new FormData();
      form.append("file", file, file.name);
      if (docId) form.append("doc_id", docId);
      xhr.send(form);
    });
  }

  function progress(item, fraction) {
    const pct = Math.round(fraction * 100);
    DF.field(item, "progress").value = pct;
    DF.setText(item, "percent", pct + "%");
  }

  function outcome(item, text, linkTo, linkText) {
    const el = DF.field(item, "outcome");
    el.replaceChildren(text);
    if (linkTo) el.append(" ", DF.link(linkTo, linkText));
    return el;
  }

  // Failed after sending: an error row (no full bar beside it) that can be tried again.
  function fail(item, text) {
    item.classList.add("is-error");
    item.dataset.outcome = "error";
    item.querySelector(".progress").hidden = true;
    outcome(item, text);
    buttons(item, false, true);
    count();
  }

  const PREFIX = { file_too_large: "Too large: ", unsupported_type: "Unsupported type: ",
    empty_file: "Empty file: " };

  function answer(item, status, body) {
    buttons(item, false, false);
    if (status === 202 && body) {
      item.dataset.outcome = "queued";
      item.dataset.runId = body.run_id;
      const pill = DF.pill("queued", "run_status");
      outcome(item, "Uploaded; waiting for a worker.", "/runs/" + body.run_id, "Follow its run")
        .prepend(pill, " ");
      follow(item, body.run_id, pill);
      recent.now();
    } else if (status === 200 && body && body.status === "skipped") {
      item.classList.add("is-skipped");
      item.dataset.outcome = "skipped";
      const reason = body.reason || "already ingested, no changes";
      if (body.run_id) outcome(item, "Skipped: " + reason + ".", "/runs/" + body.run_id, "Follow that run");
      else outcome(item, "Skipped: " + reason + ".", "/documents/" + body.doc_id, "Open the document");
    } else if (status === 401) {
      fail(item, "Your session has ended; sign in again, then upload this file again.");
    } else {
      const error = DF.errorFrom(status, body);
      fail(item, (PREFIX[error.code] || "") + error.message);
    }
    count();
  }

  // A queued upload is counted by where its run is now (follow() keeps data-status).
  const RUN_STATE = { running: "processing", succeeded: "ingested", failed: "error" };

  // "3 ingested, 1 queued, 1 skipped, 1 refused": what became of everything chosen here.
  function count() {
    const n = {};
    for (const li of list.querySelectorAll(".upload")) {
      const state = li.dataset.outcome === "queued" ? RUN_STATE[li.dataset.status] || "queued"
        : li.dataset.outcome;
      n[state] = (n[state] || 0) + 1;
    }
    const parts = [
      [n.uploading, "uploading"], [(n.waiting || 0) + (n.deciding || 0), "waiting"],
      [n.queued, "queued"], [n.processing, "processing"], [n.ingested, "ingested"],
      [n.skipped, "skipped"], [n.refused, "refused"],
      [n.error, "failed"], [n.cancelled, "cancelled"],
    ].filter(([k]) => k).map(([k, label]) => k + " " + label);
    summary.hidden = parts.length === 0;
    summary.textContent = parts.join(", ");
  }

  function runText(run) {
    if (run.status === "running") return "Processing: " + (run.stage || "starting") + ", " +
      Math.round((run.progress || 0) * 100) + "%.";
    if (run.status === "succeeded") {
      return "Ingested: " + plural((run.stats || {}).chunks_created || 0, "chunk", "chunks") + ".";
    }
    if (run.status === "failed") return "Failed: " + (run.error || "see the run for details.");
    return "Waiting for a worker.";
  }

  // Follow a queued run until it finishes, so the upload list tells the whole story.
  function follow(item, runId, pill) {
    DF.poll(async function () {
      const run = await DF.api("GET", "/v1/ingestion-runs/" + encodeURIComponent(runId));
      const changed = item.dataset.status !== run.status || run.status === "running";
      item.dataset.status = run.status;
      DF.setPill(pill, run.status);
      if (run.status === "running") {
        outcome(item, runText(run), "/runs/" + runId, "Follow its run").prepend(pill, " ");
      } else if (run.status === "succeeded") {
        outcome(item, runText(run), "/documents/" + run.doc_id, "Open the document").prepend(pill, " ");
      } else if (run.status === "failed") {
        item.classList.add("is-error");
        outcome(item, runText(run), "/runs/" + runId, "Open the run").prepend(pill, " ");
      }
      if (changed) count();
      const active = run.status === "queued" || run.status === "running";
      return { changed, active, stop: !active };
    });
  }

  /* ── recent uploads: this user's latest runs, from the API, live (ADR 0030's polling) ── */
  const recentList = document.querySelector("[data-recent]");
  const me = zone.dataset.userId;
  let recentSig = "";
  const recent = DF.poll(async function () {
    const data = await DF.api("GET", "/v1/ingestion-runs?limit=50");
    const mine = data.items.filter((r) => r.initiated_by === me && r.run_type === "manual_upload").slice(0, 10);
    const sig = mine.map((r) => [r.run_id, r.status, r.stage, r.progress].join("|")).join(";");
    const changed = sig !== recentSig;
    recentSig = sig;
    if (changed) {
      recentList.replaceChildren(...(mine.length ? mine.map(function (run) {
        const name = (run.config || {}).original_filename || (run.config || {}).title || run.run_id;
        return DF.h("li", { "data-run-id": run.run_id, "data-status": run.status },
          DF.pill(run.status, "status"), " ", DF.link("/runs/" + run.run_id, name), " ",
          DF.h("span", { class: "hint" }, runText(run)));
      }) : [DF.h("li", { class: "empty" }, "No uploads yet.")]));
    }
    return { changed, active: mine.some((r) => r.status === "queued" || r.status === "running") };
  });
})();
