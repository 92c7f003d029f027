"""Scanned documents whose true text is known: real text pages rendered to images.

A page of a born-digital PDF (Debian's FAQ) is rendered with PDFium, optionally degraded like a
photocopy (noise, specks, blur, a slight rotation), and wrapped as an image-only PDF or an
image file. The page's own text layer is the truth OCR is measured against. Needs Tesseract's
English data for the tests that OCR (make ocr); without it they skip, except under CI=true.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image, ImageFilter

from worker.pipeline.formats import ocr


def require_ocr() -> None:
    if ocr.tessdata() is None:
        reason = "no Tesseract English data (make ocr, or apt-get install tesseract-ocr-eng)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true needs OCR for the OCR tests: {reason}")
        pytest.skip(reason)


def render(pdf_path: str, index: int, dpi: int = 300) -> Image.Image:
    document = pdfium.PdfDocument(pdf_path)
    try:
        return document[index].render(scale=dpi / 72, grayscale=True).to_pil().convert("L")
    finally:
        document.close()


def page_text(pdf_path: str, index: int) -> str:
    document = pdfium.PdfDocument(pdf_path)
    try:
        return document[index].get_textpage().get_text_range()
    finally:
        document.close()


def degrade(image: Image.Image, *, seed: int, sigma: float = 25.0, specks: float = 0.01,
            angle: float = 1.5, blur: float = 0.6) -> Image.Image:
    """A photocopy: grain, black and white specks, a rotation, a little blur. Deterministic."""
    rng = np.random.default_rng(seed)
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0.0, sigma, image.size[::-1])
    chance = rng.random(pixels.shape)
    pixels[chance < specks] = 0
    pixels[chance > 1 - specks / 2] = 255
    noisy = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    rotated = noisy.rotate(angle, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC)
    return rotated.filter(ImageFilter.GaussianBlur(blur))


def image_pdf(images: Sequence[Image.Image], dpi: int = 300) -> bytes:
    """A PDF with one full-page image per page and no text layer, as a scanner writes."""
    buffer = io.BytesIO()
    first, *rest = [im.convert("RGB") for im in images]
    first.save(buffer, "PDF", resolution=dpi, save_all=True, append_images=rest)
    return buffer.getvalue()


def image_file(images: Sequence[Image.Image], kind: str) -> bytes:
    buffer = io.BytesIO()
    first, *rest = images
    if kind == "TIFF":
        first.save(buffer, kind, save_all=True, append_images=rest, compression="tiff_lzw")
    else:
        first.save(buffer, kind)
    return buffer.getvalue()
