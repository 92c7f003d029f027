/* Document page: an admin deactivates or reactivates the document
 * (POST /v1/documents/{id}/deactivate | reactivate), and the page shows its new state in place:
 * the server renders the page again and only the document's section is swapped. */
(function () {
  "use strict";
  const DF = window.DF;
  const CONFIRM = {
    deactivate: "Stop serving this document? Nothing is deleted; Reactivate serves it again.",
    reactivate: null,
  };
  const DONE = {
    deactivate: (r) => "Version " + r.version_number + " is deactivated and no longer served.",
    reactivate: (r) => "Version " + r.version_number + " is served again.",
  };

  async function refresh(root, note) {
    const response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!response.ok) throw new Error("Done; reload the page to see the document's state.");
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html")
      .querySelector("[data-document]");
    if (!fresh) throw new Error("Done; reload the page to see the document's state.");
    root.replaceWith(fresh);
    DF.message(DF.field(fresh, "action_result"), note);
    bind(fresh);
    const focus = fresh.querySelector("[data-action]");
    if (focus) focus.focus();
  }

  function bind(root) {
    root.querySelectorAll("[data-action]").forEach(function (button) {
      const action = button.dataset.action;
      if (!DONE[action]) return;
      button.addEventListener("click", async function () {
        if (CONFIRM[action] && !window.confirm(CONFIRM[action])) return;
        button.disabled = true;
        const result = DF.field(root, "action_result");
        try {
          const done = await DF.api("POST", "/v1/documents/" + encodeURIComponent(root.dataset.document) + "/" + action);
          await refresh(root, DONE[action](done));
        } catch (e) {
          DF.message(result, e.message, true);
          button.disabled = false;
        }
      });
    });
  }

  const root = document.querySelector("[data-document]");
  if (root) bind(root);
})();
