/* Ad clients admin page: add a client over POST /v1/clients with the CSRF header (app.js) and
 * show it in the server-rendered list at once; the API's own sentence explains a refusal
 * (a name the tenant already has, an empty or over-long name). */
(function () {
  "use strict";
  const DF = window.DF;

  document.addEventListener("DOMContentLoaded", function () {
    const create = document.querySelector('[data-client-form="create"]');
    if (!create) return;
    const result = document.querySelector('[data-field="action_result"]');
    const error = DF.field(create, "form_error");
    const body = document.querySelector("[data-clients] tbody");
    const template = document.getElementById("client-row");
    const button = create.querySelector('button[type="submit"]');

    function addRow(client) {
      const row = template.content.firstElementChild.cloneNode(true);
      row.dataset.clientId = client.client_id;
      DF.setText(row, "name", client.name);
      DF.setText(row, "client_id", client.client_id);
      DF.setTime(DF.field(row, "created_at"), client.created_at);
      const empty = body.querySelector(".empty");
      if (empty) empty.remove();
      body.append(row);
    }

    create.addEventListener("submit", async function (event) {
      event.preventDefault();
      DF.message(result, "");
      button.disabled = true;
      try {
        const made = await DF.api("POST", "/v1/clients", { name: create.elements.name.value });
        DF.message(error, "");
        addRow(made);
        create.reset();
        DF.message(result, "Client " + made.name + " added; the Imports page offers it now.");
      } catch (e) {
        DF.message(error, e.message, true);
        create.elements.name.focus();
      } finally {
        button.disabled = false;
      }
    });
  });
})();
