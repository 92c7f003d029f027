/* Admin users page: role, deactivate / reactivate and password reset over /v1/users, with the
 * CSRF header (app.js). The table is server-rendered; each change updates its row in place. */
(function () {
  "use strict";
  const DF = window.DF;

  document.addEventListener("DOMContentLoaded", function () {
    const table = document.querySelector("[data-users]");
    if (!table) return;
    const result = document.querySelector('[data-field="action_result"]');
    const error = document.querySelector('[data-field="error"]');

    function say(text) { DF.message(error, ""); DF.message(result, text); }
    function fail(e) { DF.message(result, ""); DF.message(error, e.message, true); }

    async function change(row, body, done) {
      try {
        const user = await DF.api("PATCH", "/v1/users/" + row.dataset.userId, body);
        row.dataset.active = String(user.active);
        DF.setText(row, "status", user.active ? "Active" : "Deactivated");
        const toggle = row.querySelector('[data-action="active"]');
        if (toggle) toggle.textContent = user.active ? "Deactivate" : "Reactivate";
        say(done(user));
      } catch (e) { fail(e); }
    }

    table.querySelectorAll("tr[data-user-id]").forEach(function (row) {
      const email = row.dataset.email;
      const role = row.querySelector('[data-action="role"]');
      if (role) {
        role.addEventListener("change", function () {
          const wanted = role.value;
          change(row, { role: wanted }, () =>
            email + " is now " + (wanted === "admin" ? "an admin" : "a user") + "; their sessions ended.");
        });
      }
      const toggle = row.querySelector('[data-action="active"]');
      if (toggle) {
        toggle.addEventListener("click", function () {
          const active = row.dataset.active !== "true";
          if (!active && !confirm("Deactivate " + email + "? They are signed out at once.")) return;
          change(row, { active }, (u) => email + (u.active ? " can sign in again." :
            " is deactivated and signed out."));
        });
      }
      const form = row.querySelector('form[data-action="password"]');
      if (form) {
        form.addEventListener("submit", async function (event) {
          event.preventDefault();
          try {
            await DF.api("POST", "/v1/users/" + row.dataset.userId + "/password",
              { password: form.elements.password.value });
            form.reset();
            say("New password set for " + email + "; their sessions ended.");
          } catch (e) { fail(e); }
        });
      }
    });

    const create = document.querySelector('[data-user-form="create"]');
    create.addEventListener("submit", async function (event) {
      event.preventDefault();
      const v = (name) => create.elements[name].value.trim();
      try {
        await DF.api("POST", "/v1/users", { email: v("email"), password: create.elements.password.value,
          role: v("role") });
        location.reload();
      } catch (e) { DF.message(DF.field(create, "form_error"), e.message, true); }
    });
  });
})();
