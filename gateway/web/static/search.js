/* Search page: the Ask box calls POST /v1/ask and shows the answer with its citations, each
 * linking to the document at the cited chunk. Text only, never HTML (docs/decisions/0032). */
(function () {
  "use strict";
  const DF = window.DF;
  const root = document.querySelector("[data-ask]");
  if (!root) return;
  const form = root.querySelector("[data-ask-form]");
  const status = DF.field(root, "ask_status");
  const box = DF.field(root, "answer");
  const text = DF.field(root, "answer_text");
  const list = DF.field(root, "citations");

  function citation(c) {
    const where = "version " + c.version + " · chunk " + (c.chunk_index + 1) +
      (c.page ? " · page " + c.page : "") +
      (c.heading_path && c.heading_path.length ? " · " + c.heading_path.join(" › ") : "");
    return DF.h("li", { "data-chunk-id": c.chunk_id },
      DF.h("span", { class: "citation-n", text: "[" + c.n + "] " }),
      DF.link("/documents/" + encodeURIComponent(c.doc_id) + "?chunk=" + c.chunk_index + "#chunk-" + c.chunk_index, c.title),
      // an e-mail attachment: the message it came from (docs/decisions/0250)
      c.parent ? " · attachment of " : null,
      c.parent ? DF.link("/documents/" + encodeURIComponent(c.parent.doc_id), c.parent.subject || c.parent.title) : null,
      " · " + where,
      DF.h("blockquote", { text: c.quote }));
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const question = form.elements.question.value.trim();
    if (!question) return;
    const button = form.querySelector("button");
    button.disabled = true;
    DF.message(status, "Looking through your documents…");
    try {
      const answer = await DF.api("POST", "/v1/ask", { question: question });
      text.textContent = answer.answer;
      list.replaceChildren(...answer.citations.map(citation));
      box.hidden = false;
      DF.message(status, answer.abstained ? "No passage of your active documents answers this." : "");
    } catch (e) {
      box.hidden = true;
      DF.message(status, e.message, true);
    } finally {
      button.disabled = false;
    }
  });
})();
