"""RTF: its text (striprtf), with rows of its tables as Markdown tables."""

from __future__ import annotations

from striprtf.striprtf import rtf_to_text

from worker.pipeline.formats import common


def read(data: bytes, limits: common.Limits) -> common.Doc:
    if not data.lstrip().startswith(b"{\\rtf"):
        raise common.not_a("RTF document", "save it again as .rtf (or .docx) and upload it.")
    # RTF is 7-bit: other characters are escapes that striprtf decodes by the file's code page.
    text = common.normalise(rtf_to_text(data.decode("latin-1"), encoding="cp1252",
                                        errors="replace"))
    doc = common.Doc()
    rows: list[list[str]] = []
    for line in text.split("\n"):
        if line.endswith("|"):  # striprtf ends every table cell with a bar
            rows.append(line[:-1].split("|"))
            continue
        if rows:
            doc.add(common.table(rows))
            rows = []
        doc.add(line.strip())
    if rows:
        doc.add(common.table(rows))
    return doc
