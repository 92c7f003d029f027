/* Imports page: send one records file with the form's fields (XMLHttpRequest, for upload
 * progress, with the CSRF header), then keep the user's imports live by polling each unfinished
 * batch's /intake/batches/{id} (docs/decisions/0030's backoff, 0125). A file already imported
 * under the contract answers 200 with its batch: shown as such, nothing new runs. */
(function () {
  "use strict";
  const DF = window.DF, IM = window.DFImports;
  const form = document.querySelector("[data-import-form]");
  if (!form) return;
  const list = document.querySelector("[data-imports]");
  const template = document.getElementById("import-item");
  const fileInput = document.getElementById("import-file");
  const formError = DF.field(form, "form_error");
  const maxBytes = Number(form.dataset.maxBytes);
  const accepted = new Set(form.dataset.accepted.split(",").concat(["ndjson"]));
  const submit = form.querySelector('button[type="submit"]');
  const contractSelect = document.getElementById("contract");
  const adFields = form.querySelector("[data-ad-fields]");
  const recordsFields = form.querySelector("[data-records-fields]");
  let sending = null;

  // The ad-metrics contract takes a platform, a client and its own sources; the records
  // contracts take theirs. A disabled fieldset's fields are not sent.
  function showContractFields() {
    const ad = contractSelect.value === adFields.dataset.adContract;
    adFields.hidden = adFields.disabled = !ad;
    recordsFields.hidden = recordsFields.disabled = ad;
  }
  contractSelect.addEventListener("change", showContractFields);
  showContractFields();

  window.addEventListener("beforeunload", function (e) {
    if (sending) { e.preventDefault(); e.returnValue = ""; }
  });

  function refusal(file) {
    const ext = file.name.includes(".") ? file.name.split(".").pop().toLowerCase() : "";
    if (!accepted.has(ext)) return "Unsupported type: ." + (ext || "?") + " files are not accepted; upload a CSV or JSON-lines file.";
    if (file.size === 0) return "Empty file: " + file.name + " has no content; nothing was sent.";
    if (file.size > maxBytes) return "Too large: " + file.name + " is " + DF.size(file.size) + ", over the " + DF.size(maxBytes) + " limit.";
    return null;
  }

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    DF.message(formError, "");
    const file = fileInput.files[0];
    if (!file) { DF.message(formError, "Choose a file to import.", true); return; }
    if (!adFields.disabled && !form.elements.platform.value) {
      DF.message(formError, "Choose the ad platform whose export this is.", true);
      form.elements.platform.focus();
      return;
    }
    const refused = refusal(file);
    if (refused) { DF.message(formError, refused, true); return; }
    send(file, new FormData(form));
  });

  function newItem(file, contract) {
    const item = template.content.firstElementChild.cloneNode(true);
    DF.setText(item, "link", file.name);
    DF.setText(item, "contract", contract);
    IM.setPill(DF.field(item, "status"), null);
    DF.field(item, "status").textContent = "Uploading";
    item.querySelector(".progress").hidden = false;
    DF.field(item, "progress").setAttribute("aria-label", "Upload of " + file.name);
    const empty = list.querySelector(".empty");
    if (empty) empty.remove();
    list.prepend(item);
    return item;
  }

  function send(file, data) {
    const platform = data.get("platform");
    const item = newItem(file, data.get("contract") + (platform ? " · " + platform : ""));
    const xhr = new XMLHttpRequest();
    sending = xhr;
    submit.disabled = true;
    xhr.open("POST", "/v1/imports");
    xhr.setRequestHeader("Accept", "application/json");
    if (DF.csrf) xhr.setRequestHeader("X-CSRF-Token", DF.csrf);
    xhr.upload.onprogress = function (e) { if (e.lengthComputable) progress(item, e.loaded / e.total); };
    xhr.upload.onload = () => progress(item, 1);
    xhr.onload = function () {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      done();
      answer(item, xhr.status, body);
    };
    xhr.onerror = function () {
      done();
      fail(item, "The upload was interrupted; check your connection and try again.");
    };
    DF.setText(item, "summary", "Uploading…");
    item.dataset.outcome = "uploading";
    xhr.send(data);
  }

  function done() {
    sending = null;
    submit.disabled = false;
  }

  function progress(item, fraction) {
    const pct = Math.round(fraction * 100);
    DF.field(item, "progress").value = pct;
    DF.setText(item, "percent", pct + "%");
  }

  function fail(item, text) {
    item.classList.add("is-error");
    item.dataset.outcome = "error";
    item.querySelector(".progress").hidden = true;
    IM.setPill(DF.field(item, "status"), "failed");
    DF.field(item, "status").textContent = "Not sent";
    DF.setText(item, "summary", text);
  }

  function answer(item, status, body) {
    item.querySelector(".progress").hidden = true;
    if ((status === 202 || status === 200) && body && body.batch_id) {
      item.dataset.batchId = body.batch_id;
      item.dataset.status = body.status;
      DF.field(item, "link").href = "/imports/" + body.batch_id;
      IM.setPill(DF.field(item, "status"), body.status);
      if (body.duplicate) {
        // The same file under this contract: its batch, no new work (docs/decisions/0091).
        item.classList.add("is-duplicate");
        item.dataset.outcome = "duplicate";
        const sentence = DF.field(item, "summary");
        sentence.replaceChildren("Already imported: batch ",
          DF.link("/imports/" + body.batch_id, body.batch_id.slice(0, 8)),
          " (" + (IM.LABELS[body.status] || body.status) + "); nothing new was imported.");
      } else {
        item.dataset.outcome = "accepted";
        DF.setText(item, "summary", "Uploaded; waiting for a worker.");
      }
      fileInput.value = ""; // the next file keeps the contract and limits chosen
      live.now();
    } else if (status === 401) {
      fail(item, "Your session has ended; sign in again, then upload this file again.");
    } else {
      fail(item, DF.errorFrom(status, body).message);
    }
  }

  // Every unfinished batch in the list, one read each; a duplicate keeps its own sentence.
  function fill(item, b) {
    const sig = [b.status, b.rowCountTotal].join("|");
    const changed = item.dataset.sig !== sig;
    item.dataset.sig = sig;
    item.dataset.status = b.status;
    IM.setPill(DF.field(item, "status"), b.status);
    item.classList.toggle("is-error", b.status === "failed");
    if (item.dataset.outcome !== "duplicate") DF.setText(item, "summary", IM.summary(b));
    return changed;
  }

  const live = DF.poll(async function () {
    const items = [...list.querySelectorAll(".import-item[data-batch-id]")]
      .filter((li) => li.dataset.batchId && IM.active(li.dataset.status));
    let changed = false;
    for (const item of items) changed = fill(item, await IM.batch(item.dataset.batchId)) || changed;
    return { changed, active: items.length > 0 };
  });
})();
