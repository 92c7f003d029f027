"""Main-content extraction of web pages: ours against trafilatura, on readability's test pages.

    python bench/html_main_content.py --trafilatura-python /tmp/t/bin/python

The pages are mozilla/readability's test pages in bench/corpus/files/ and the engadget page in
tests/fixtures/documents/; the reference is pandoc's plain text of readability's own
`expected.html` (bench/corpus/truth/, or pandoc at run time for engadget). Recall: the share
of the reference's words our text holds (tests/support/quality.recall); precision: the share
of the extractor's words the reference holds (furniture kept lowers it). trafilatura is not a
dependency of the product: it runs in its own environment (`python -m venv /tmp/t &&
/tmp/t/bin/pip install trafilatura lxml_html_clean`), given by --trafilatura-python, with
`include_tables=True`, comments off. ADR 0297.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import quality  # noqa: E402
from worker.pipeline import extract  # noqa: E402

CORPUS = ROOT / "bench" / "corpus"
FIXTURES = ROOT / "tests" / "fixtures" / "documents"
_TRAFILATURA = """
import json, sys, time, trafilatura
out, spent = {}, 0.0
for path in json.load(sys.stdin):
    html = open(path, "rb").read().decode("utf-8", "replace")
    start = time.perf_counter()
    out[path] = trafilatura.extract(html, include_tables=True, include_comments=False) or ""
    spent += time.perf_counter() - start
print(json.dumps({"texts": out, "seconds": spent}))
"""


def pages(tmp: Path) -> list[tuple[Path, str]]:
    """(page, reference text) for each readability test page we hold."""
    found = [(p, (CORPUS / "truth" / f"{p.name}.txt").read_text())
             for p in sorted((CORPUS / "files").glob("readability-*.html"))]
    page = tmp / "readability-engadget.html"
    page.write_bytes(gzip.decompress((FIXTURES / "readability-engadget.html.gz").read_bytes()))
    expected = tmp / "engadget.expected.html"
    expected.write_bytes(gzip.decompress(
        (FIXTURES / "readability-engadget.expected.html.gz").read_bytes()))
    truth = subprocess.run(["pandoc", "-f", "html", "-t", "plain", "--wrap=none", str(expected)],
                           check=True, capture_output=True, text=True).stdout
    return [*found, (page, truth)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trafilatura-python", required=True,
                        help="a python whose environment has trafilatura")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = pages(Path(tmp))
        run = subprocess.run([args.trafilatura_python, "-c", _TRAFILATURA], check=True,
                             input=json.dumps([str(p) for p, _ in corpus]),
                             capture_output=True, text=True)
        theirs = json.loads(run.stdout)
        rows, ours_seconds = [], 0.0
        for page, truth in corpus:
            start = time.perf_counter()
            ours = extract.extract(page, "html").text
            ours_seconds += time.perf_counter() - start
            other = theirs["texts"][str(page)]
            row = (quality.recall(ours, truth), quality.recall(other, truth),
                   quality.recall(truth, ours), quality.recall(truth, other))
            rows.append(row)
            print(f"{page.name:34} recall ours {row[0]:.3f} trafilatura {row[1]:.3f}   "
                  f"precision ours {row[2]:.3f} trafilatura {row[3]:.3f}")
    for i, label in enumerate(("recall ours", "recall trafilatura", "precision ours",
                               "precision trafilatura")):
        values = [r[i] for r in rows]
        print(f"{label:22} median {statistics.median(values):.3f}  "
              f"mean {statistics.mean(values):.3f}  min {min(values):.3f}")
    print(f"seconds for {len(rows)} pages: ours {ours_seconds:.2f}, "
          f"trafilatura {theirs['seconds']:.2f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
