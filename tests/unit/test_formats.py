"""Each document format on real files nobody on the team made (tests/fixtures/documents/README.md):
the text known to be in the file comes out, in Markdown with real headings and tables, and the
file's furniture (navigation, running headers, page numbers, contents leaders, MIME) does not."""

from __future__ import annotations

import gzip
import hashlib
import io
import pathlib
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from shared import errors
from tests.support import quality
from worker.pipeline import extract
from worker.pipeline.formats import cellformats, common, jsondoc, sheets

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "documents"


def read(name: str, kind: str, **kwargs) -> extract.Extracted:
    return extract.extract(FIXTURES / name, kind, **kwargs)


# ── Debian's own FAQ, as HTML and as PDF, against the plain-text edition Debian ships ────
@pytest.fixture(scope="module")
def faq_pdf() -> extract.Extracted:
    return read("debian-faq.en.pdf", "pdf")


def test_pdf_chapter_matches_debians_text_edition(faq_pdf):
    chapter = quality.between(faq_pdf.text, "# Chapter 2", "# Chapter 3")
    truth = (FIXTURES / "debian-faq.ch02.txt").read_text()
    assert quality.similarity(chapter, truth) >= 0.95


def test_pdf_drops_running_headers_page_numbers_and_contents_leaders(faq_pdf):
    text = faq_pdf.text
    # the running header of chapter 2's pages, and of chapter 3's
    assert "CHAPTER 2. GETTING AND INSTALLING" not in text
    assert "CHAPTER 3. CHOOSING A DEBIAN" not in text
    assert ". . . ." not in text  # the contents pages' dot leaders
    assert "\n5\n" not in text and not any(line.strip() in ("ii", "iii", "6", "7")
                                           for line in text.split("\n"))
    # the contents page is gone, the chapters it listed are still there as headings
    assert text.count("What is the latest version of Debian?") == 1


def test_pdf_headings_come_from_the_outline_at_their_depth(faq_pdf):
    lines = faq_pdf.text.split("\n")
    assert "# Chapter 2 Getting and installing Debian GNU/Linux" in lines
    assert "## 2.1 What is the latest version of Debian?" in lines
    assert "### 13.3.1 Software in the Public Interest" in lines


def test_pdf_keeps_each_chunk_s_page(faq_pdf):
    assert faq_pdf.pages == 73
    offset = faq_pdf.text.index("## 2.3 Where/how can I get the Debian installation images?")
    assert faq_pdf.page_at(offset) == 14


def test_pdf_joins_hyphenated_line_breaks_but_not_compounds(faq_pdf):
    assert "for more information." in faq_pdf.text  # "in-" / "formation" across a line end
    assert "in\ufffe" not in faq_pdf.text
    assert "32-bit" in faq_pdf.text  # a digit before the hyphen: a real compound, kept


def test_html_chapter_matches_debians_text_edition():
    doc = read("contributing.en.html", "html")
    truth = (FIXTURES / "debian-faq.ch13.txt").read_text()
    assert quality.similarity(doc.text, truth) >= 0.95
    assert doc.title == "Chapter 13. Contributing to the Debian Project"
    # the DocBook navigation header, footer and in-page contents are furniture
    for noise in ("Chapter 14. Redistributing Debian GNU/Linux", "Chapter 12. Getting support",
                  "Prev", "Next", "Home", "Table of Contents"):
        assert noise not in doc.text
    assert "## 13.1. How can I become a Debian member/Debian developer?" in doc.text
    assert "### 13.3.1. Software in the Public Interest" in doc.text


PAGE = """<html><head><title>Rust release</title>
<link rel="canonical" href="https://example.org/blog/rust">
<script>var NOISE_SCRIPT = 1;</script></head><body>
<header class="site-header"><a href="/">Home</a><nav><a href="/a">NOISE-NAV-A</a></nav></header>
<div id="cookie-banner"><p>NOISE-COOKIES We use cookies.</p><button>Accept</button></div>
<div class="sidebar"><ul><li><a href="/1">NOISE-SIDE-1</a></li></ul></div>
<main><article><h1>Rust 1.80 is out</h1><p>The release adds lazy cells.</p>
<h2>Details</h2><ul><li>LazyCell</li><li>LazyLock</li></ul>
<table><tr><th>Type</th><th>Thread-safe</th></tr><tr><td>LazyCell</td><td>no</td></tr></table>
</article></main>
<ul class="links"><li><a href="/x">NOISE-FARM-1</a></li><li><a href="/y">NOISE-FARM-2</a></li>
<li><a href="/z">NOISE-FARM-3</a></li></ul>
<footer><p>NOISE-FOOTER Copyright</p></footer></body></html>"""


