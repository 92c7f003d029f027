/* Upload page: pick or drop several files; each uploads with its own progress bar
 * (XMLHttpRequest, because fetch cannot report upload progress), then shows its answer and
 * follows its run live. */
(function () {
  "use strict";
  const DF = window.DF;
  const zone = document.querySelector("[data-dropzone]");
  if (!zone) return;
  const input = document.getElementById("files");
  const list = document.querySelector("[data-uploads]");
  const template = document.getElementById("upload-item");
  const maxBytes = Number(zone.dataset.maxBytes);
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

  function add(files) {
    const batch = document.createDocumentFragment();  // newest batch on top, in chosen order
    for (const file of files) {
      const item = template.content.firstElementChild.cloneNode(true);
      DF.setText(item, "name", file.name);
      DF.setText(item, "size", DF.size(file.size));
      DF.field(item, "progress").setAttribute("aria-label", "Upload of " + file.name);
      batch.append(item);
      if (file.size > maxBytes) {
        fail(item, "Too large: " + file.name + " is " + DF.size(file.size) + ", over the " +
          DF.size(maxBytes) + " limit; split or compress it and upload again.");
        continue;
      }
      outcome(item, "Waiting to upload…");
      waiting.push([file, item]);
    }
    list.prepend(batch);
    next();
  }

  function next() {
    while (uploading < PARALLEL && waiting.length) {
      const [file, item] = waiting.shift();
      uploading++;
      send(file, item).finally(() => { uploading--; next(); });
    }
  }

  function send(file, item) {
    return new Promise(function (resolve) {
      const xhr = new XMLHttpRequest();
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
        answer(item, xhr.status, body);
        resolve();
      };
      xhr.onerror = function () {
        fail(item, "The upload was interrupted; check your connection and upload the file again.");
        resolve();
      };
      outcome(item, "Uploading…");
      item.dataset.outcome = "uploading";
      const form = new FormData();
      form.append("file", file, file.name);
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

  function fail(item, text) {
    item.classList.add("is-error");
    item.dataset.outcome = "error";
    outcome(item, text);
  }

  const PREFIX = { file_too_large: "Too large: ", unsupported_type: "Unsupported type: ",
    empty_file: "Empty file: " };

  function answer(item, status, body) {
    if (status === 202 && body) {
      item.dataset.outcome = "queued";
      item.dataset.runId = body.run_id;
      const pill = DF.pill("queued", "run_status");
      outcome(item, "Uploaded; waiting for a worker.", "/runs/" + body.run_id, "Follow its run")
        .prepend(pill, " ");
      follow(item, body.run_id, pill);
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
  }

  // Follow a queued run until it finishes, so the upload list tells the whole story.
  function follow(item, runId, pill) {
    DF.poll(async function () {
      const run = await DF.api("GET", "/v1/ingestion-runs/" + encodeURIComponent(runId));
      const changed = item.dataset.status !== run.status || run.status === "running";
      item.dataset.status = run.status;
      DF.setPill(pill, run.status);
      if (run.status === "running") {
        outcome(item, "Processing: " + (run.stage || "starting") + ", " +
          Math.round((run.progress || 0) * 100) + "%.", "/runs/" + runId, "Follow its run")
          .prepend(pill, " ");
      } else if (run.status === "succeeded") {
        outcome(item, "Ingested: " + ((run.stats || {}).chunks_created ?? "") + " chunks.",
          "/documents/" + run.doc_id, "Open the document").prepend(pill, " ");
      } else if (run.status === "failed") {
        item.classList.add("is-error");
        outcome(item, "Failed: " + (run.error || "see the run for details."), "/runs/" + runId,
          "Open the run").prepend(pill, " ");
      }
      const active = run.status === "queued" || run.status === "running";
      return { changed, active, stop: !active };
    });
  }
})();
