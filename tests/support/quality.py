"""How close extracted text is to the text known to be in a document.

`similarity` is character-level: both texts are reduced to their letters and digits in words
(case folded, punctuation and Markdown syntax gone, so `2.1.` and `## 2.1` agree), the words
are aligned (difflib), and the score is the share of characters inside aligned words:
2 * matched characters / (characters of both). Aligning words rather than single characters
keeps it fast on whole chapters; a word with one wrong character counts as wholly unmatched,
so the score errs low.
"""

from __future__ import annotations

import collections
import difflib
import re
import unicodedata

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    # A soft hyphen marks where a word may break; the word is still one word.
    folded = unicodedata.normalize("NFKC", text.replace("\xad", "")).casefold()
    return [w for w in _WORD.findall(folded) if w.replace("_", "")]


def similarity(extracted: str, truth: str) -> float:
    a, b = words(extracted), words(truth)
    total = sum(map(len, a)) + sum(map(len, b))
    if not total:
        return 1.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    matched = sum(sum(len(w) for w in a[m.a: m.a + m.size]) for m in matcher.get_matching_blocks())
    return 2 * matched / total


def recall(extracted: str, truth: str) -> float:
    """The share of ``truth``'s words (counted with repeats) that ``extracted`` holds too, in
    any order: what an independent extraction finds that ours lost. Order-free, so a table
    read by rows or a footnote moved to the end is not a loss; 1.0 for an empty truth."""
    have, want = collections.Counter(words(extracted)), collections.Counter(words(truth))
    total = sum(want.values())
    return sum((have & want).values()) / total if total else 1.0


def between(text: str, start: str, end: str | None = None) -> str:
    """The part of ``text`` from the first ``start`` up to the next ``end`` (or the end)."""
    begin = text.index(start)
    stop = text.index(end, begin + len(start)) if end else len(text)
    return text[begin:stop]