def test_html_main_content_keeps_structure_and_title_and_canonical_url(tmp_path):
    path = tmp_path / "page.html"
    path.write_text(PAGE)
    doc = extract.extract(path, "html")
    assert doc.text == ("# Rust 1.80 is out\n\nThe release adds lazy cells.\n\n## Details\n\n"
                        "- LazyCell\n- LazyLock\n\n| Type | Thread-safe |\n| --- | --- |\n"
                        "| LazyCell | no |")
    assert (doc.title, doc.url) == ("Rust release", "https://example.org/blog/rust")
    assert "NOISE" not in doc.text


# ── slides, spreadsheets, books, office text ───────────────────────────────────────────────
def test_pptx_slide_title_bullets_and_page_per_slide():
    doc = read("fake-power-point.pptx", "pptx")
    assert doc.pages == 1 and doc.page_at(0) == 1
    assert doc.text.startswith("## Slide 1: Adding a Bullet Slide\n\nFind the bullet slide layout")
    assert "  - Use _TextFrame.text for first bullet" in doc.text
    assert "Here is some text in a text box!" in doc.text


def test_pptx_table_is_a_markdown_table():
    doc = read("fake-power-point-table.pptx", "pptx")
    assert ("| Column 1 | Column 2 | Column 3 |\n| --- | --- | --- |\n| Red | Green | Blue |"
            in doc.text)


def test_xlsx_each_sheet_under_its_name_with_a_header_row():
    text = read("stanley-cups.xlsx", "xlsx").text
    assert "## Sheet: Stanley Cups\n\nStanley Cups\n\n### Rows 3–5\n\n| Team | Location |" in text
    assert "## Sheet: Stanley Cups Since 67" in text
    assert "| Maple Leafs | TOR | 13 |" in text and "| Maple Leafs | TOR | 0 |" in text


def test_legacy_xls_is_read_without_an_office_suite():
    text = read("tests-example.xls", "xls").text
    assert "## Sheet: Example Test" in text and "## Sheet: Readme" in text
    assert "| MA | What C datatypes are 8 bits? (assume i386) | int |" in text


@pytest.mark.parametrize("kind", ["xlsx", "xls"])
def test_spreadsheet_cells_read_as_their_number_formats_show_them(kind):
    """ADR 0296: the words a reader sees ("2006/11/24", "£10.52"), not the stored values."""
    text = read(f"poi-Formatting.{kind}", kind).text
    for shown in ("| yyyy/mm/dd | 2006/11/24 |", "| yy/mm/dd | 06/11/24 |",
                  "| dd-mm-yy | 24-11-06 |", "| nn.nnn | 10.520 |", "| £nn.nn | £10.52 |"):
        assert shown in text


def test_a_workbook_whose_styles_cannot_be_read_keeps_its_stored_values(tmp_path):
    path = tmp_path / "broken-styles.xlsx"
    with zipfile.ZipFile(FIXTURES / "poi-Formatting.xlsx") as source, \
            zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            target.writestr(item, b"<styleSheet><cellXfs>" if item.filename ==
                            "xl/styles.xml" else data)
    assert cellformats.open_formats(path, "xlsx") is None  # the reader keeps stored values
    assert cellformats.open_formats(FIXTURES / "poi-Formatting.xlsx", "xls") is None


def test_spreadsheet_dates_in_a_1904_workbook_and_elapsed_hours():
    text = read("calamine-date_1904.xls", "xls").text
    assert "| 2021-01-01 | 15 |" in text and "| 255:10:10 | 17 |" in text


def test_spreadsheet_date_codes_with_quoted_literals_and_locale_tags():
    text = read("calamine-date_quoted_format.xlsx", "xlsx").text
    assert "| January 2021 |" in text and "| January 1, 2021 |" in text


