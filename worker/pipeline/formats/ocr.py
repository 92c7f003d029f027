"""OCR: text from page images with Tesseract, through tesserocr (docs/decisions/0211).

Tesseract was chosen by measurement (bench/ocr.py): on rendered pages it reads clean scans
exactly and noisy, skewed ones at ~0.98 character accuracy, where the ONNX PP-OCR models in
rapidocr-onnxruntime lost most word spaces on English text and ran far slower here. tesserocr
keeps the engine in this process, so the parser child's memory and time limits cover it and a
killed child leaves no orphan `tesseract` process behind. The language data comes from
Debian's `tesseract-ocr-eng` (`make ocr`); nothing is downloaded at run time. A worker without
it fails the runs that need OCR with a sentence (OcrUnavailable), never the worker.

Pages are put upright before recognition (issue 33: a page scanned 10° askew, or upside
down, was word salad): the skew angle is measured on the image (the rotation whose row
profile of ink is sharpest: text lines become dark rows and the gaps white ones), and a page
Tesseract reads with low confidence is asked its orientation (Tesseract's OSD,
`osd.traineddata`), turned by 90/180/270° when OSD is sure, and read again; the reading
with the higher confidence is kept. An upright page pays for the skew measure only (~0.2 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from worker.pipeline.formats import common

# Where Debian, Ubuntu and Homebrew put the language data; TESSDATA_PREFIX wins when set.
_TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata",
                  "/usr/share/tessdata", "/usr/local/share/tessdata",
                  "/opt/homebrew/share/tessdata")
LANGUAGE = "eng"
OSD = "osd"
# Scans are read at 300 dpi: Tesseract's own guidance, and where bench/ocr.py measured.
DPI = 300
# Skew is measured on a copy this many pixels on its long side, over ±_SKEW_LIMIT degrees in
# 1° steps, then to 0.1° around the best; under _SKEW_MIN degrees the page is left as it is.
_SKEW_SIDE = 800
_SKEW_LIMIT = 20.0
_SKEW_MIN = 0.5
# Below this mean word confidence the page's orientation is checked (an upright page of
# print reads at 85-95); OSD's answer is taken from this confidence up (OCRmyPDF's default
# threshold for turning pages is 14; measured here, turned pages score 19-33).
_LOW_CONFIDENCE = 60
_OSD_SURE = 10.0
# When more than this share of a page's ink lies outside every word Tesseract read, its
# automatic layout skipped regions (the vote-count columns of a ruled election bulletin:
# 0.40 unread); the page is read again as sparse text and the lines only that reading found
# are added. Of bench/corpus.py's other pages, four (prose, a ruled table) measure 0.00-0.17;
# one that is mostly a drawing measures 0.94 and pays for a second reading.
_UNREAD_INK = 0.3


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


class Engine:
    """Tesseract for one document: the recogniser, and the orientation detector when a page
    needs it (loaded at most once per document)."""

    def __init__(self, tesserocr: Any, folder: str) -> None:
        self._tesserocr = tesserocr
        self._folder = folder
        self.api = tesserocr.PyTessBaseAPI(path=folder, lang=LANGUAGE)
        self._osd: Any = None

    def orientation(self, image: Any) -> int:
        """Degrees (counter-clockwise) that turn ``image`` upright; 0 when unsure or unknown."""
        if not (Path(self._folder) / f"{OSD}.traineddata").is_file():
            return 0
        if self._osd is None:
            self._osd = self._tesserocr.PyTessBaseAPI(path=self._folder, lang=OSD,
                                                      psm=self._tesserocr.PSM.OSD_ONLY)
        self._osd.SetImage(image)
        found = self._osd.DetectOrientationScript()  # None on a page with too little text
        if not found or found.get("orient_conf", 0.0) < _OSD_SURE:
            return 0
        return int(found.get("orient_deg", 0)) % 360

    def end(self) -> None:
        self.api.End()
        if self._osd is not None:
            self._osd.End()


@contextmanager
def engine() -> Iterator[Engine]:
    """Tesseract for one document; one thread, as the worker runs documents side by side."""
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
        tesseract = Engine(tesserocr, folder)
    except RuntimeError as exc:
        raise unavailable(f"Tesseract could not load {LANGUAGE}.traineddata") from exc
    try:
        yield tesseract
    finally:
        tesseract.end()


def read_image(tesseract: Engine, image: Any) -> str:
    """The text of one page image (a PIL image), as lines and blank-line separated blocks,
    read upright: deskewed, and turned when its orientation says so."""
    image = deskew(image)
    text, confidence = _recognise(tesseract.api, image)
    if confidence >= _LOW_CONFIDENCE and _unread_ink(tesseract, image) > _UNREAD_INK:
        text = _with_sparse_lines(tesseract, image, text)
    if confidence < _LOW_CONFIDENCE:
        turn = tesseract.orientation(image)
        if turn:
            turned = deskew(image.rotate(turn, expand=True, fillcolor=255))
            text2, confidence2 = _recognise(tesseract.api, turned)
            if confidence2 > confidence:
                text = text2
    return common.normalise(text).strip()


def _recognise(api: Any, image: Any) -> tuple[str, int]:
    api.SetImage(image)
    text = api.GetUTF8Text()
    return text, int(api.MeanTextConf())


def _unread_ink(tesseract: Engine, image: Any) -> float:
    """The share of the page's dark pixels outside the boxes of the words just recognised."""
    ink = np.asarray(image.convert("L")) < 128
    total = int(ink.sum())
    if not total:
        return 0.0
    level = tesseract._tesserocr.RIL.WORD  # noqa: SLF001 — the module the engine was built on
    for _, box, _, _ in tesseract.api.GetComponentImages(level, True):
        ink[box["y"]:box["y"] + box["h"], box["x"]:box["x"] + box["w"]] = False
    return int(ink.sum()) / total


