"""Scanned PDFs and images through OCR: pages of Debian's FAQ rendered to images, OCR'd, and
compared with the text layer they were rendered from (tests/support/scans.py)."""

from __future__ import annotations

import pathlib

import pytest

from tests.support import quality, scans
from worker.pipeline import extract
from worker.pipeline.formats import common, ocr

FAQ = str(pathlib.Path(__file__).parents[1] / "fixtures" / "documents" / "debian-faq.en.pdf")
PAGES = (13, 14)  # chapter 2's second page and chapter 3's first: prose, headings, URLs


# Tesseract reads a page in seconds: these tests run with the slow ones (make test runs them).
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def clean_pages():
    scans.require_ocr()
    return [scans.render(FAQ, i) for i in PAGES]


@slow
def test_scanned_pdf_is_ocrd_page_by_page(tmp_path, clean_pages):
    noisy = [scans.degrade(image, seed=i) for i, image in enumerate(clean_pages)]
    path = tmp_path / "scan.pdf"
    path.write_bytes(scans.image_pdf(noisy))
    asked = []
    doc = extract.extract(path, "pdf", on_ocr=asked.append)
    assert asked == [2] and doc.pages == 2
    for number, index in enumerate(PAGES, start=1):
        start = doc.page_starts[number - 1]
        end = doc.page_starts[number] if number < doc.pages else len(doc.text)
        truth = scans.page_text(FAQ, index)
        assert quality.similarity(doc.text[start:end], truth) >= 0.90
    assert doc.page_at(doc.text.index("Choosing a Debian distribution")) == 2


@slow
@pytest.mark.parametrize("kind", ["jpeg", "webp"])
def test_image_is_ocrd(tmp_path, clean_pages, kind):
    path = tmp_path / f"page.{kind}"
    path.write_bytes(scans.image_file([clean_pages[0]], {"jpeg": "JPEG", "png": "PNG",
                                                          "webp": "WEBP"}[kind]))
    doc = extract.extract(path, kind)
    assert doc.pages == 1
    assert quality.similarity(doc.text, scans.page_text(FAQ, PAGES[0])) >= 0.95


@slow
def test_multipage_tiff_keeps_a_page_per_frame(tmp_path, clean_pages):
    path = tmp_path / "fax.tiff"
    path.write_bytes(scans.image_file(clean_pages, "TIFF"))
    doc = extract.extract(path, "tiff")
    assert doc.pages == 2
    assert doc.page_at(doc.text.index("Choosing a Debian distribution")) == 2


def test_ocr_page_limit(tmp_path, clean_pages):
    path = tmp_path / "fax.tiff"
    path.write_bytes(scans.image_file(clean_pages, "TIFF"))
    with pytest.raises(common.DocumentTooLarge, match="more than 1 pages"):
        extract.extract(path, "tiff", limits=extract.Limits(max_ocr_pages=1))


def test_without_an_ocr_engine_the_run_fails_with_a_sentence(tmp_path, monkeypatch):
    # No language data anywhere: what a worker without `make ocr` sees.
    monkeypatch.setattr(ocr, "_TESSDATA_DIRS", ())
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    path = tmp_path / "scan.pdf"
    path.write_bytes(scans.image_pdf([scans.render(FAQ, PAGES[0], dpi=50)], dpi=50))
    with pytest.raises(common.OcrUnavailable) as caught:
        extract.extract(path, "pdf")
    assert caught.value.code == "ocr_unavailable"
    assert caught.value.detail.startswith("extract: ") and "make ocr" in caught.value.detail


def test_born_digital_pages_are_not_ocrd(tmp_path):
    asked = []
    extract.extract(pathlib.Path(FAQ), "pdf", on_ocr=asked.append)
    assert asked == []
