"""Which files the gateway accepts: the extension decides the type, the first bytes confirm it."""

from __future__ import annotations

import codecs

import pytest

from gateway import filetypes
from shared import errors
from tests.support import documents

ALL = ("pdf", "docx", "html", "txt", "md")


# ── by extension ────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("filename", "expected"), [
    ("a.pdf", "pdf"), ("A.PDF", "pdf"), ("x.docx", "docx"), ("page.html", "html"),
    ("page.HTM", "html"), ("notes.txt", "txt"), ("readme.md", "md"), ("readme.markdown", "md"),
    ("archive.tar.md", "md"), ("../../etc/passwd.txt", "txt"),
])
def test_source_type_for_allowed_extensions(filename, expected):
    assert filetypes.source_type_for(filename, ALL) == expected


@pytest.mark.parametrize(("filename", "said"), [
    ("setup.exe", "Files of type '.exe' are"), ("photo.jpg", "Files of type '.jpg' are"),
    ("doc.docb", "Files of type '.docb' are"), ("noext", "Files without an extension are"),
    ("", "Files without an extension are"), ("pdf", "Files without an extension are"),
    ("a.pdf.exe", "Files of type '.exe' are"), ("trailing.", "Files without an extension are"),
    ("x.docm", "Files of type '.docm' are")])
def test_source_type_for_refuses_other_extensions(filename, said):
    with pytest.raises(errors.UnsupportedType) as info:
        filetypes.source_type_for(filename, ALL)
    # The message lists what is accepted, so the user knows what to do.
    assert "pdf" in info.value.detail and "docx" in info.value.detail
    assert info.value.code == "unsupported_type"
    # and names what it got in words: an extension, or that there is none
    assert info.value.detail.startswith(said)


def test_source_type_respects_the_configured_allow_list():
    assert filetypes.source_type_for("a.pdf", ("pdf",)) == "pdf"
    with pytest.raises(errors.UnsupportedType, match=r"\.md"):
        filetypes.source_type_for("a.md", ("pdf", "docx"))


def test_every_type_has_a_content_type():
    assert set(ALL) <= set(filetypes.CONTENT_TYPES)


# ── by content ──────────────────────────────────────────────────────────────────────────────
ACCEPTED = {
    "pdf_minimal": ("pdf", b"%PDF-1.7\n"),
    "pdf_with_junk_before_header": ("pdf", b"\r\n\x00junk" + b"%PDF-1.4\n"),
    "docx_zip": ("docx", b"PK\x03\x04" + b"\x00" * 40),
    "html_doctype": ("html", b"<!DOCTYPE html><html><body>x</body></html>"),
    "html_comment_then_tag": ("html", b"<!-- generated -->\n<html>"),
    "html_bom": ("html", codecs.BOM_UTF8 + b"<html><p>hi</p></html>"),
    "html_fragment": ("html", b"  <div>just a fragment</div>"),
    "txt_ascii": ("txt", b"plain text\n"),
    "txt_utf8": ("txt", "Grüße, 你好, emoji \U0001F600\n".encode()),
    "txt_latin1": ("txt", "café crème\n".encode("latin-1")),
    "txt_crlf_tab": ("txt", b"a\tb\r\nc\x0cd\n"),
    "md": ("md", b"# Title\n\n* item\n"),
}


@pytest.mark.parametrize(("source_type", "head"), ACCEPTED.values(), ids=ACCEPTED.keys())
def test_check_content_accepts_matching_bytes(source_type, head):
    filetypes.check_content(source_type, head, complete=True)


