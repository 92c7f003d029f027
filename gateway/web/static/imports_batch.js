/* Batch page: while the batch runs, poll /intake/batches/{id} (docs/decisions/0030's backoff)
 * and update its status, counts and error budget in place; when it finishes, reload once so
 * the server renders the final counts, the code chart and the error table (0125). */
(function () {
  "use strict";
  const DF = window.DF, IM = window.DFImports;
  const root = document.querySelector("[data-batch]");
  if (!root || root.dataset.active !== "true") return;
  const id = root.dataset.batchId;

  function fill(b) {
    IM.setPill(DF.field(root, "status"), b.status);
    DF.setText(root, "total", IM.num(b.rowCountTotal));
    DF.setText(root, "invalid", IM.num(b.rowCountInvalid));
    DF.setText(root, "duplicate", IM.num(b.rowCountDuplicate));
    const rate = b.errorRate || 0, limit = b.errorThresholdPercent;
    DF.field(root, "rate_rect").setAttribute("width", String(Math.min(rate, 100)));
    DF.field(root, "budget").classList.toggle("is-over", rate > limit);
    DF.field(root, "budget").classList.toggle("is-within", rate <= limit);
    DF.setText(root, "error_rate", rate.toFixed(1) + "%");
    DF.setText(root, "budget_verdict", rate > limit ? "over the limit" : "within the limit");
  }

  DF.poll(async function () {
    const b = await IM.batch(id);
    const sig = [b.status, b.rowCountTotal, b.rowCountInvalid].join("|");
    const changed = root.dataset.sig !== sig;
    root.dataset.sig = sig;
    root.dataset.status = b.status;
    fill(b);
    if (!IM.active(b.status)) {
      location.reload();
      return { stop: true };
    }
    return { changed, active: true };
  });
})();
