"""What PDF tables and font-size headings cost: our reader beside PDFium's bare text and beside
pdfplumber reading every page (docs/decisions/0294).

    python bench/pdf_structure.py            # the corpus PDFs and Debian's FAQ, 3 rounds

Per file, processor milliseconds per page (median of the rounds, in this process):
- `pdfium text`: pypdfium2's page text and nothing else (the floor any reader pays);
- `ours`: worker/pipeline/formats/pdf.read (cleaning, outline or font-size headings, and
  pdfplumber's table finder only on pages PDFium shows ruled);
- `pdfplumber all`: pdfplumber's text and table finder on every page (the alternative: one
  library for text, tables and sizes);
and what ours found: Markdown tables and headings.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pdfplumber  # noqa: E402
import pypdfium2 as pdfium  # noqa: E402

from worker.pipeline.formats import common, pdf  # noqa: E402

FILES = [ROOT / "tests" / "fixtures" / "documents" / "debian-faq.en.pdf",
         *sorted((ROOT / "bench" / "corpus" / "files").glob("*.pdf"))]


def pdfium_text(path: Path) -> None:
    document = pdfium.PdfDocument(path)
    for index in range(len(document)):
        page = document[index]
        textpage = page.get_textpage()
        textpage.get_text_range()
        textpage.close()
        page.close()
    document.close()


def ours(path: Path) -> common.Doc:
    return pdf.read(path, common.Limits(), lambda pages: None)


def plumber_all(path: Path) -> None:
    with pdfplumber.open(path) as document:
        for page in document.pages:
            page.extract_text()
            page.find_tables()


def cpu_ms(run: object, path: Path) -> float:
    started = time.process_time()
    run(path)  # type: ignore[operator]
    return (time.process_time() - started) * 1000


def main() -> None:
    rounds = 3
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(f"{'file':<40}{'pages':>6}{'pdfium text':>13}{'ours':>8}{'pdfplumber all':>16}"
          f"{'tables':>8}{'headings':>10}   (processor ms per page)")
    for path in FILES:
        pages = len(pdfium.PdfDocument(path))
        times = {name: statistics.median(cpu_ms(run, path) for _ in range(rounds)) / pages
                 for name, run in (("pdfium", pdfium_text), ("ours", ours),
                                   ("plumber", plumber_all))}
        text = common.join_blocks(ours(path).blocks)
        tables = text.count("\n| --- |") + text.startswith("| ")
        headings = sum(line.startswith("#") for line in text.split("\n"))
        print(f"{path.name[:39]:<40}{pages:>6}{times['pdfium']:>13.1f}{times['ours']:>8.1f}"
              f"{times['plumber']:>16.1f}{tables:>8}{headings:>10}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
