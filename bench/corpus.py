"""Extraction recall on an outside corpus, against an independent extraction of each file.

    python bench/corpus.py                 # every file in bench/corpus/files, per-format medians
    python bench/corpus.py --show 3        # also the 3 lowest files with their lost words
    python bench/corpus.py --truth         # rebuild bench/corpus/truth/ with the other tools

The corpus (bench/corpus/SOURCES.md says where each file came from: Apache Tika's, pdfplumber's
and OCRmyPDF's test documents, readability's test pages) is read by the product path, the
parser child of worker/pipeline/parsers.py with the worker's default limits, so a crash or a
timeout shows as it would in a run; an error that is not a `BadDocument` is counted as
`unexpected_error` (what the worker would record).

Recall = the share of the reference's words (with repeats, any order; tests/support/quality)
that our text holds too. The reference is what another tool extracts, committed under
bench/corpus/truth/ so the bench runs without those tools; `--truth` rebuilds it:
- PDF: poppler's pdftotext (another PDF engine than our PDFium);
- DOCX, ODT, RTF: LibreOffice Writer's text export (headless); PPTX: LibreOffice Impress to
  PDF, then pdftotext; XLSX, XLS: LibreOffice Calc's CSV export of every sheet;
- EPUB: pandoc's plain text;
- HTML (readability's test pages): pandoc's plain text of readability's own `expected.html`,
  so the reference is the main content only, as a reader-mode extractor keeps it;
- EML: Perl's Email::MIME (subject, from, to, each text part; HTML parts through pandoc); MSG:
  msgconvert (Perl's Email::Outlook::Message) to EML, then the same;
- images: the text layer (pdftotext) of the PDF page poppler rendered them from, or the
  reference text OCRmyPDF ships beside `linn.png`;
- CSV, TXT, Markdown, JSON: the file's own words (nothing is hidden in them).
Debian packages for --truth: poppler-utils, pandoc, libreoffice-{writer,calc,impress}-nogui,
libemail-outlook-message-perl, libemail-address-perl. Apache Tika's app would be one tool for all, but its jar is on
Maven Central, which this project's machines cannot reach.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared import errors  # noqa: E402
from tests.support import quality  # noqa: E402
from worker.pipeline import extract, parsers  # noqa: E402

CORPUS = ROOT / "bench" / "corpus"
FILES, TRUTH = CORPUS / "files", CORPUS / "truth"
# The groups issue 33 reports medians for, by source type.
GROUPS = {"pdf": "pdf", "png": "images", "jpeg": "images", "tiff": "images", "webp": "images",
          "docx": "docx", "pptx": "pptx", "xlsx": "sheets", "xls": "sheets", "csv": "sheets",
          "eml": "mail", "msg": "mail", "epub": "epub/odt/rtf", "odt": "epub/odt/rtf",
          "rtf": "epub/odt/rtf", "html": "html", "txt": "txt/md/json", "md": "txt/md/json",
          "json": "txt/md/json"}
TARGET = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--truth", action="store_true", help="rebuild the reference texts")
    parser.add_argument("--show", type=int, default=0, help="print the N lowest files")
    parser.add_argument("--only", help="only files whose name contains this")
    args = parser.parse_args()
    files = sorted(p for p in FILES.iterdir() if extract.type_for_name(p.name)
                   and (not args.only or args.only in p.name))
    if args.truth:
        TRUTH.mkdir(exist_ok=True)
        for path in files:
            (TRUTH / f"{path.name}.txt").write_text(reference(path))
        print(f"wrote {len(files)} reference texts to {TRUTH.relative_to(ROOT)}")
        return
    print(f"load before: {os.getloadavg()[0]:.2f}  files: {len(files)}")
    rows = [measure(path) for path in files]
    report(rows, args.show)
    print(f"load after: {os.getloadavg()[0]:.2f}")


def measure(path: Path) -> dict:
    kind = extract.type_for_name(path.name) or ""
    truth = (TRUTH / f"{path.name}.txt").read_text()
    started = time.monotonic()
    code, text = "ok", ""
    try:
        text = parsers.extract_isolated(path, kind, max_uncompressed_bytes=200 << 20,
                                        timeout_s=120, memory_bytes=1 << 30).text
    except errors.BadDocument as exc:
        code = exc.code
    except Exception:  # noqa: BLE001 - what the worker records as unexpected_error
        code = "unexpected_error"
    return {"name": path.name, "kind": kind, "code": code, "ms": (time.monotonic() - started)
            * 1000, "recall": quality.recall(text, truth), "words": len(quality.words(truth)),
            "lost": lost_words(text, truth)}


def lost_words(text: str, truth: str) -> list[str]:
    have = set(quality.words(text))
    return [w for w in dict.fromkeys(quality.words(truth)) if w not in have][:15]


def report(rows: list[dict], show: int) -> None:
    print(f"\n{'group':<14}{'files':>6}{'median recall':>15}{'min':>8}{'errors':>8}  target")
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(GROUPS[row["kind"]], []).append(row)
    for group, members in sorted(groups.items()):
        recalls = [r["recall"] for r in members]
        bad = [r for r in members if r["code"] != "ok"]
        median = statistics.median(recalls)
        print(f"{group:<14}{len(members):>6}{median:>15.3f}{min(recalls):>8.3f}{len(bad):>8}  "
              f"{'met' if median >= TARGET else 'MISSED'}")
    kinds: dict[str, list[float]] = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row["recall"])
    print("by type: " + ", ".join(f"{k} {statistics.median(v):.3f} ({len(v)})"
                                  for k, v in sorted(kinds.items())))
    unexpected = [r["name"] for r in rows if r["code"] == "unexpected_error"]
    print(f"unexpected_error: {len(unexpected)} {unexpected if unexpected else ''}")
    for row in rows:
        if row["code"] not in ("ok", "unexpected_error"):
            print(f"  {row['name']}: {row['code']}")
    for row in sorted(rows, key=lambda r: r["recall"])[:show]:
        print(f"  {row['recall']:.3f} {row['name']} ({row['words']} words, {row['ms']:.0f} ms)"
              f" lost: {' '.join(row['lost'])}")


# ── the independent extraction ──────────────────────────────────────────────────────────
def reference(path: Path) -> str:
    kind = extract.type_for_name(path.name)
    name = path.name
    if name.startswith("readability-"):
        expected = CORPUS / "expected" / name
        return _run(["pandoc", "-f", "html", "-t", "plain", "--wrap=none", str(expected)])
    if name.startswith("render-"):  # render-<pdf stem>[-skewed].<image type>: page 1
        stem = name.removeprefix("render-").rsplit(".", 1)[0].removesuffix("-skewed")
        return _run(["pdftotext", "-f", "1", "-l", "1", str(FILES / f"{stem}.pdf"), "-"])
    if name == "linn.png":
        return (CORPUS / "expected" / "linn.txt").read_text()
    if kind == "pdf":
        return _run(["pdftotext", str(path), "-"])
    if kind in ("docx", "odt", "rtf"):
        return _office(path, "txt:Text (encoded):UTF8", "txt")
    if kind == "pptx":
        return _run(["pdftotext", str(_office_file(path, "pdf", "pdf")), "-"])
    if kind in ("xlsx", "xls"):
        # every sheet (the -1), UTF-8, comma-separated, formatted as shown
        return _office(path, "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,true,"
                             "false,false,-1", "csv", every=True)
    if kind == "epub":
        return _run(["pandoc", "-t", "plain", "--wrap=none", str(path)])
    if kind in ("eml", "msg"):
        return _mail(path)
    data = path.read_bytes()  # csv, txt, md, json: the file's own words
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # what these files are written in when not UTF-8


def _run(command: list[str], **kwargs: object) -> str:
    done = subprocess.run(command, capture_output=True, check=True, timeout=300, **kwargs)
    return done.stdout.decode("utf-8", errors="replace")


_WORK = Path(tempfile.mkdtemp(prefix="corpus-truth-"))


def _office_file(path: Path, target: str, ext: str, every: bool = False) -> Path:
    out = _WORK / path.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    subprocess.run(["soffice", "--headless", f"-env:UserInstallation=file://{_WORK}/profile",
                    "--convert-to", target, "--outdir", str(out), str(path)],
                   capture_output=True, check=True, timeout=300)
    made = sorted(out.glob(f"*.{ext}"))
    return made[0] if not every else out


def _office(path: Path, target: str, ext: str, every: bool = False) -> str:
    made = _office_file(path, target, ext, every)
    files = sorted(made.glob(f"*.{ext}")) if every else [made]
    return "\n".join(f.read_text(errors="replace") for f in files)


_PERL_MAIL = r"""
use strict; use warnings; use Email::MIME; binmode STDOUT, ':utf8';
local $/; my $m = Email::MIME->new(<STDIN>);
print join("\n", map { $m->header($_) // '' } qw(Subject From To Cc)), "\n";
$m->walk_parts(sub {
  my ($p) = @_; return if $p->subparts;
  my $ct = $p->content_type // 'text/plain';
  return if ($p->header('Content-Disposition') // '') =~ /attachment/i;
  my $body = eval { $p->body_str } // $p->body;
  if ($ct =~ m{^text/html}i) { print "\n<<<HTML>>>\n", $body, "\n<<<END>>>\n" }
  elsif ($ct =~ m{^text/plain}i || $ct eq '') { print "\n", $body, "\n" }
});
"""


def _mail(path: Path) -> str:
    source = path
    if path.suffix == ".msg":
        out = _WORK / f"{path.stem}.eml"
        subprocess.run(["msgconvert", "--outfile", str(out), str(path)], capture_output=True,
                       check=True, timeout=120)
        source = out
    text = _run(["perl", "-e", _PERL_MAIL], input=source.read_bytes())
    parts = text.split("\n<<<HTML>>>\n")
    plain = [parts[0]]
    for part in parts[1:]:
        markup, _, rest = part.partition("\n<<<END>>>\n")
        plain.append(_run(["pandoc", "-f", "html", "-t", "plain", "--wrap=none"],
                          input=markup.encode()))
        plain.append(rest)
    return "\n".join(plain)


if __name__ == "__main__":
    main()
