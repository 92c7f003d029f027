"""Deterministic test documents, built in memory: the same call always returns the same bytes.

Determinism matters beyond tidiness: uploads are content-addressed, so tests that upload the
same document twice rely on identical bytes.
"""

from __future__ import annotations

import datetime
import io
import random
import zipfile
from collections.abc import Sequence

import docx
from fpdf import FPDF

# Strings that sit only inside markup an extractor must drop; none may appear in its output.
HTML_NOISE = (
    "NOISE-IN-SCRIPT",
    "NOISE-IN-STYLE",
    "NOISE-IN-NAV",
    "NOISE-IN-NOSCRIPT",
)

_FIXED_DATE = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_VOCABULARY = """
the a an of to in for on with by from about across after before under over between
service worker queue document upload tenant chunk embedding vector index search query
postgres bucket object version run stage failure retry message batch token model page
section table heading paragraph operator admin user browser gateway request response
process processes stores reads writes sends receives records checks builds splits keeps
returns marks moves holds waits starts stops finishes fails succeeds repeats measures
quickly carefully later again always never often rarely safely slowly reliably large
small new old stale fresh healthy busy idle secure private shared separate river mountain
harbour garden library market winter summer morning evening journey letter story history
science music language island forest village station bridge
"""
_WORDS = _VOCABULARY.split()


def prose(n_words: int, *, seed: int = 0) -> str:
    """Readable-looking English-like sentences of exactly ``n_words`` words."""
    rng = random.Random(seed)
    sentences: list[str] = []
    remaining = n_words
    while remaining > 0:
        length = min(rng.randint(8, 20), remaining)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(length))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        remaining -= length
    return " ".join(sentences)


# ── PDF ────────────────────────────────────────────────────────────────────────────────────
def _new_pdf() -> FPDF:
    pdf = FPDF()
    pdf.set_creation_date(_FIXED_DATE)
    pdf.set_font("Helvetica", size=10)
    return pdf


def make_pdf(pages: Sequence[str]) -> bytes:
    """One page per string, with a real text layer (core Helvetica, so Latin-1 text only).

    A string too long for one A4 page spills onto extra pages, as a word processor would.
    """
    pdf = _new_pdf()
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 5, text)
    return bytes(pdf.output())


def make_encrypted_pdf(text: str, *, password: str = "secret") -> bytes:
    """A PDF that needs ``password`` to open."""
    pdf = _new_pdf()
    pdf.set_encryption(owner_password="owner-" + password, user_password=password)
    pdf.add_page()
    pdf.multi_cell(0, 5, text)
    return bytes(pdf.output())


