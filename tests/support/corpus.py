"""Real, varied English text found on this machine, cut into chunks, for search-quality checks.

Synthetic sentences repeat a few templates, so their nearest neighbours are near-ties that any
rounding reorders; real prose is what search quality is about. The Python sources (the
language reference's topics and the standard library's docstrings) come with the interpreter
and so are the same wherever the tests run; the repo's docs and the installed packages'
descriptions add variety for the benchmark (bench/halfvec.py).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_WORDS, MAX_WORDS = 25, 120

# What a user would type over text like this (and some of it off-corpus).
QUERIES = (
    "how do I retry a failed ingestion run", "what happens when a worker crashes mid-document",
    "tenant isolation in search results", "rotating API keys for a tenant",
    "how are duplicate records scored", "dead letter queue handling",
    "syncing files from an S3 bucket on a schedule", "why embeddings are computed per version",
    "reciprocal rank fusion of text and vector results", "how to deactivate a document",
    "password hashing and login sessions", "database migrations applied at start",
    "what is a generator expression", "how does exception chaining work",
    "the with statement and context managers", "operator precedence in Python",
    "defining a class with a metaclass", "string formatting mini-language",
    "how are default argument values evaluated", "what does the global statement do",
    "import system and module search path", "comparing floating point numbers",
    "async for and asynchronous iterators", "slicing a list with a step",
    "parse command line arguments", "read and write CSV files", "send an HTTP request",
    "validate JSON data against a schema", "date and time zone conversion",
    "compress a file with gzip", "run a subprocess and capture output",
    "regular expression to match an email", "a fast array library for numerical computing",
    "render templates to HTML", "connect to a PostgreSQL database",
    "testing with fixtures", "type checking Python code statically",
    "lint and format source code", "tokenize text for a language model",
    "a web framework for building APIs", "mock AWS services in tests",
    "measure code coverage", "how fast do dragonflies fly", "a recipe for sourdough bread",
    "interest rates and bond markets", "court ruling on a broken contract",
    "side effects of antibiotics", "melting glaciers in the Alps",
    "hybrid search latency at 100,000 chunks", "embedding model loaded lazily in the gateway",
    "how the event ledger replays events", "alerts when an import fails",
    "cryptographic signatures and certificates", "serialize Python objects to bytes",
    "thread pool and concurrent futures", "memory usage of a process",
    "progress bar in the terminal", "YAML configuration files",
    "pagination of large result sets", "unicode normalization of strings",
)


def python_paragraphs() -> Iterator[str]:
    """The language reference's topics, then every docstring of the standard library's modules."""
    from pydoc_data import topics

    for text in topics.topics.values():
        yield from text.split("\n\n")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):  # the module's, its classes' and its functions' docstrings
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                yield from (ast.get_docstring(node) or "").split("\n\n")


def machine_paragraphs() -> Iterator[str]:
    """The repo's docs, the Python text, the installed packages' descriptions."""
    for path in sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]:
        yield from path.read_text(encoding="utf-8").split("\n\n")
    yield from python_paragraphs()
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""  # type: ignore[attr-defined]
        yield from str(body).split("\n\n")


def chunks(paragraphs: Iterator[str], limit: int, max_words: int = MAX_WORDS) -> list[str]:
    """Paragraphs joined into distinct chunks of 25-``max_words`` words; at most ``limit``,
    taken evenly from the whole text so that every source is in them."""
    out: list[str] = []
    seen: set[str] = set()
    current: list[str] = []

    def flush() -> None:
        text = " ".join(current).strip()
        current.clear()
        if len(text.split()) >= MIN_WORDS and text not in seen:
            seen.add(text)
            out.append(text)

    for paragraph in paragraphs:
        words = re.sub(r"\s+", " ", paragraph).strip().split(" ")
        if not any(words):
            continue
        for start in range(0, len(words), max_words):  # a long paragraph is cut, not dropped
            piece = words[start:start + max_words]
            if sum(len(c.split()) for c in current) + len(piece) > max_words:
                flush()
            current.append(" ".join(piece))
    flush()
    step = max(1.0, len(out) / limit)
    return [out[int(i * step)] for i in range(min(limit, len(out)))]
