/* Dead letters, over /v1/admin/dlq (operators: every tenant, purge) or /v1/dead-letters (a tenant
 * admin's own): list, inspect, redrive (selected or all). The page's data-api names which. */
(function () {
  "use strict";
  const DF = window.DF;
  const OUTCOMES = { redriven: "redriven", skipped: "skipped", error: "not redriven",
    would_redrive: "would be redriven" };

  function age(seconds) { return DF.duration(seconds); }

  function runLink(runId) {
    return runId ? DF.link("/runs/" + runId, runId.slice(0, 8) + "…") : "—";
  }

  function report(result) {
    const items = result.items || [];
    if (!items.length) return "Nothing matched: no message was redriven.";
    const counts = {};
    for (const item of items) counts[item.outcome] = (counts[item.outcome] || 0) + 1;
    const parts = Object.entries(counts).map(([k, n]) => n + " " + (OUTCOMES[k] || k));
    const details = items.filter((i) => i.detail).map((i) => i.detail);
    return "Done: " + parts.join(", ") + "." + (details.length ? " " + details[0] : "");
  }

  async function redrive(api, body) {
    return DF.api("POST", api + "/redrive", Object.assign(
      { reason: "redriven from the web UI" }, body));
  }

  /* ── the list ─────────────────────────────────────────────────────────────────────── */
  function listPage(root) {
    const api = root.dataset.api;
    const base = root.dataset.base;
    const everyone = api === "/v1/admin/dlq";
    const rows = DF.field(root, "rows");
    const table = DF.field(root, "table");
    const result = DF.field(root, "action_result");
    const selected = root.querySelector('[data-action="redrive-selected"]');
    const all = root.querySelector('[data-action="redrive-all"]');
    const selectAll = root.querySelector('[data-action="select-all"]');

    function boxes() { return [...rows.querySelectorAll('input[type="checkbox"]')]; }

    function updateSelection() {
      const checked = boxes().filter((b) => b.checked);
      selected.disabled = checked.length === 0;
      selected.textContent = checked.length ? "Redrive selected (" + checked.length + ")" : "Redrive selected";
      selectAll.checked = checked.length > 0 && checked.length === boxes().length;
    }

    async function load() {
      DF.field(root, "loading").hidden = false;
      try {
        const data = await DF.api("GET", api + "?limit=" + root.dataset.limit);
        rows.replaceChildren(...data.items.map(row));
        table.hidden = data.items.length === 0;
        all.disabled = data.items.length === 0;
        DF.field(root, "empty").hidden = data.items.length > 0;
        const incomplete = DF.field(root, "incomplete");
        incomplete.hidden = data.total <= data.items.length;
        incomplete.textContent = "Showing " + data.items.length + " of " + data.total + " dead letters, oldest first.";
        DF.message(DF.field(root, "error"), "");
      } catch (e) {
        DF.message(DF.field(root, "error"), e.message, true);
      } finally {
        DF.field(root, "loading").hidden = true;
        updateSelection();
      }
    }

    function row(letter) {
      const box = DF.h("input", { type: "checkbox", value: letter.message_id,
        "aria-label": "Select message " + letter.message_id });
      box.addEventListener("change", updateSelection);
      const cells = [DF.h("td", {}, box),
        DF.h("td", { "data-label": "Message" }, DF.link(base + "/" + encodeURIComponent(letter.message_id),
          letter.message_id.slice(0, 8) + "…"))];
      if (everyone) cells.push(DF.h("td", { "data-label": "Tenant" }, letter.tenant_id ? letter.tenant_id.slice(0, 8) + "…" : "none"));
      return DF.h("tr", { "data-message-id": letter.message_id }, ...cells,
        DF.h("td", { "data-label": "Run" }, runLink(letter.run_id)),
        DF.h("td", { "data-label": "Run status" }, letter.run_status ? DF.pill(letter.run_status) : "—"),
        DF.h("td", { "data-label": "Receives" }, letter.receive_count),
        DF.h("td", { "data-label": "Age" }, age(letter.age_s)),
        DF.h("td", { "data-label": "Reason" }, letter.reason || "—"));
    }

    const act = (button, work) => DF.act(button, result, work, load);

    selectAll.addEventListener("change", function () {
      boxes().forEach((b) => { b.checked = selectAll.checked; });
      updateSelection();
    });
    selected.addEventListener("click", () => act(selected, async function () {
      const ids = boxes().filter((b) => b.checked).map((b) => b.value);
      return report(await redrive(api, { message_ids: ids }));
    }));
    all.addEventListener("click", function () {
      if (!window.confirm("Send every open dead letter" + (everyone ? "" : " of your tenant") + " back to the ingest queue?")) return;
      act(all, async () => report(await redrive(api, { all: true })));
    });
    root.querySelector('[data-action="reload"]').addEventListener("click", load);

    const purge = root.querySelector("[data-purge]");
    if (purge) purge.addEventListener("submit", function (e) {
      e.preventDefault();
      const olderThan = purge.elements.older_than.value.trim();
      if (!window.confirm("Purge the dead letters older than " + olderThan + "? They cannot be redriven after.")) return;
      act(purge.querySelector("button"), async function () {
        const done = await DF.api("POST", api + "/purge",
          { older_than: olderThan, confirm: true, reason: "purged from the web UI" });
        return "Purged " + done.purged + " message" + (done.purged === 1 ? "" : "s") + ".";
      });
    });

    load();
  }

  /* ── one message ──────────────────────────────────────────────────────────────────── */
  function messagePage(root) {
    const id = root.dataset.dlqMessage;
    const api = root.dataset.api;
    const result = DF.field(root, "action_result");

    async function load() {
      try {
        const m = await DF.api("GET", api + "/" + encodeURIComponent(id));
        DF.setText(root, "reason", m.reason || "—");
        DF.facts(DF.field(root, "summary"), [
          ["Run", runLink(m.run_id)],
          ["Run status", m.run_status ? DF.pill(m.run_status) : "—"],
          ["Run error", (m.run && m.run.error) || "—"],
          ["State", m.status + (m.resolved_by ? " by " + m.resolved_by : "")],
          ["Receives", m.receive_count],
          ["Deliveries to workers", m.deliveries ?? "—"],
          ["Sent", DF.localTime(m.sent_at)],
          ["Age", age(m.age_s)],
          ["Problem with the body", m.problem || "none: it is a valid job"],
        ]);
        const body = typeof m.body === "string" ? m.body : JSON.stringify(m.body, null, 2);
        DF.setText(root, "body", body);
        const attrs = Object.assign({}, m.attributes || {}, m.system_attributes || {});
        DF.facts(DF.field(root, "attributes"), Object.entries(attrs));
        root.querySelector('[data-action="redrive-one"]').hidden = m.status !== "open";
        DF.field(root, "content").hidden = false;
      } catch (e) {
        DF.message(DF.field(root, "error"), e.status === 404
          ? "No such dead letter here; go back to the list."
          : e.message, true);
      } finally {
        DF.field(root, "loading").hidden = true;
      }
    }

    const button = root.querySelector('[data-action="redrive-one"]');
    button.addEventListener("click", async function () {
      button.disabled = true;
      try {
        const done = await redrive(api, { message_ids: [id] });
        DF.message(result, report(done));
        if (done.redriven) button.hidden = true;
      } catch (e) {
        DF.message(result, e.message, true);
      } finally {
        button.disabled = false;
      }
    });
    load();
  }

  const list = document.querySelector("[data-dlq]");
  if (list) listPage(list);
  const one = document.querySelector("[data-dlq-message]");
  if (one) messagePage(one);
})();