def test_csv_document_rows_as_a_table():
    text = read("stanley-cups.csv", "csv").text
    assert "| Team | Location | Stanley Cups |\n| --- | --- | --- |\n| Blues | STL | 1 |" in text


def test_a_sheet_of_100k_rows_becomes_row_ranges_each_with_its_header(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("id;name;amount\n" + "".join(f"{i};item {i};{i * 3}\n" for i in range(100_000)))
    text = extract.extract(path, "csv").text
    blocks = text.split("\n\n")
    tables = [b for b in blocks if b.startswith("| id |")]
    assert len(tables) > 1000  # chunked by row ranges, never one giant table
    assert max(map(len, tables)) < sheets.BLOCK_CHARS + 200
    assert "## Rows 2–" in text and "| 99999 | item 99999 | 299997 |" in text


def test_epub_chapters_in_spine_order():
    doc = read("winter-sports.epub", "epub")
    assert doc.title == "Winter Sports in Switzerland"
    first = doc.text.index("Winter Sports in Switzerland")
    assert doc.text.index("CHAPTER I") < doc.text.index("CHAPTER II")
    assert first < doc.text.index("CHAPTER I")
    assert "{" not in doc.text[:5000]  # no stylesheet text


def test_odt_paragraphs_and_table():
    text = read("fake.odt", "odt").text
    assert text.startswith("Lorem ipsum dolor sit amet.")
    assert "| Header row | Mon | Wed | Fri |\n| --- | --- | --- | --- |\n| Color | Blue |" in text


def test_rtf_text_and_table():
    text = read("fake-doc.rtf", "rtf").text
    assert text.startswith("My First Heading\n\nMy first paragraph.")
    assert "| Column 1 | Column 2 |\n| --- | --- |\n| Row 1, Cell 1 | Row 1, Cell 2 |" in text
    assert "\\par" not in text and "rtf1" not in text


# ── e-mail ─────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("name", "kind"), [("fake-email-attachment.eml", "eml"),
                                            ("fake-email-attachment.msg", "msg")])
def test_email_headers_body_and_attachment_section(name, kind):
    doc = read(name, kind)
    assert doc.title == "Fake email with attachment"
    assert doc.text.startswith("# Fake email with attachment\n\nFrom: ")
    assert "Here's the attachments!" in doc.text
    assert doc.text.endswith("## Attachment: fake-attachment.txt\n\nHey this is a fake attachment!")
    for noise in ("Content-Type", "boundary=", "SGV5IHRoaXMg", "<div", "=C2=A0"):
        assert noise not in doc.text


def test_html_only_email_loses_its_markup():
    text = read("mime-html-only.eml", "eml").text
    assert "This is a text/html part." in text and "<" not in text


def test_msg_cc_header():
    assert "Cc: steve@unstructured.io" in read("fake-email-with-cc-and-bcc.msg", "msg").text


def _eml_with(attachments: list[tuple[str, str, bytes]]) -> bytes:
    from email.message import EmailMessage
    message = EmailMessage()
    message["Subject"] = "Quarterly pack"
    message["From"] = "a@example.org"
    message.set_content("See the attached files.")
    for name, mime, data in attachments:
        main, sub = mime.split("/")
        message.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return bytes(message)


def test_email_attachments_are_read_by_their_own_readers_and_failures_stay_local(tmp_path):
    deck = (FIXTURES / "fake-power-point-table.pptx").read_bytes()
    path = tmp_path / "m.eml"
    path.write_bytes(_eml_with([
        ("deck.pptx", "application/octet-stream", deck),
        ("broken.pdf", "application/pdf", b"%PDF-1.7 not really"),
        ("tool.exe", "application/octet-stream", b"MZ"),
    ]))
    text = extract.extract(path, "eml").text
    # the deck's slide heading sits two levels below the attachment's
    assert "## Attachment: deck.pptx\n\n#### Slide 1: A Slide with a Table" in text
    assert "| Red | Green | Blue |" in text
    assert "## Attachment: broken.pdf\n\n(not read: the PDF is corrupt" in text
    assert "## Attachment: tool.exe\n\n(not read: this type of file is not supported)" in text