def make_corrupt_pdf() -> bytes:
    """A PDF header followed by the first half of a real PDF's body: truncated mid-stream."""
    body = make_pdf([prose(200, seed=7)])
    return b"%PDF-1.7\n" + body[body.index(b"\n") + 1 : len(body) // 2]


def make_scanned_pdf() -> bytes:
    """A page with only a drawing on it, like a scan without OCR: no text layer at all."""
    pdf = _new_pdf()
    pdf.add_page()
    pdf.rect(20, 20, 120, 80, style="F")
    return bytes(pdf.output())


# ── DOCX ───────────────────────────────────────────────────────────────────────────────────
def make_docx(
    heading: str,
    paragraphs: Sequence[str],
    table_rows: Sequence[Sequence[str]],
    *,
    bullets: Sequence[str] = ("A bulleted point",),
) -> bytes:
    """A DOCX in this body order: Heading 1, first paragraph, table, other paragraphs, bullets.

    The table sits between paragraphs so that tests can check body order is kept.
    """
    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs[:1]:
        document.add_paragraph(paragraph)
    if table_rows:
        table = document.add_table(rows=len(table_rows), cols=len(table_rows[0]))
        for row, values in zip(table.rows, table_rows, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    for paragraph in paragraphs[1:]:
        document.add_paragraph(paragraph)
    for bullet in bullets:
        document.add_paragraph(bullet, style="List Bullet")
    buffer = io.BytesIO()
    document.save(buffer)
    return _with_fixed_timestamps(buffer.getvalue())


def _with_fixed_timestamps(package: bytes) -> bytes:
    """python-docx stamps zip members with the current time; pin them for identical bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(package)) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            info = zipfile.ZipInfo(member.filename, date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(info, source.read(member))
    return out.getvalue()


_MINIMAL_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Default Extension="xml" ContentType="application/xml"/></Types>'
)
_MINIMAL_DOCUMENT = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    b"<w:body><w:p><w:r><w:t>Tiny text, huge payload.</w:t></w:r></w:p></w:body></w:document>"
)


def make_zip_bomb_docx(*, inflated_mb: int = 300) -> bytes:
    """A DOCX-shaped zip whose padding member inflates to ``inflated_mb`` MB of zeros.

    Zeros are streamed in 1 MB pieces so neither this process nor the fixture holds the
    inflated payload; at 300 MB the result is about 300 KB (a ratio near 1000:1).
    """
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in (
            ("[Content_Types].xml", _MINIMAL_CONTENT_TYPES),
            ("word/document.xml", _MINIMAL_DOCUMENT),
        ):
            archive.writestr(zipfile.ZipInfo(name, date_time=_ZIP_EPOCH), data)
        padding = zipfile.ZipInfo("word/media/padding.bin", date_time=_ZIP_EPOCH)
        padding.compress_type = zipfile.ZIP_DEFLATED
        zeros = bytes(1024 * 1024)
        with archive.open(padding, "w", force_zip64=True) as member:
            for _ in range(inflated_mb):
                member.write(zeros)
    return out.getvalue()


# ── HTML ───────────────────────────────────────────────────────────────────────────────────
def make_html(
    title: str,
    sections: Sequence[tuple[str, str]],
    *,
    list_items: Sequence[str] = (),
    table_rows: Sequence[Sequence[str]] = (),
) -> bytes:
    """A UTF-8 page with a <title>, an <h1> per (heading, paragraph) section, an optional list
    and table, and script/style/nav/noscript noise carrying the ``HTML_NOISE`` strings."""
    script, style, nav, noscript = HTML_NOISE
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{title}</title><style>body::after {{ content: '{style}'; }}</style>",
        f"<script>window.noise = '{script}';</script></head><body>",
        f"<nav><a href='/'>{nav}</a></nav><noscript>{noscript}</noscript><main>",
    ]
    for heading, paragraph in sections:
        parts.append(f"<section><h1>{heading}</h1>\n  <p>{paragraph}</p></section>")
    if list_items:
        parts.append("<ul>" + "".join(f"<li>{item}</li>" for item in list_items) + "</ul>")
    if table_rows:
        rows = ("".join(f"<td>{cell}</td>" for cell in row) for row in table_rows)
        parts.append("<table>" + "".join(f"<tr>{row}</tr>" for row in rows) + "</table>")
    parts.append("</main></body></html>")
    return "\n".join(parts).encode("utf-8")


# ── Markdown ───────────────────────────────────────────────────────────────────────────────
def _markdown_section(index: int) -> str:
    return (
        f"## Section {index}\n\n"
        f"{prose(120, seed=index)}\n\n"
        f"{prose(80, seed=index + 100_000)}\n\n"
        f"- {prose(10, seed=index + 200_000)}\n"
        f"- {prose(12, seed=index + 300_000)}\n"
        f"- {prose(9, seed=index + 400_000)}\n"
    )


def make_markdown(n_sections: int) -> bytes:
    """A Markdown document: a title, then ``n_sections`` sections of prose and a short list."""
    sections = (_markdown_section(i) for i in range(n_sections))
    return ("# Generated handbook\n\n" + "\n".join(sections)).encode("utf-8")


def make_large_markdown(target_bytes: int = 1_000_000) -> bytes:
    """Markdown of at least ``target_bytes`` bytes (about 1 MB by default) for benchmarks."""
    n_sections, size = 0, 0
    while size < target_bytes:
        size += len(_markdown_section(n_sections).encode("utf-8"))
        n_sections += 1
    return make_markdown(n_sections)
