"""Extract stage: real files in, Markdown-ish text or a user-facing BadDocument out."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zipfile

import docx
import pytest

from shared import errors
from tests.support import documents, stack
from worker.pipeline import extract


@pytest.fixture
def write(tmp_path: pathlib.Path):
    def _write(name: str, data: bytes) -> pathlib.Path:
        path = tmp_path / name
        path.write_bytes(data)
        return path

    return _write


def assert_user_message(exc: errors.BadDocument) -> None:
    """One plain sentence that names the stage and says what to do."""
    assert exc.stage == "extract"
    assert exc.detail.startswith("extract: ")
    assert exc.detail.endswith(".")
    assert "\n" not in exc.detail
    assert str(exc) == exc.detail


# ── PDF ────────────────────────────────────────────────────────────────────────────────────
PAGES = [
    "Alpha page talks about rivers.\nA second line on the first page.",
    "Beta page talks about mountains.",
    "Gamma page talks about harbours.",
]


def test_pdf_text_pages_and_page_at(write):
    doc = extract.extract(write("three.pdf", documents.make_pdf(PAGES)), "pdf")

    assert doc.pages == 3
    assert len(doc.page_starts) == 3
    for number, page in enumerate(PAGES, start=1):
        first_line = page.split("\n")[0]
        offset = doc.text.index(first_line)
        assert doc.page_starts[number - 1] == offset
        assert doc.page_at(offset) == number
        assert doc.page_at(offset + len(page) - 1) == number
    assert doc.page_at(len(doc.text) - 1) == 3
    assert "\r" not in doc.text


def test_pdf_page_at_skips_empty_pages(write):
    doc = extract.extract(write("gap.pdf", documents.make_pdf(["First.", "", "Third."])), "pdf")

    assert doc.pages == 3
    assert doc.page_at(doc.text.index("Third")) == 3
    assert doc.page_at(0) == 1


def test_corrupt_pdf_is_an_extraction_error(write):
    with pytest.raises(errors.ExtractionError) as caught:
        extract.extract(write("corrupt.pdf", documents.make_corrupt_pdf()), "pdf")
    assert_user_message(caught.value)
    assert "corrupt" in caught.value.detail


def test_encrypted_pdf_is_reported_as_encrypted(write):
    with pytest.raises(errors.EncryptedDocument) as caught:
        extract.extract(write("locked.pdf", documents.make_encrypted_pdf("Top secret.")), "pdf")
    assert_user_message(caught.value)
    assert "password" in caught.value.detail


def test_scanned_pdf_without_text_layer_has_no_text(write):
    with pytest.raises(errors.NoTextFound) as caught:
        extract.extract(write("scan.pdf", documents.make_scanned_pdf()), "pdf")
    assert_user_message(caught.value)
    assert "OCR" in caught.value.detail


# ── DOCX ───────────────────────────────────────────────────────────────────────────────────
def test_docx_keeps_headings_lists_and_tables_in_body_order(write):
    data = documents.make_docx(
        "Quarterly Report",
        ["Revenue grew in every region.", "The outlook stays cautious."],
        [["Region", "Revenue"], ["North", "120"], ["South", "95"]],
        bullets=["Hire two engineers", "Open the Lisbon office"],
    )
    text = extract.extract(write("report.docx", data), "docx").text

    assert text.startswith("# Quarterly Report\n\n")
    # A Markdown table: the first row is its header.
    assert "| Region | Revenue |\n| --- | --- |\n| North | 120 |\n| South | 95 |" in text
    assert "- Hire two engineers\n- Open the Lisbon office" in text
    order = ["Revenue grew", "| Region | Revenue |", "The outlook", "- Hire two"]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)


def test_docx_merged_cell_appears_once(tmp_path):
    document = docx.Document()
    table = document.add_table(rows=1, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Merged"
    table.cell(0, 2).text = "Single"
    path = tmp_path / "merged.docx"
    document.save(str(path))

    assert extract.extract(path, "docx").text == "| Merged | Single |\n| --- | --- |"


# Runs in a fresh interpreter so that its peak resident memory is the extraction's alone.
_MEASURE = """
import resource, sys, time
from shared import errors
from worker.pipeline import extract
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
try:
    extract.extract(__import__("pathlib").Path(sys.argv[1]), "docx")
    print("accepted")