@pytest.mark.parametrize(("name", "kind"), [("fake-email-attachment.eml", "eml"),
                                            ("fake-email-attachment.msg", "msg")])
def test_email_attachments_kept_for_child_documents_are_listed_not_read(name, kind, tmp_path):
    # docs/decisions/0250: given a folder, the worker keeps attachments to become documents
    doc = read(name, kind, attachments_dir=tmp_path)
    assert doc.text.endswith("Mallori\n\n## Attachments\n\n- fake-attachment.txt")
    assert "fake attachment" not in doc.text  # its text is its own document's
    (kept,) = doc.attachments
    data = pathlib.Path(kept.path).read_bytes()
    assert data.startswith(b"Hey this is a fake attachment!")
    assert (kept.ordinal, kept.filename, kept.source_type, kept.size_bytes) == (
        1, "fake-attachment.txt", "txt", len(data))
    assert kept.content_hash == "sha256:" + hashlib.sha256(data).hexdigest()


def test_kept_attachments_nested_messages_and_what_cannot_be_kept(tmp_path):
    from email.message import EmailMessage

    inner = EmailMessage()
    inner["Subject"] = "Forwarded"
    inner.set_content("The forwarded text.")
    outer = EmailMessage()
    outer["Subject"] = "Fwd"
    outer.set_content("See below.")
    outer.add_attachment(b"MZ", maintype="application", subtype="octet-stream",
                         filename="tool.exe")
    outer.add_attachment(b"", maintype="text", subtype="plain", filename="empty.txt")
    outer.add_attachment(inner)  # message/rfc822, no file name
    outer.add_attachment(b"a\x00b", maintype="text", subtype="plain",
                         filename="bad\tname.txt")
    path = tmp_path / "fwd.eml"
    path.write_bytes(bytes(outer))
    folder = tmp_path / "kept"
    folder.mkdir()
    doc = extract.extract(path, "eml", attachments_dir=folder)
    assert doc.text.endswith(
        "## Attachments\n\n- tool.exe (not read: this type of file is not supported)\n"
        "- empty.txt (empty)\n- attachment 3.eml\n- bad name.txt")
    forwarded, named = doc.attachments
    assert (forwarded.ordinal, forwarded.source_type) == (3, "eml")
    # the forwarded message is kept whole, to be read (and its attachments kept) in its turn
    assert extract.extract(pathlib.Path(forwarded.path), "eml").title == "Forwarded"
    assert (named.ordinal, named.filename) == (4, "bad name.txt")
    # a name is a title to be: no control characters (Postgres refuses NUL), bounded
    keep = extract._Keeper(folder)
    assert keep("a\x00b\x1b.txt", b"x") == "- ab.txt"
    assert keep("x" * 300 + ".txt", b"x") == f"- {'x' * 251}.txt"
    # at the deepest level, attachments are named but neither kept nor read
    deep = extract.extract(path, "eml", attachments_dir=folder, depth=3)
    assert deep.attachments == ()
    assert "## Attachment: tool.exe\n\n(not read: attachments nest too deeply)" in deep.text


def test_email_attachment_limits(tmp_path):
    path = tmp_path / "many.eml"
    path.write_bytes(_eml_with([(f"{i}.txt", "text/plain", b"x") for i in range(12)]))
    with pytest.raises(common.DocumentTooLarge, match="parts and attachments"):
        extract.extract(path, "eml", limits=extract.Limits(max_members=10))


# ── JSON ───────────────────────────────────────────────────────────────────────────────────
def test_json_flattened_key_paths_one_block_per_record():
    text = read("simple.json", "json").text
    assert "[0].text: These are a few of my favorite things:\n[0].type: Title" in text
    assert "\n\n[1].element_id: " in text


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=30))
def test_json_every_scalar_value_appears_under_a_path(value):
    import json
    doc = jsondoc.read(json.dumps(value).encode(), common.Limits())
    text = common.join_blocks(doc.blocks)
    for leaf in _leaves(value):
        shown = "null" if leaf is None else str(leaf).lower() if isinstance(leaf, bool) else leaf
        assert common.one_line(str(shown)) in text


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]),
                                 max_size=8), min_size=1, max_size=5), max_size=30))
