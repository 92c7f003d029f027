/* Webhooks admin pages: add (the secret is shown once, here), delete, "send test event", rotate
 * the secret (the new one shown once; the old one signs beside it for the grace period), over
 * /v1/webhooks with the CSRF header (app.js). The lists are server-rendered. */
(function () {
  "use strict";
  const DF = window.DF;

  document.addEventListener("DOMContentLoaded", function () {
    const result = document.querySelector('[data-field="action_result"]');

    document.querySelectorAll('[data-webhook-id] [data-action="test"]').forEach(function (button) {
      const id = button.closest("[data-webhook-id]").dataset.webhookId;
      button.addEventListener("click", function () {
        DF.act(button, result, async function () {
          const sent = await DF.api("POST", "/v1/webhooks/" + id + "/test");
          return "Test event queued (" + sent.webhook_message_id + "); see the delivery log.";
        });
      });
    });

    document.querySelectorAll('[data-webhook-id] [data-action="rotate"]').forEach(function (button) {
      const id = button.closest("[data-webhook-id]").dataset.webhookId;
      button.addEventListener("click", function () {
        if (!confirm("Make a new signing secret? The current one keeps signing beside it for 24 hours.")) return;
        DF.act(button, result, async function () {
          const made = await DF.api("POST", "/v1/webhooks/" + id + "/rotate-secret");
          const panel = document.querySelector('[data-field="secret_panel"]');
          DF.setText(panel, "secret", made.secret);
          DF.setText(panel, "grace_until", DF.localTime(made.previous_secret_expires_at));
          panel.hidden = false;
          button.disabled = true;  // one new secret per visit: Done reloads the page
          return "Secret rotated.";
        });
      });
    });

    document.querySelectorAll('tr[data-webhook-id] [data-action="delete"]').forEach(function (button) {
      const row = button.closest("tr");
      button.addEventListener("click", function () {
        if (!confirm("Delete the webhook to " + row.dataset.url + " and its delivery log?")) return;
        DF.act(button, result, async function () {
          await DF.api("DELETE", "/v1/webhooks/" + row.dataset.webhookId);
          row.remove();
          return "Webhook deleted; nothing more is sent to " + row.dataset.url + ".";
        });
      });
    });

    const create = document.querySelector('[data-webhook-form="create"]');
    if (!create) return;
    create.addEventListener("submit", async function (event) {
      event.preventDefault();
      const types = Array.from(create.querySelectorAll('input[name="event_types"]:checked'))
        .map((box) => box.value);
      const error = DF.field(create, "form_error");
      try {
        const made = await DF.api("POST", "/v1/webhooks",
          { url: create.elements.url.value.trim(), event_types: types });
        DF.message(error, "");
        create.hidden = true;
        const panel = document.querySelector('[data-field="secret_panel"]');
        DF.setText(panel, "secret", made.secret);
        panel.hidden = false;
      } catch (e) { DF.message(error, e.message, true); }
    });
  });
})();
