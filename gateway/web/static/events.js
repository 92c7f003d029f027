/* The event ledger, over /v1/events (docs/decisions/0142, 0143, 0194, 0282-0284): list with the
 * filter the page's URL applied, inspect one event, replay dead letters (chosen ones, or all
 * matching the filter), discard all pending and dead-letter events matching the filter
 * (counted first, confirmed, with a reason), discard or correct-and-replay one event with a
 * reason, on the version this page loaded (a changed event is a 409, never overwritten).
 * Payloads and errors are upstream data: they are only ever set as text. */
(function () {
  "use strict";
  const DF = window.DF;
  const STATES = { pending: "Pending", processed: "Processed", dead_letter: "Dead letter",
    discarded: "Discarded" };
  const ACTIONABLE = ["pending", "dead_letter"];
  const FILTERS = ["source_system", "type", "error"];
  const TIMES = ["since", "until"];

  function stateLabel(event) {
    return (STATES[event.state] || event.state) + (event.superseded ? " (superseded)" : "");
  }

  function report(result) {
    const n = result.replayed;
    if (!n) return "Nothing replayed: no dead letter matched (another admin may have replayed them already).";
    return "Replayed " + n + " event" + (n === 1 ? "" : "s") + ": back to pending, a worker applies " + (n === 1 ? "it" : "them") + " shortly.";
  }

  async function replay(body) { return DF.api("POST", "/v1/events/replay", body); }

  /* ── the list ─────────────────────────────────────────────────────────────────────── */
  function listPage(root) {
    const applied = { state: root.dataset.state };
    FILTERS.concat(TIMES).forEach(function (name) {
      const value = root.dataset[name.replace(/_(.)/g, (m, c) => c.toUpperCase())];
      if (value) applied[name] = value;
    });
    const everyone = root.dataset.everyone === "true";
    const rows = DF.field(root, "rows");
    const result = DF.field(root, "action_result");
    const selected = root.querySelector('[data-action="replay-selected"]');
    const all = root.querySelector('[data-action="replay-all"]');
    const purge = root.querySelector('[data-action="discard-all"]');
    const selectAll = root.querySelector('[data-action="select-all"]');

    function boxes() { return [...rows.querySelectorAll('input[type="checkbox"]')]; }

    function updateSelection() {
      const checked = boxes().filter((b) => b.checked);
      selected.disabled = checked.length === 0;
      selected.textContent = checked.length ? "Replay selected (" + checked.length + ")" : "Replay selected";
      selectAll.disabled = boxes().length === 0;
      selectAll.checked = checked.length > 0 && checked.length === boxes().length;
    }

    async function load() {
      DF.field(root, "loading").hidden = false;
      const query = new URLSearchParams({ limit: "200" });
      for (const [k, v] of Object.entries(applied)) if (v && v !== "all") query.set(k, v);
      try {
        const data = await DF.api("GET", "/v1/events?" + query);
        rows.replaceChildren(...data.events.map(row));
        DF.field(root, "table").hidden = data.events.length === 0;
        all.disabled = data.events.length === 0;
        DF.field(root, "empty").hidden = data.events.length > 0;
        const incomplete = DF.field(root, "incomplete");
        incomplete.hidden = data.total <= data.events.length;
        incomplete.textContent = "Showing the newest " + data.events.length + " of " + data.total + " events; narrow the filter to see the others.";
        DF.message(DF.field(root, "error"), "");
      } catch (e) {
        DF.message(DF.field(root, "error"), e.message, true);
      } finally {
        DF.field(root, "loading").hidden = true;
        updateSelection();
      }
    }

    function row(event) {
      const id = String(event.ledger_id);
      // Only dead letters can be replayed; other rows have no box to tick.
      const box = event.state === "dead_letter" ? DF.h("input", { type: "checkbox", value: id,
        "aria-label": "Select event " + id }) : "";
      if (box) box.addEventListener("change", updateSelection);
      const cells = [DF.h("td", {}, box),
        DF.h("td", { "data-label": "Ledger id" }, DF.link("/admin/events/" + id, id))];
      if (everyone) cells.push(DF.h("td", { "data-label": "Tenant" }, event.tenant_id.slice(0, 8) + "…"));
      return DF.h("tr", { "data-ledger-id": id }, ...cells,
        DF.h("td", { "data-label": "Source" }, event.source_system),
        DF.h("td", { "data-label": "Event id", class: "wrap" }, event.source_event_id),
        DF.h("td", { "data-label": "Type" }, event.type),
        DF.h("td", { "data-label": "State" }, stateLabel(event)),
        DF.h("td", { "data-label": "Attempts" }, event.apply_attempt_count),
        DF.h("td", { "data-label": "Error", class: "wrap" }, event.error || "—"),
        DF.h("td", { "data-label": "First seen" }, DF.localTime(event.first_seen_at)));
    }

    const act = (button, work) => DF.act(button, result, work, load);

    selectAll.addEventListener("change", function () {
      boxes().forEach((b) => { b.checked = selectAll.checked; });
      updateSelection();
    });
    selected.addEventListener("click", () => act(selected, async function () {
      const ids = boxes().filter((b) => b.checked).map((b) => Number(b.value));
      return report(await replay({ ledger_ids: ids }));
    }));
    all.addEventListener("click", function () {
      // The filter the list shows, not the form's unsubmitted fields; no filter = every one.
      const body = {};
      FILTERS.forEach((k) => { if (applied[k]) body[k] = applied[k]; });
      if (!Object.keys(body).length) body.all = true;
      const scope = Object.keys(body).length && !body.all ? " matching this filter" : "";
      if (!window.confirm("Replay every dead letter" + scope + (everyone ? " of every tenant" : "") + "?")) return;
      act(all, async () => report(await replay(body)));
    });
    purge.addEventListener("click", () => act(purge, async function () {
      // The filter the list shows; the state only when it is one that can be discarded.
      const body = {};
      FILTERS.concat(TIMES).forEach((k) => { if (applied[k]) body[k] = applied[k]; });
      if (applied.state === "pending" || applied.state === "dead_letter") body.state = applied.state;
      const seen = await DF.api("POST", "/v1/events/discard", { ...body, preview: true });
      const n = seen.matched;
      if (!n) return "Nothing to discard: no pending or dead-letter event matches this filter.";
      const why = window.prompt("Discard " + n + " pending and dead-letter event" + (n === 1 ? "" : "s") +
        (everyone ? " of every tenant" : "") + " matching this filter? They will never be applied. Say why:");
      if (why === null) return "";
      if (!why.trim()) throw new Error("Say why: the reason is kept with every discarded event.");
      const done = await DF.api("POST", "/v1/events/discard", { ...body, reason: why.trim(), at_most: n });
      return "Discarded " + done.discarded + " event" + (done.discarded === 1 ? "" : "s") + ": they will never be applied.";
    }));
    root.querySelector('[data-action="reload"]').addEventListener("click", load);
    load();
  }

  /* ── one event ────────────────────────────────────────────────────────────────────── */
  function eventPage(root) {
    const id = root.dataset.event;
    const result = DF.field(root, "action_result");
    const button = root.querySelector('[data-action="replay-one"]');
    const form = root.querySelector('[data-form="act"]');
    const payloadBox = form.elements.payload;
    const emittedBox = form.elements.emitted_at;
    const sequenceBox = form.elements.sequence;
    const reasonBox = form.elements.reason;
    let seen = null;  // the event as this page last loaded it: its version goes with an action

    async function load() {
      try {
        const e = await DF.api("GET", "/v1/events/" + encodeURIComponent(id));
        seen = e;
        DF.setText(root, "process_error", e.error || "No error: " + stateLabel(e).toLowerCase() + ".");
        DF.facts(DF.field(root, "summary"), [
          ["State", stateLabel(e)],
          ["Source", e.source_system],
          ["Event id", e.source_event_id],
          ["Type", e.type],
          ["Sequence", e.source_sequence ?? "—"],
          ["Emitted", DF.localTime(e.source_emitted_at)],
          ["Apply attempts", e.apply_attempt_count],
          ["Deliveries", e.ingest_attempt_count],
          ["Conflicting deliveries", e.conflict_count],
          ["First seen", DF.localTime(e.first_seen_at)],
          ["Last seen", DF.localTime(e.last_seen_at)],
          ["Processed", DF.localTime(e.processed_at)],
          ["Entity", e.entity_key || "—"],
          ["Payload SHA-256", e.payload_sha256],
        ]);
        // An unreadable stored payload comes as the text Postgres holds (payload_readable).
        const shown = e.payload_readable === false ? e.payload : JSON.stringify(e.payload, null, 2);
        DF.setText(root, "payload", shown);
        const actionable = ACTIONABLE.includes(e.state);
        DF.field(root, "act").hidden = !actionable;
        if (actionable && !payloadBox.dataset.touched) payloadBox.value = shown;
        if (actionable && !emittedBox.dataset.touched) emittedBox.value = e.source_emitted_at || "";
        if (actionable && !sequenceBox.dataset.touched) sequenceBox.value = e.source_sequence ?? "";
        const actions = e.actions || [];
        DF.field(root, "actions").replaceChildren(...actions.map((a) =>
          DF.h("li", {}, DF.localTime(a.at) + " — " + (a.action === "edit" ? "edited and replayed" : "discarded") +
            " by " + a.actor + " (was " + (STATES[a.previous_state] || a.previous_state).toLowerCase() + "): " + a.reason)));
        DF.field(root, "no_actions").hidden = actions.length > 0;
        const replays = e.replays || [];
        DF.field(root, "replays").replaceChildren(...replays.map((r) =>
          DF.h("li", {}, DF.localTime(r.at) + " by " + r.actor)));
        DF.field(root, "no_replays").hidden = replays.length > 0;
        button.hidden = e.state !== "dead_letter";
        DF.field(root, "content").hidden = false;
        DF.message(DF.field(root, "error"), "");
      } catch (e) {
        DF.message(DF.field(root, "error"), e.status === 404
          ? "No such event in your ledger; go back to the list." : e.message, true);
      } finally {
        DF.field(root, "loading").hidden = true;
      }
    }

    [payloadBox, emittedBox, sequenceBox].forEach(function (box) {
      box.addEventListener("input", () => { box.dataset.touched = "1"; });
    });

    function reason() {
      const text = reasonBox.value.trim();
      if (!text) { reasonBox.focus(); throw new Error("Say why in Reason: it is kept with the action."); }
      return text;
    }

    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      const save = form.querySelector('[data-action="edit"]');
      DF.act(save, result, async function () {
        // Only what was changed here is sent: an unreadable stored value stays as it is.
        const body = {};
        if (payloadBox.dataset.touched) {
          try { body.payload = JSON.parse(payloadBox.value); } catch (_) {
            throw new Error("The payload is not valid JSON; correct it and save again.");
          }
          if (body.payload === null || typeof body.payload !== "object" || Array.isArray(body.payload)) {
            throw new Error("The payload must be a JSON object.");
          }
        }
        if (emittedBox.dataset.touched) body.source_emitted_at = emittedBox.value.trim() || null;
        if (sequenceBox.dataset.touched) {
          const text = sequenceBox.value.trim();
          // Past 2^53 a browser's number is not exact: such a sequence goes by the CLI or API.
          if (text && !/^[0-9]{1,15}$/.test(text)) throw new Error("The sequence must be a whole number of at most 15 digits, or empty.");
          body.source_sequence = text ? Number(text) : null;
        }
        body.reason = reason();
        body.version = seen.version;
        if (!("payload" in body || "source_emitted_at" in body || "source_sequence" in body)) {
          throw new Error("Nothing changed: correct the payload, the time or the sequence first.");
        }
        await DF.api("POST", "/v1/events/" + encodeURIComponent(id) + "/edit", body);
        [payloadBox, emittedBox, sequenceBox].forEach((box) => { delete box.dataset.touched; });
        reasonBox.value = "";
        return "Saved: the event is pending again and a worker applies it shortly.";
      }, load);
    });
    form.querySelector('[data-action="discard"]').addEventListener("click", function (ev) {
      const discard = ev.currentTarget;
      DF.act(discard, result, async function () {
        const why = reason();
        if (!window.confirm("Discard event " + id + "? It will never be applied.")) return "";
        await DF.api("POST", "/v1/events/" + encodeURIComponent(id) + "/discard", { reason: why, version: seen.version });
        reasonBox.value = "";
        return "Discarded: the event will never be applied.";
      }, load);
    });

    button.addEventListener("click", async function () {
      button.disabled = true;
      try {
        DF.message(result, report(await replay({ ledger_ids: [Number(id)] })));
      } catch (e) {
        DF.message(result, e.message, true);
      } finally {
        button.disabled = false;
        await load();
      }
    });
    load();
  }

  const list = document.querySelector("[data-events]");
  if (list) listPage(list);
  const one = document.querySelector("[data-event]");
  if (one) eventPage(one);
})();
