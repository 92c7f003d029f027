"""What a text file's first bytes say of its encoding: a byte-order mark, or UTF-16 that is
recognisable without one (Excel's "Unicode text", Google Ads' "Excel CSV" saved without a
BOM). One reading for the gateway's content check (gateway/filetypes.py), the records reader
(worker/records/parse.py) and the document formats (worker/pipeline/formats/common.py), so an
upload the gateway calls text is one the worker can decode.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple


class Bom(NamedTuple):
    codec: str  # for bytes.decode / open(): it consumes the mark itself
    label: str  # for people: what the batch says it read


# UTF-32 first: its little-endian mark begins with UTF-16's.
BOMS = (Bom("utf-32", "UTF-32LE with BOM"), Bom("utf-32", "UTF-32BE with BOM"),
        Bom("utf-8-sig", "UTF-8 with BOM"), Bom("utf-16", "UTF-16LE with BOM"),
        Bom("utf-16", "UTF-16BE with BOM"))
_MARKS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF8, codecs.BOM_UTF16_LE,
          codecs.BOM_UTF16_BE)


def bom(head: bytes) -> Bom | None:
    """The byte-order mark ``head`` starts with, or None."""
    return next((found for mark, found in zip(_MARKS, BOMS, strict=True)
                 if head.startswith(mark)), None)


def utf16_without_bom(head: bytes) -> str | None:
    """utf-16-le / utf-16-be when most code units of ``head`` are ASCII with a NUL high byte
    (text in UTF-16 whose characters are mostly Latin), else None."""
    pairs = len(head) // 2
    if pairs < 2:
        return None
    even_nul = sum(1 for i in range(0, pairs * 2, 2) if head[i] == 0)
    odd_nul = sum(1 for i in range(1, pairs * 2, 2) if head[i] == 0)
    if odd_nul >= 0.6 * pairs and even_nul <= 0.1 * pairs:
        return "utf-16-le"
    if even_nul >= 0.6 * pairs and odd_nul <= 0.1 * pairs:
        return "utf-16-be"
    return None