def test_markdown_table_keeps_one_row_per_line_whatever_the_cells_hold(rows):
    table = common.table(rows)
    kept = [row for row in rows if any(common.one_line(c) for c in row)]
    assert len(table.split("\n") if table else []) == (len(kept) + 1 if kept else 0)


# ── limits and refusals ────────────────────────────────────────────────────────────────────
def test_pdf_page_limit():
    with pytest.raises(common.DocumentTooLarge, match="more than 10 pages"):
        read("debian-faq.en.pdf", "pdf", limits=extract.Limits(max_pages=10))


def test_zip_member_limit_applies_to_every_package(tmp_path):
    path = tmp_path / "many.pptx"
    with zipfile.ZipFile(path, "w") as package:
        package.writestr("ppt/presentation.xml", "<p/>")
        for i in range(20):
            package.writestr(f"ppt/media/{i}.bin", "x")
    with pytest.raises(common.DocumentTooLarge, match="files in its package"):
        extract.extract(path, "pptx", limits=extract.Limits(max_members=10))


@pytest.mark.parametrize(("kind", "member"), [("pptx", "ppt/presentation.xml"),
                                              ("xlsx", "xl/workbook.xml"),
                                              ("epub", "META-INF/container.xml"),
                                              ("odt", "content.xml")])
def test_zip_bomb_refused_before_inflating(tmp_path, kind, member):
    path = tmp_path / f"bomb.{kind}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr(member, "<x/>")
        package.writestr("big.xml", b"\0" * (30 << 20))
    with pytest.raises(errors.BadDocument, match="zip bomb"):
        extract.extract(path, kind)


def test_spreadsheet_cell_limit():
    with pytest.raises(common.DocumentTooLarge, match="cells"):
        read("vodafone.xlsx", "xlsx", limits=extract.Limits(max_cells=10))


@pytest.mark.parametrize(("kind", "data", "words"), [
    ("pptx", b"PK\x03\x04 not a zip", "not a valid PPTX"),
    ("xlsx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "legacy .xls"),
    ("xls", b"PK\x03\x04", "not a valid XLS"),
    ("msg", b"From: a\n\nhi", "not a valid Outlook message"),
    ("rtf", b"plain", "not a valid RTF"),
    ("json", b"{oops", "does not parse"),
    ("png", b"\x89PNG\r\n\x1a\n broken", "not a valid PNG image"),
    ("epub", b"PK\x03\x04", "not a valid EPUB"),
])
def test_damaged_files_say_what_to_do(tmp_path, kind, data, words):
    path = tmp_path / f"bad.{kind}"
    path.write_bytes(data)
    with pytest.raises(errors.BadDocument) as caught:
        extract.extract(path, kind)
    assert words in caught.value.detail
    assert caught.value.detail.startswith("extract: ") and caught.value.detail.endswith(".")


def test_image_pixel_limit(tmp_path):
    from PIL import Image
    buffer = io.BytesIO()
    Image.new("L", (3000, 3000), 255).save(buffer, "PNG")
    path = tmp_path / "huge.png"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(common.DocumentTooLarge, match="pixels"):
        extract.extract(path, "png", limits=extract.Limits(max_image_pixels=1_000_000))


# ── what a real corpus broke (issue 33), each on the public file that showed it ──────────
def _utf8_clean(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_rtf_characters_above_the_bmp_are_paired_not_lone_surrogates():
    # testRTFVarious.rtf writes Gothic letters as \u-10240\u-8398 surrogate pairs
    doc = read("testRTFVarious.rtf", "rtf")
    assert "𐌲𐌿𐍄𐌹𐍃𐌺" in doc.text
    assert _utf8_clean(doc.text)
    assert "ゾルゲと尾崎" in doc.text  # and the Japanese beside it, by its own code page


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0xD780, max_codepoint=0xE000), max_size=12))
def test_no_extractor_hands_on_a_lone_surrogate(tmp_path_factory, text):
    # JSON's \uD800 escapes decode to lone surrogates; the extract boundary pairs or replaces them
    folder = tmp_path_factory.mktemp("surrogates")
    escaped = "".join(f"\\u{ord(c):04x}" for c in text)
    path = folder / "value.json"
    path.write_text(f'{{"k": "a{escaped}b"}}')
    result = extract.extract(path, "json")
    assert _utf8_clean(result.text)
    assert result.text.startswith("k: a") and result.text.endswith("b")


