/* Records imports, shared by the Imports page and the batch page: status labels and the one
 * sentence on where a batch stands, as templates/imports/macros.html words them. */
(function () {
  "use strict";
  const LABELS = { pending: "Pending", processing: "Processing", staging_complete: "Staged",
    promoting: "Promoting", completed: "Completed", partial: "Partial", failed: "Failed" };
  const ACTIVE = new Set(["pending", "processing", "staging_complete", "promoting"]);

  function num(n) { return (n || 0).toLocaleString("en-US"); }
  function rows(n) { return num(n) + (n === 1 ? " row" : " rows"); }

  function summary(b) {
    if (b.status === "failed") return "Failed: " + (b.rejectionReason || "see the batch for details.");
    if (b.status === "completed" || b.status === "partial") {
      return LABELS[b.status] + ": " + rows(b.rowCountInserted) + " accepted, " +
        num(b.rowCountInvalid) + " invalid, " + num(b.rowCountDuplicate) + " duplicate.";
    }
    if (b.status === "pending") return "Waiting for a worker.";
    return (LABELS[b.status] || b.status) + ": " + rows(b.rowCountTotal) + " read so far.";
  }

  function setPill(el, status) {
    if (!el) return;
    el.className = "pill batch-" + (status || "none");
    el.textContent = LABELS[status] || status || "—";
  }

  function batch(id) {
    return window.DF.api("GET", "/intake/batches/" + encodeURIComponent(id));
  }

  window.DFImports = { LABELS, ACTIVE, summary, setPill, batch, num,
    active: (status) => ACTIVE.has(status) };
})();