except errors.BadDocument as exc:
    elapsed = time.monotonic() - started
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(type(exc).__name__, grown_kb, elapsed, exc.detail, sep="\\t")
"""


def test_zip_bomb_docx_is_refused_before_inflating(write):
    # Given a 300 KB DOCX that inflates to 300 MB
    path = write("bomb.docx", documents.make_zip_bomb_docx(inflated_mb=300))

    # When a fresh process extracts it
    child = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], cwd=stack.ROOT,
                           capture_output=True, text=True, timeout=120,
                           env={"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1"})
    assert child.returncode == 0, child.stderr[-3000:]
    kind, grown_kb, elapsed, detail = child.stdout.strip().split("\t")

    # Then it is refused as a zip bomb without inflating it: its peak memory grew by far less
    # than the inflated size (a few MB at most) and the refusal took well under a second
    assert kind == "BadDocument" and "zip bomb" in detail, child.stdout
    assert detail.startswith("extract: ") and detail.endswith(".")
    assert int(grown_kb) < 20 * 1024, f"peak RSS grew by {grown_kb} KB"
    assert float(elapsed) < 1.0, f"took {elapsed} s"


def test_zip_bomb_docx_is_refused_by_ratio_under_the_size_limit(write):
    # 20 MB inflated is far below the 200 MB total limit; the 1000:1 ratio gives it away.
    with pytest.raises(errors.BadDocument, match="zip bomb"):
        extract.extract(write("bomb.docx", documents.make_zip_bomb_docx(inflated_mb=20)), "docx")


def test_docx_over_the_uncompressed_limit_is_refused(write):
    path = write("report.docx", documents.make_docx("Title", ["Body."], [["a", "b"]]))

    with pytest.raises(errors.BadDocument, match="zip bomb"):
        extract.extract(path, "docx", max_uncompressed_bytes=1024)


def test_not_a_zip_docx_is_an_extraction_error(write):
    with pytest.raises(errors.ExtractionError) as caught:
        extract.extract(write("fake.docx", b"This is plain text named .docx"), "docx")
    assert_user_message(caught.value)
    assert "not a valid DOCX" in caught.value.detail


def test_zip_without_word_document_is_not_a_docx(tmp_path):
    path = tmp_path / "other.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "not a word package")

    with pytest.raises(errors.ExtractionError, match="not a valid DOCX"):
        extract.extract(path, "docx")


def test_ole_file_named_docx_without_encryption_says_legacy_doc(write):
    # An OLE file without MS-OFFCRYPTO's EncryptedPackage: a legacy .doc, not a locked DOCX
    # (tests/unit/test_formats.py has the password-protected ones).
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)

    with pytest.raises(errors.ExtractionError) as caught:
        extract.extract(write("locked.docx", ole), "docx")
    assert_user_message(caught.value)
    assert "legacy Word .doc" in caught.value.detail


def test_docx_with_broken_xml_is_an_extraction_error(write, tmp_path):
    good = write("good.docx", documents.make_docx("Title", ["Body."], [["a", "b"]]))
    broken = tmp_path / "broken.docx"
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(broken, "w") as target:
        for member in source.infolist():
            truncated = member.filename == "word/document.xml"
            target.writestr(member, b"<w:document" if truncated else source.read(member))

    with pytest.raises(errors.ExtractionError, match="damaged"):
        extract.extract(broken, "docx")


# ── HTML ───────────────────────────────────────────────────────────────────────────────────
def test_html_keeps_structure_and_drops_noise(write):
    data = documents.make_html(
        "Field guide",
        [("Rivers", "Rivers run <b>downhill</b> to the sea."), ("Lakes", "Lakes &amp; ponds.")],
        list_items=["Trout", "Salmon"],
        table_rows=[["Fish", "Length"], ["Pike", "90 cm"]],
    )
    text = extract.extract(write("guide.html", data), "html").text

    assert "# Rivers\n\nRivers run downhill to the sea." in text
    assert "# Lakes\n\nLakes & ponds." in text
    assert "- Trout\n- Salmon" in text
    assert "| Fish | Length |\n| --- | --- |\n| Pike | 90 cm |" in text
    for noise in documents.HTML_NOISE:
        assert noise not in text


def test_html_title_becomes_heading_when_body_has_no_h1(write):
    data = b"<html><head><title>Release notes</title></head><body><p>Fixed it.</p></body></html>"

    assert extract.extract(write("n.html", data), "html").text == "# Release notes\n\nFixed it."


@pytest.mark.parametrize(
    ("charset", "body", "expected"),
    [
        ("iso-8859-1", b"Caf\xe9 \x93ok\x94", "Caf\u00e9 \u201cok\u201d"),  # read as cp1252
        ("shift_jis", "日本語".encode("shift_jis"), "日本語"),
        ("utf-16", "Grüße".encode(), "Grüße"),  # ASCII-compatible bytes cannot be UTF-16
        ("no-such-charset", "Grüße".encode(), "Grüße"),
    ],
)
def test_html_honours_meta_charset(write, charset, body, expected):
    data = f"<html><head><meta charset='{charset}'></head><body><p>".encode() + body + b"</p>"

    assert extract.extract(write("page.html", data), "html").text == expected


def test_html_honours_bom_over_meta(write):
    data = "\ufeff<meta charset='iso-8859-1'><p>Grüße</p>".encode()

    assert extract.extract(write("bom.html", data), "html").text == "Grüße"


def test_html_keeps_line_breaks_and_preformatted_text(write):
    data = b"<p>Line one<br>Line two</p><pre>def f():\n    return 1</pre>"

    text = extract.extract(write("pre.html", data), "html").text
    assert text == "Line one\nLine two\n\ndef f():\n    return 1"


def test_deeply_nested_html_does_not_overflow(write):
    data = b"<div>" * 20_000 + b"Deep text" + b"</div>" * 20_000

    assert extract.extract(write("deep.html", data), "html").text == "Deep text"


def test_html_with_only_scripts_has_no_text(write):
    data = b"<html><head><script>var a = 1;</script></head><body><nav>Home</nav></body></html>"

    with pytest.raises(errors.NoTextFound):
        extract.extract(write("empty.html", data), "html")


# ── TXT and Markdown ───────────────────────────────────────────────────────────────────────
def test_txt_normalises_newlines_form_feeds_and_nuls(write):
    path = write("notes.txt", b"one\r\ntwo\rthree\x0cfour\x00five")

    assert extract.extract(path, "txt").text == "one\ntwo\nthree\nfourfive"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("Grüße ☃".encode(), "Grüße ☃"),
        ("\ufeffBOM first".encode(), "BOM first"),
        ("Smart “quotes” – café".encode("cp1252"), "Smart “quotes” – café"),
        ("UTF-16 with BOM ü".encode("utf-16"), "UTF-16 with BOM ü"),
    ],
)
def test_txt_decoding(write, data, expected):
    assert extract.extract(write("t.txt", data), "txt").text == expected


def test_markdown_is_kept_as_written(write):
    data = documents.make_markdown(3)
    doc = extract.extract(write("handbook.md", data), "md")

    assert doc.text == data.decode()
    assert doc.pages is None
    assert doc.page_starts == []
    assert doc.page_at(10) is None


def test_whitespace_only_text_has_no_text(write):
    with pytest.raises(errors.NoTextFound) as caught:
        extract.extract(write("blank.txt", b" \n\t\r\n "), "txt")
    assert_user_message(caught.value)


# ── any type ───────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("source_type", extract.SOURCE_TYPES)
def test_zero_byte_file_is_a_bad_document(write, source_type):
    with pytest.raises(errors.BadDocument) as caught:
        extract.extract(write(f"empty.{source_type}", b""), source_type)
    assert type(caught.value) is errors.BadDocument
    assert_user_message(caught.value)
    assert "0 bytes" in caught.value.detail


def test_unknown_source_type_is_a_bad_document(write):
    with pytest.raises(errors.BadDocument) as caught:
        extract.extract(write("slides.key", b"PK\x03\x04"), "key")
    assert type(caught.value) is errors.BadDocument
    assert_user_message(caught.value)
    assert "'key'" in caught.value.detail


# ── the generators themselves ──────────────────────────────────────────────────────────────
@pytest.mark.parametrize(
    "make",
    [
        lambda: documents.make_pdf(PAGES),
        lambda: documents.make_encrypted_pdf("Top secret."),
        documents.make_scanned_pdf,
        documents.make_corrupt_pdf,
        lambda: documents.make_docx("Title", ["Body."], [["a", "b"]]),
        lambda: documents.make_zip_bomb_docx(inflated_mb=11),
        lambda: documents.make_html("Title", [("Heading", "Body.")]),
        lambda: documents.make_markdown(3),
    ],
)
def test_generated_documents_are_byte_identical_across_calls(make):
    # Uploads are content-addressed: dedup tests need the same bytes every time.
    assert make() == make()
