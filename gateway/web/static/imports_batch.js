/* Batch page: while the batch runs, follow it. With the live stream open (GET /v1/live,
 * docs/decisions/0160), each event of this batch re-renders the page in place from the server
 * (status, counts, code chart, error table); without it, poll /intake/batches/{id}
 * (docs/decisions/0030's backoff), update the figures, and re-render once it finishes (0125). */
(function () {
  "use strict";
  const DF = window.DF, IM = window.DFImports;
  const first = document.querySelector("[data-batch]");
  if (!first || first.dataset.active !== "true") return;
  const id = first.dataset.batchId;
  const root = () => document.querySelector("[data-batch]");

  function fill(b) {
    const el = root();
    IM.setPill(DF.field(el, "status"), b.status);
    DF.setText(el, "total", IM.num(b.rowCountTotal));
    DF.setText(el, "invalid", IM.num(b.rowCountInvalid));
    DF.setText(el, "duplicate", IM.num(b.rowCountDuplicate));
    const rate = b.errorRate || 0, limit = b.errorThresholdPercent;
    DF.field(el, "rate_rect").setAttribute("width", String(Math.min(rate, 100)));
    DF.field(el, "budget").classList.toggle("is-over", rate > limit);
    DF.field(el, "budget").classList.toggle("is-within", rate <= limit);
    DF.setText(el, "error_rate", rate.toFixed(1) + "%");
    DF.setText(el, "budget_verdict", rate > limit ? "over the limit" : "within the limit");
  }

  // The server's page of this batch, swapped into <main>: no reload, nothing re-runs.
  async function rerender() {
    let response;
    try {
      response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    } catch (e) {
      throw new DF.ApiError(0, "network", DF.fallback(0));
    }
    if (!response.ok) throw DF.errorFrom(response.status, null);
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const main = fresh.getElementById("main");
    if (!main || !main.querySelector("[data-batch]")) throw DF.errorFrom(500, null);
    document.getElementById("main").replaceChildren(...[...main.childNodes].map((n) => document.adoptNode(n)));
    DF.localiseTimes(document.getElementById("main"));
    return root().dataset.active === "true";
  }

  // Events of this batch: its own status, its run's, and its completion event.
  function mine(msg) {
    return (msg.data.batch_id || null) === id;
  }

  DF.poll(async function () {
    if (DF.live.open) {
      const active = await rerender();
      return { changed: true, active, stop: !active };
    }
    const b = await IM.batch(id);
    const sig = [b.status, b.rowCountTotal, b.rowCountInvalid].join("|");
    const changed = root().dataset.sig !== sig;
    root().dataset.sig = sig;
    root().dataset.status = b.status;
    fill(b);
    if (!IM.active(b.status)) {
      await rerender();
      return { stop: true };
    }
    return { changed, active: true };
  }, { live: mine });
})();