REFUSED = {
    "pdf_that_is_text": ("pdf", b"Dear customer, please pay.\n"),
    "pdf_header_too_late": ("pdf", b" " * 2000 + b"%PDF-1.4"),
    "docx_that_is_text": ("docx", b"This is not a Word file"),
    "docx_that_is_pdf": ("docx", b"%PDF-1.7\n"),
    "html_that_is_text": ("html", b"Just words, no markup at all."),
    "html_that_is_binary": ("html", b"<html>\x00\x01\x02"),
    "txt_with_nul": ("txt", b"MZ\x90\x00\x03\x00"),
    "txt_that_is_pdf": ("txt", b"%PDF-1.4\nstuff"),
    "txt_that_is_zip": ("txt", b"PK\x03\x04rest"),
    "txt_with_control_bytes": ("txt", b"\xff\xfe\x01\x02\x03 binary"),
    "md_that_is_png": ("md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
}


@pytest.mark.parametrize(("source_type", "head"), REFUSED.values(), ids=REFUSED.keys())
def test_check_content_refuses_contradicting_bytes(source_type, head):
    with pytest.raises(errors.UnsupportedType) as info:
        filetypes.check_content(source_type, head, complete=True)
    assert source_type.upper() in info.value.detail


def test_truncated_utf8_at_the_end_of_a_sniffed_head_is_not_binary():
    # The head is cut at SNIFF_BYTES, which may split a multi-byte character.
    head = ("é" * filetypes.SNIFF_BYTES).encode()[: filetypes.SNIFF_BYTES - 1]
    filetypes.check_content("txt", head, complete=False)


REAL = {
    "pdf": lambda: documents.make_pdf(["Hello world"]),
    "docx": lambda: documents.make_docx("Title", ["Hello world"], [["a", "b"]]),
    "html": lambda: documents.make_html("Page", [("Heading", "Hello world")]),
    "md": lambda: documents.make_markdown(3),
}


@pytest.mark.parametrize("source_type", REAL)
def test_real_documents_pass_as_head_and_whole(source_type):
    data = REAL[source_type]()
    filetypes.check_content(source_type, data[: filetypes.SNIFF_BYTES], complete=False)
    filetypes.check_content(source_type, data[: filetypes.SNIFF_BYTES],
                            complete=len(data) <= filetypes.SNIFF_BYTES)


@pytest.mark.parametrize(("source_type", "other"), [("pdf", "docx"), ("docx", "pdf"),
                                                    ("txt", "pdf"), ("md", "docx"),
                                                    ("html", "pdf")])
def test_real_document_renamed_to_another_type_is_refused(source_type, other):
    data = REAL[other]()
    with pytest.raises(errors.UnsupportedType):
        filetypes.check_content(source_type, data[: filetypes.SNIFF_BYTES], complete=False)


# ── the types of issue 25 ───────────────────────────────────────────────────────────────────
DOCUMENT_TYPES = ("pdf", "docx", "html", "txt", "md", "pptx", "xlsx", "xls", "csv", "eml", "msg",
                  "epub", "odt", "rtf", "json", "png", "jpeg", "tiff", "webp")


@pytest.mark.parametrize(("filename", "expected"), [
    ("deck.pptx", "pptx"), ("book.xlsx", "xlsx"), ("old.XLS", "xls"), ("rows.csv", "csv"),
    ("mail.eml", "eml"), ("mail.msg", "msg"), ("novel.epub", "epub"), ("letter.odt", "odt"),
    ("memo.rtf", "rtf"), ("data.json", "json"), ("scan.png", "png"), ("scan.jpg", "jpeg"),
    ("scan.JPEG", "jpeg"), ("fax.tif", "tiff"), ("fax.tiff", "tiff"), ("photo.webp", "webp")])
def test_new_document_extensions(filename, expected):
    assert filetypes.source_type_for(filename, DOCUMENT_TYPES) == expected
    assert expected in filetypes.CONTENT_TYPES


@pytest.mark.parametrize(("filename", "words"), [
    ("contract.doc", ("Word", ".docx")), ("deck.PPT", ("PowerPoint", ".pptx"))])
def test_legacy_office_files_are_refused_with_how_to_convert(filename, words):
    with pytest.raises(errors.UnsupportedType) as info:
        filetypes.source_type_for(filename, DOCUMENT_TYPES)
    assert all(word in info.value.detail for word in words)
    assert "save it as" in info.value.detail and info.value.detail.endswith(".")


def test_default_settings_accept_every_document_type():
    from shared.settings import GatewaySettings
    assert set(DOCUMENT_TYPES) <= set(GatewaySettings.model_fields["allowed_types"].default)


NEW_ACCEPTED = {
    "pptx_zip": ("pptx", b"PK\x03\x04" + b"\x00" * 40),
    "xlsx_zip": ("xlsx", b"PK\x03\x04" + b"\x00" * 40),
    "epub_zip": ("epub", b"PK\x03\x04\x14\x00\x00\x00\x00\x00mimetypeapplication/epub+zip"),
    "odt_zip": ("odt", b"PK\x03\x04" + b"\x00" * 40),
    "xls_ole": ("xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 40),
    "msg_ole": ("msg", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 40),
    "png": ("png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
    "jpeg": ("jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF"),
    "tiff_le": ("tiff", b"II*\x00\x08\x00\x00\x00"),
    "tiff_be": ("tiff", b"MM\x00*\x00\x00\x00\x08"),
    "webp": ("webp", b"RIFF\x24\x00\x00\x00WEBPVP8 "),
    "rtf": ("rtf", b"{\\rtf1\\ansi\\deff0 {\\fonttbl}}"),
    "json_object": ("json", b'  {"a": 1}'),
    "json_array_bom": ("json", codecs.BOM_UTF8 + b'[{"a": 1}]'),
    "eml_headers": ("eml", b"Received: from x\r\nFrom: a@example.org\r\nSubject: hi\r\n\r\nbody"),
    "eml_mbox": ("eml", b"From a@example.org Mon Jan  1 00:00:00 2024\nSubject: hi\n\nbody"),
}
NEW_REFUSED = {
    "pptx_not_zip": ("pptx", b"%PDF-1.7\n"),
    "xls_as_html": ("xls", b"<html><table><tr><td>1</td></tr></table></html>"),
    "msg_as_zip": ("msg", b"PK\x03\x04"),
    "png_as_jpeg": ("png", b"\xff\xd8\xff\xe0"),
    "jpeg_as_png": ("jpeg", b"\x89PNG\r\n\x1a\n"),
    "webp_riff_wave": ("webp", b"RIFF\x24\x00\x00\x00WAVEfmt "),
    "rtf_plain_text": ("rtf", b"just text"),
    "json_plain_text": ("json", b"name,value\n"),
    "json_binary": ("json", b"{\x00\x01"),
    "eml_prose": ("eml", b"Dear team, this is not a message file"),
}


@pytest.mark.parametrize(("kind", "head"), NEW_ACCEPTED.values(), ids=NEW_ACCEPTED.keys())
def test_new_types_content_accepted(kind, head):
    filetypes.check_content(kind, head, complete=True)


@pytest.mark.parametrize(("kind", "head"), NEW_REFUSED.values(), ids=NEW_REFUSED.keys())
def test_new_types_content_refused(kind, head):
    with pytest.raises(errors.UnsupportedType):
        filetypes.check_content(kind, head, complete=True)


# ── records files as downloaded (issue 20) ──────────────────────────────────────────────────
EXPORT = "Campaign report\n\"January 1, 2024 - January 31, 2024\"\nCampaign\tCost\nA\t1.00\n"


@pytest.mark.parametrize("data", [
    codecs.BOM_UTF16_LE + EXPORT.encode("utf-16-le"),  # Google's "Excel CSV"
    codecs.BOM_UTF16_BE + EXPORT.encode("utf-16-be"),
    codecs.BOM_UTF32_LE + EXPORT.encode("utf-32-le"),
    EXPORT.encode("utf-16-le"),                          # UTF-16 without a BOM
    b"File #,Plaintiff\nCV-1,Zeb\x00ulon\n" + b"CV-2,Acme Collections LLC\n" * 20,
])
def test_unicode_text_with_nul_bytes_is_csv_content(data):
    for source_type in ("csv", "jsonl"):
        filetypes.check_content(source_type, data, complete=True)
        filetypes.check_content(source_type, data[:len(data) // 2 + 1], complete=False)


@pytest.mark.parametrize("data", [
    codecs.BOM_UTF16_LE + EXPORT.encode("utf-16-le"), EXPORT.encode("utf-16-le")])
def test_documents_keep_refusing_nul_bytes(data):
    with pytest.raises(errors.UnsupportedType):
        filetypes.check_content("txt", data, complete=True)


@pytest.mark.parametrize("data", [
    b"\x00\x01\x02\x03" * 200, b"PK\x03\x04" + b"\x00" * 40, b"%PDF-1.7\n\x00\x00",
    codecs.BOM_UTF16_LE + "a\x01b".encode("utf-16-le")])
def test_binary_named_csv_is_still_refused(data):
    with pytest.raises(errors.UnsupportedType):
        filetypes.check_content("csv", data, complete=True)
