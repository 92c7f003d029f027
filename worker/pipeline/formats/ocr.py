"""OCR: text from page images with Tesseract, through tesserocr (docs/decisions/0211).

Tesseract was chosen by measurement (bench/ocr.py): on rendered pages it reads clean scans
exactly and noisy, skewed ones at ~0.98 character accuracy, where the ONNX PP-OCR models in
rapidocr-onnxruntime lost most word spaces on English text and ran far slower here. tesserocr
keeps the engine in this process, so the parser child's memory and time limits cover it and a
killed child leaves no orphan `tesseract` process behind. The language data comes from
Debian's `tesseract-ocr-eng` (`make ocr`); nothing is downloaded at run time. A worker without
it fails the runs that need OCR with a sentence (OcrUnavailable), never the worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worker.pipeline.formats import common

# Where Debian, Ubuntu and Homebrew put the language data; TESSDATA_PREFIX wins when set.
_TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata",
                  "/usr/share/tessdata", "/usr/local/share/tessdata",
                  "/opt/homebrew/share/tessdata")
LANGUAGE = "eng"
# Scans are read at 300 dpi: Tesseract's own guidance, and where bench/ocr.py measured.
DPI = 300


def tessdata() -> str | None:
    """The folder holding ``eng.traineddata``, or None when this machine has none."""
    candidates = [os.environ.get("TESSDATA_PREFIX", ""), *_TESSDATA_DIRS]
    for folder in filter(None, candidates):
        if (Path(folder) / f"{LANGUAGE}.traineddata").is_file():
            return folder
    return None


def unavailable(why: str) -> common.OcrUnavailable:
    return common.OcrUnavailable(
        f"extract: the document has pages without a text layer, and this worker cannot OCR "
        f"them ({why}); install Tesseract's English data on the workers (make ocr, or apt-get "
        "install tesseract-ocr-eng) and retry the run.", stage=common.STAGE)


@contextmanager
def engine() -> Iterator[Any]:
    """A Tesseract API for one document; one thread, as the worker runs documents side by side."""
    # Before the library loads: OpenMP would otherwise start a thread per core per document.
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    try:
        import tesserocr  # noqa: PLC0415 - loaded only by documents that need OCR
    except ImportError as exc:
        raise unavailable("the tesserocr package is not installed") from exc
    folder = tessdata()
    if folder is None:
        raise unavailable(f"no {LANGUAGE}.traineddata was found")
    try:
        api = tesserocr.PyTessBaseAPI(path=folder, lang=LANGUAGE)
    except RuntimeError as exc:
        raise unavailable(f"Tesseract could not load {LANGUAGE}.traineddata") from exc
    try:
        yield api
    finally:
        api.End()


def read_image(api: Any, image: Any) -> str:
    """The text of one page image (a PIL image), as lines and blank-line separated blocks."""
    api.SetImage(image)
    return common.normalise(api.GetUTF8Text()).strip()
