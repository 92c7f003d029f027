"""OCR: pages/s and character accuracy on scans whose true text is known.

    python bench/ocr.py            # 4 pages of Debian's FAQ, clean and degraded
    python bench/ocr.py --quick    # 2 pages
    python bench/ocr.py --pages 8 --dpi 300

Pages of a born-digital PDF (tests/fixtures/documents/debian-faq.en.pdf) are rendered with
PDFium at --dpi, then either kept clean or degraded like a photocopy (noise, specks, blur, a
1.5° skew; tests/support/scans.py), wrapped as an image-only PDF, and extracted by the product
(extract.extract: page detection, rendering, Tesseract through tesserocr). The baseline is what a
competent engineer would write by hand: the same images straight into tesserocr, one API for
all pages, no PDF in between. Accuracy is tests/support/quality.similarity against each page's
own text layer (word-aligned, character-weighted; errs low). Targets (issue 25): >= 0.95 clean,
>= 0.90 degraded. Prints the load average: figures taken on a busy machine are slower.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.support import quality, scans  # noqa: E402
from worker.pipeline import extract  # noqa: E402
from worker.pipeline.formats import ocr  # noqa: E402

FAQ = pathlib.Path(__file__).resolve().parents[1] / "tests/fixtures/documents/debian-faq.en.pdf"
FIRST_PAGE = 12  # chapter 2 onwards: prose, headings, URLs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 pages")
    parser.add_argument("--dpi", type=int, default=ocr.DPI)
    args = parser.parse_args()
    pages = 2 if args.quick else args.pages
    if ocr.tessdata() is None:
        sys.exit("no Tesseract English data: run `make ocr` (apt-get install tesseract-ocr-eng)")
    indices = range(FIRST_PAGE, FIRST_PAGE + pages)
    truths = [scans.page_text(str(FAQ), i) for i in indices]
    clean = [scans.render(str(FAQ), i, args.dpi) for i in indices]
    noisy = [scans.degrade(image, seed=i) for i, image in enumerate(clean)]
    print(f"OCR bench: {pages} pages of Debian's FAQ at {args.dpi} dpi, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for label, images in (("clean", clean), ("noisy+skewed", noisy)):
        product, product_s = _product(images, args.dpi)
        bare, bare_s = _bare(images)
        print(f"  {label:13} product: {pages / product_s:5.2f} pages/s, accuracy "
              f"{_accuracy(product, truths):.4f}   baseline (bare tesserocr): "
              f"{pages / bare_s:5.2f} pages/s, accuracy {_accuracy(bare, truths):.4f}")


def _product(images: list, dpi: int) -> tuple[list[str], float]:
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "scan.pdf"
        path.write_bytes(scans.image_pdf(images, dpi))
        started = time.perf_counter()
        doc = extract.extract(path, "pdf")
        elapsed = time.perf_counter() - started
    bounds = [*doc.page_starts, len(doc.text)]
    return [doc.text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)], elapsed


def _bare(images: list) -> tuple[list[str], float]:
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    import tesserocr

    started = time.perf_counter()
    with tesserocr.PyTessBaseAPI(path=ocr.tessdata(), lang="eng") as api:
        texts = []
        for image in images:
            api.SetImage(image)
            texts.append(api.GetUTF8Text())
    return texts, time.perf_counter() - started


def _accuracy(texts: list[str], truths: list[str]) -> float:
    return min(quality.similarity(text, truth) for text, truth in zip(texts, truths, strict=True))


if __name__ == "__main__":
    main()
