"""Scanned PDFs and images through OCR: pages of Debian's FAQ rendered to images, OCR'd, and
compared with the text layer they were rendered from (tests/support/scans.py)."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import signal
import time

import pytest
from PIL import Image

from tests.support import quality, scans
from worker.pipeline import extract, parsers
from worker.pipeline.formats import common, ocr

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "documents"
FAQ = str(FIXTURES / "debian-faq.en.pdf")
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


# ── a page that is not upright (issue 33): skew measured on the pixels, orientation by OSD ──
@slow
@pytest.mark.parametrize("angle", [10, -10, 90, 180])
def test_a_page_scanned_askew_or_turned_is_read_upright(tmp_path, clean_pages, angle):
    turned = clean_pages[0].rotate(angle, expand=True, fillcolor=255,
                                   resample=Image.Resampling.BICUBIC)
    path = tmp_path / "page.png"
    path.write_bytes(scans.image_file([turned], "PNG"))
    doc = extract.extract(path, "png")
    assert quality.similarity(doc.text, scans.page_text(FAQ, PAGES[0])) >= 0.95


@slow
def test_ocrmypdfs_cardinal_scan_reads_its_upside_down_pages():
    # cardinal.pdf: the same leaflet four times, the last two pages upside down
    doc = extract.extract(FIXTURES / "cardinal.pdf", "pdf")
    assert doc.pages == 4
    pages = [doc.text[a:b] for a, b in zip(doc.page_starts, [*doc.page_starts[1:], None], strict=True)]
    for page in pages:
        assert "The LinnSequencer is a state-of-the-art composition and performance tool" in page


def test_columns_the_automatic_layout_skips_are_read_as_sparse_text():
    """A ruled election bulletin (pdfplumber's, rendered by poppler): Tesseract's automatic
    layout read the candidates and skipped the party and vote-count columns (recall 0.77)."""
    words = extract.extract(FIXTURES / "la-precinct-bulletin-2014-p1.webp", "webp").text.split()
    assert {"REP", "DEM", "247", "142", "216"} <= set(words)
    assert words.count("REP") >= 8


def test_skew_angle_is_measured_on_the_pixels(clean_pages):
    small = clean_pages[0].resize((clean_pages[0].width // 3, clean_pages[0].height // 3))
    for angle in (0.0, 4.0, -12.0):
        turned = small.rotate(angle, expand=True, fillcolor=255)
        assert ocr.skew_angle(turned) == pytest.approx(-angle, abs=0.4)


# ── OCR's time budget (issue 33): processor time, so a busy machine slows it, never kills it ─
@slow
def test_ocr_survives_a_machine_that_gives_it_a_fifth_of_a_core(tmp_path, clean_pages):
    path = tmp_path / "page.png"
    path.write_bytes(scans.image_file([clean_pages[0]], "PNG"))
    started = time.process_time()
    extract.extract(path, "png")  # what this page costs in processor time, here
    need = time.process_time() - started

    def busy_machine() -> None:  # the child runs a fifth of the wall time, as at load ~10
        for child in multiprocessing.active_children():
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(0.8)
            os.kill(child.pid, signal.SIGCONT)

    wall = time.monotonic()
    doc = parsers.extract_isolated(path, "png", max_uncompressed_bytes=1 << 26, timeout_s=0.5,
                                   ocr_page_s=3 * need, memory_bytes=1 << 30,
                                   check=busy_machine)
    # the wall time went past the whole budget: a wall clock would have killed it as stuck
    assert time.monotonic() - wall > 0.5 + 3 * need
    assert quality.similarity(doc.text, scans.page_text(FAQ, PAGES[0])) >= 0.95


def test_an_ocr_timeout_says_ocr_ran_out_of_time_not_that_the_file_is_damaged(clean_pages,
                                                                             tmp_path):
    path = tmp_path / "pages.tiff"
    path.write_bytes(scans.image_file(clean_pages, "TIFF"))
    with pytest.raises(parsers.ParserTimedOut) as caught:
        parsers.extract_isolated(path, "tiff", max_uncompressed_bytes=1 << 26, timeout_s=0.3,
                                 ocr_page_s=0.05, memory_bytes=1 << 30)
    detail = caught.value.detail
    assert caught.value.code == "parser_timeout"
    assert "OCR of the TIFF's 2 scanned page(s) did not finish" in detail
    assert "processor time" in detail and "damaged" not in detail