def _with_sparse_lines(tesseract: Engine, image: Any, text: str) -> str:
    """``text`` and, as a last block, the lines a sparse-text reading found that it lacks."""
    api, mode = tesseract.api, tesseract.api.GetPageSegMode()
    api.SetPageSegMode(tesseract._tesserocr.PSM.SPARSE_TEXT)  # noqa: SLF001
    try:
        sparse, _ = _recognise(api, image)
    finally:
        api.SetPageSegMode(mode)
    known = set(text.lower().split())
    added = [line.strip() for line in sparse.splitlines()
             if any(word not in known for word in line.lower().split())]
    return text + ("\n\n" + "\n".join(added) if added else "")


def deskew(image: Any) -> Any:
    """``image`` rotated so that its text lines are level (grey, white filled corners)."""
    angle = skew_angle(image)
    if abs(angle) < _SKEW_MIN:
        return image
    return image.rotate(angle, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC)


def skew_angle(image: Any) -> float:
    """The counter-clockwise rotation, in degrees, that levels the text lines of ``image``.

    The projection-profile method: rotated by the right angle, the rows of a page alternate
    between lines of ink and white gaps, so the row sums change most sharply from row to row.
    """
    small = image.convert("L")
    scale = _SKEW_SIDE / max(small.size)
    if scale < 1:
        small = small.resize((max(1, int(small.width * scale)), max(1, int(small.height * scale))),
                             Image.Resampling.BILINEAR)
    ink = Image.fromarray(((np.asarray(small) < 128) * 255).astype(np.uint8))

    def sharpness(angle: float) -> float:
        rotated = ink.rotate(angle, resample=Image.Resampling.NEAREST)
        rows = np.asarray(rotated, dtype=np.float32).sum(axis=1)
        return float(np.var(np.diff(rows)))

    coarse = max(np.arange(-_SKEW_LIMIT, _SKEW_LIMIT + 0.5, 1.0), key=sharpness)
    return float(max(np.arange(coarse - 1.0, coarse + 1.05, 0.1), key=sharpness))