def test_msg_strings_in_the_code_page_the_message_declares():
    # testMSG_chinese.msg: 8-bit strings in Big5, declared only by PR_INTERNET_CPID (950)
    doc = read("testMSG_chinese.msg", "msg")
    assert doc.title == "Alfresco MSG format testing ( MSG 格式測試 )"
    assert "恭喜 HQ 保全課 陳奎良 高票當選雲林縣總工會" in doc.text
    assert "From: Tests Chang@FT (張毓倫)" in doc.text


def test_msg_with_only_an_rtf_body_reads_it_in_its_ansicpg():
    from worker.pipeline.formats import mail

    class RtfOnly:  # what extract_msg gives for a message Outlook kept as RTF alone
        body = None
        htmlBody = property(lambda self: (_ for _ in ()).throw(UnicodeDecodeError(
            "cp950", b"\xb7", 0, 1, "incomplete multibyte sequence")))  # RTFDE's failure
        rtfBody = (b"{\\rtf1\\ansi\\ansicpg950{\\fonttbl{\\f0\\fcharset136 x;}}"
                   b"\\f0 \\'ae\\'e6\\'a6\\'a1\\'b4\\'fa\\'b8\\'d5}")

    assert mail._msg_body(RtfOnly()) == ["格式測試"]


@pytest.mark.parametrize("damage", ["first byte", "cut short"])
def test_damaged_jpeg_and_truncated_tiff_are_extraction_errors_with_advice(tmp_path, damage):
    if damage == "first byte":  # Pillow raised KeyError('MPO') for this one
        data = bytearray((FIXTURES / "testJPEG.jpg").read_bytes())
        data[0] = 0
        path, kind = tmp_path / "photo.jpeg", "jpeg"
    else:  # a two-page TIFF cut in the middle of its second page (TypeError / RuntimeError)
        full = (FIXTURES / "testTIFF_multipage.tif").read_bytes()
        data, path, kind = full[: len(full) * 9 // 10], tmp_path / "scan.tiff", "tiff"
    path.write_bytes(bytes(data))
    with pytest.raises(errors.ExtractionError) as caught:
        extract.extract(path, kind)
    assert caught.value.code == "extraction_error"
    assert "damaged" in caught.value.detail and "upload it again" in caught.value.detail


def test_one_line_pages_keep_their_line_though_it_looks_like_a_running_header():
    # testPDF_bookmarks.pdf: "This is a page about France", then "...about Denmark"
    doc = read("testPDF_bookmarks.pdf", "pdf")
    assert "This is a page about France" in doc.text
    assert "This is a page about Denmark" in doc.text
    assert doc.text.index("# Countries") < doc.text.index("## France")  # bookmark order


def test_docx_text_boxes_content_controls_notes_headers_and_footers():
    text = read("testWORD_text_box.docx", "docx").text
    assert "This text is directly in the body of the document." in text
    for where in ("body", "header", "footer"):
        sentence = f"This text is inside of a text box in the {where} of the document."
        assert text.count(sentence) == 1  # Word's VML fallback copy is not read twice
    rich = read("testWORD_2006ml.docx", "docx").text
    for words in ("Rich text content control", "Simple text content control", "Drop down1",
                  "This is a text box", "This is text within a shape",
                  "## Footnotes\n\nAnd this is the footnote", "## Endnotes\n\nThis is an endnote",
                  "| R1c1 | R1c2 | R1c3 |", "Embedded table r1c1"):
        assert words in rich
    assert "Heading1\t3" not in rich  # the table of contents control only echoes headings
    cells = read("testWORD_missing_text.docx", "docx").text
    assert "| Cell0 | Rich_text_in_cell | Cell2 |" in cells  # a cell inside a content control


def test_odt_notes_and_frames_are_blocks_of_their_own_and_the_bibliography_is_kept():
    text = read("testODFwithOOo3.odt", "odt").text
    assert "This is a rather difficult test document, with interesting features." in text
    assert "\n\nThis is of course a simple footnote\n\n" in text
    assert "\n\nA rectangle\n\n" in text
    assert "rather1" not in text and "borderA" not in text
    assert "Solr: Various, Solr website, 2009, http://lucene.apache.org/solr" in text
    assert "complex" not in text  # a tracked deletion


@pytest.mark.parametrize("name, kind", [
    ("testWORD_protected_passtika.docx", "docx"), ("testPPT_protected_passtika.pptx", "pptx"),
    ("testEXCEL_protected_passtika.xlsx", "xlsx"), ("testODTEncrypted.odt", "odt")])
def test_password_protected_office_files_say_so(name, kind):
    with pytest.raises(errors.EncryptedDocument) as caught:
        read(name, kind)
    assert caught.value.code == "encrypted_document"
    assert "protected by a password" in caught.value.detail


def test_html_main_content_inside_a_wrapper_named_like_navigation(tmp_path):
    # readability's engadget page: <main> inside div.i-nav_drawer_slide@tp-__panel; only the
    # title came out (12 of 1,966 words) when furniture went before the main part was chosen
    source = gzip.decompress((FIXTURES / "readability-engadget.html.gz").read_bytes())
    expected = gzip.decompress((FIXTURES / "readability-engadget.expected.html.gz").read_bytes())
    path = tmp_path / "engadget.html"
    path.write_bytes(source)
    text = extract.extract(path, "html").text
    truth = LexborHTMLParser(expected.decode()).body.text(separator=" ")
    assert quality.recall(text, truth) >= 0.95
    assert "The Xbox One X is the ultimate video game system." in text


def test_html_sections_whose_ids_name_furniture_words_are_kept(tmp_path):
    # readability's mercurial page: section ids are heading slugs ("sharing-with-a-single-
    # developer") and heading links carry class "toc-backref"; both read as furniture words
    source = (pathlib.Path(__file__).parents[2] / "bench" / "corpus" / "files"
              / "readability-mercurial.html")
    text = extract.extract(source, "html").text
    assert "Sharing with a single developer" in text
    assert "Example 3: Alice commits and amends a draft fix" in text
    page = tmp_path / "page.html"
    page.write_text('<body><div id="share">Share on X</div><div id="cookie-consent">OK</div>'
                    '<p>Body text.</p></body>')
    assert extract.extract(page, "html").text == "Body text."


def test_json_lines_and_concatenated_values_are_records(tmp_path):
    path = tmp_path / "records.json"
    path.write_text('{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n\n{"id": "c"}')
    text = extract.extract(path, "json").text
    assert text == "[0].id: a\n[0].n: 1\n\n[1].id: b\n[1].n: 2\n\n[2].id: c"


# ── PDF tables and font-size headings (issue 33; ADR 0294), on pdfplumber's public PDFs ──
CORPUS = pathlib.Path(__file__).parents[2] / "bench" / "corpus" / "files"


def test_pdf_ruled_table_becomes_one_markdown_table_in_place_of_its_lines():
    text = extract.extract(CORPUS / "issue-33-lorem-ipsum.pdf", "pdf").text
    tables = [block for block in text.split("\n\n") if block.startswith("| ")]
    assert len(tables) == 2  # one per page
    first = tables[0].split("\n")
    assert first[1] == "| --- | --- | --- | --- | --- |"
    assert first[2].startswith("| Dolor ipsu Velit adip | Etincidunt Sit modi a |")
    # each cell's words once: not as loose lines besides the table
    assert text.count("Etincidunt Sit modi a") == 1


def test_pdf_without_ruled_tables_never_runs_the_table_finder(monkeypatch):
    from worker.pipeline.formats import pdftables

    monkeypatch.setattr(pdftables, "tables", lambda *a: pytest.fail("table finder ran"))
    read("debian-faq.en.pdf", "pdf")  # code blocks shaded line by line, at two indents


def test_pdf_without_an_outline_gets_headings_from_font_sizes():
    text = extract.extract(CORPUS / "pdffill-demo.pdf", "pdf").text
    lines = text.split("\n")
    assert "# Print PDFill: PDF Drawing" in lines
    assert "# Line Width and Color" in lines
    lorem = extract.extract(CORPUS / "issue-33-lorem-ipsum.pdf", "pdf").text.split("\n")
    assert "# Ipsum labore ut consectetur." in lorem
    assert "## Etincidunt consectetur porro velit sed quaerat." in lorem
