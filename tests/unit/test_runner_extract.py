"""Which documents the worker reads in its own process (docs/decisions/0304): plain text and
Markdown up to a size, which the reader only decodes; every parsed format, and a big text, still
go to a parser child (ADR 0077)."""

from __future__ import annotations

import pytest

from worker.pipeline import runner


@pytest.mark.parametrize(("source_type", "size", "here"), [
    ("md", 1_500, True),
    ("txt", runner.DECODED_IN_PROCESS_BYTES, True),
    ("txt", runner.DECODED_IN_PROCESS_BYTES + 1, False),
    ("html", 1_500, False),
    ("pdf", 1_500, False),
    ("json", 1_500, False),
    ("csv", 1_500, False),
])
def test_only_small_decoded_formats_skip_the_parser_child(tmp_path, source_type, size, here):
    path = tmp_path / f"doc.{source_type}"
    path.write_bytes(b"a" * size)

    assert runner._decoded_only(source_type, path) is here  # noqa: SLF001
