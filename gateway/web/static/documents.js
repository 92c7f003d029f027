/* Document page: an admin deactivates the document (POST /v1/documents/{id}/deactivate). */
(function () {
  "use strict";
  const DF = window.DF;
  const root = document.querySelector("[data-document]");
  const button = root && root.querySelector('[data-action="deactivate"]');
  if (!button) return;
  const result = DF.field(root, "action_result");

  button.addEventListener("click", async function () {
    if (!window.confirm("Stop serving this document? Nothing is deleted; uploading the file again restores it.")) return;
    button.disabled = true;
    try {
      const done = await DF.api("POST", "/v1/documents/" + encodeURIComponent(root.dataset.document) + "/deactivate");
      DF.message(result, "Version " + done.version_number + " is deactivated and no longer served; reload the page to see the versions.");
      button.hidden = true;
    } catch (e) {
      DF.message(result, e.message, true);
      button.disabled = false;
    }
  });
})();
