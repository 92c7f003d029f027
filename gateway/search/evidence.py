"""Whether retrieved chunks are evidence for a question, and which of their sentences to quote.

Evidence is judged relative to the question's nearest neighbours (docs/decisions/0223), not by
one fixed cosine: every question is somewhat similar to every chunk of a corpus about anything,
and how similar depends on the corpus and the question's wording. What tells an answerable
question apart is that its best chunk stands out from the rest of its neighbours. So, over the
question's vector candidates (its nearest chunks of the tenant's active content):

- ``best``: the highest cosine similarity;
- ``background``: the median similarity of the neighbours ranked BACKGROUND_FROM to
  BACKGROUND_TO, the chunks that are near the question only as the corpus is;
- ``lift``: how much of the way from the background to a perfect match the best chunk goes,
  ``(best − background) / (1 − background)``. A question with many relevant chunks raises its
  own background; dividing by what is left above it keeps such a question answerable;
- the question is answerable when ``lift ≥ ASK_MIN_LIFT`` and ``best ≥ ASK_MIN_SIMILARITY``
  (a low floor). A tenant with fewer neighbours than BACKGROUND_TO has no background to compare
  with: its best must reach ASK_SMALL_TENANT_SIMILARITY.

The chunks cited are those whose own lift reaches ASK_MIN_LIFT, most similar first.

A quote is a sentence, never a heading, a caption, a table row or boilerplate (a corresponding
author, a copyright line, an address): the sentence of the passage nearest the question in
meaning, then the sentences after it while they fit.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

BACKGROUND_FROM, BACKGROUND_TO = 10, 40
QUOTE_CHARS = 320
MIN_QUOTE_WORDS = 5

_HEADING = re.compile(r"^\s*#{1,6}\s")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$|^\s*[-|: ]{3,}\s*$")
_CAPTION = re.compile(r"^\s*(figure|fig\.|table|chart|image|photo|plate|source|exhibit|graph)"
                      r"\s*[\dIVXivx]*\s*[.:–—-]", re.IGNORECASE)
_BOILERPLATE = re.compile(
    r"corresponding author|all rights reserved|copyright|©|\(c\)\s*\d{4}|\bdoi\s*:|"
    r"https?://|www\.|\S+@\S+\.\w+|^\s*page\s+\d+|^\s*\d+\s*(of\s*\d+)?\s*$|"
    r"click here|cookie|subscribe|terms of (use|service)|privacy policy|^\s*keywords?\s*:",
    re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”’)\]]*\s+(?=[\"“(\[]?[A-Z0-9])")
_ABBREVIATION = re.compile(r"\b(?:Dr|Mr|Mrs|Ms|Prof|St|Sr|Jr|vs|etc|al|Fig|No|e\.g|i\.e)\.$")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Verdict:
    answerable: bool
    reason: str | None  # why not: no_candidates | weak_evidence
    best: float | None
    background: float | None
    keep_above: float  # a chunk is evidence when its similarity reaches this

    def facts(self) -> dict[str, float | None]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        lift = None if self.best is None or self.background is None else \
            (self.best - self.background) / (1.0 - self.background)
        return {"best_similarity": rounded(self.best), "background": rounded(self.background),
                "lift": rounded(lift)}


def judge(similarities: Sequence[float], *, min_lift: float, floor: float,
          small_tenant: float) -> Verdict:
    """The verdict on a question from its neighbours' cosine similarities (any order)."""
    sims = sorted(similarities, reverse=True)
    if not sims:
        return Verdict(False, "no_candidates", None, None, 1.0)
    best = sims[0]
    if len(sims) < BACKGROUND_TO:
        ok = best >= small_tenant
        return Verdict(ok, None if ok else "weak_evidence", best, None, small_tenant)
    background = statistics.median(sims[BACKGROUND_FROM:BACKGROUND_TO])
    keep_above = max(floor, background + min_lift * (1.0 - background))
    ok = best >= keep_above
    return Verdict(ok, None if ok else "weak_evidence", best, background, keep_above)


def quotable(sentence: str) -> bool:
    """A sentence that can answer: not a heading, caption, table row or boilerplate line."""
    return (len(sentence.split()) >= MIN_QUOTE_WORDS and not _HEADING.match(sentence)
            and not _TABLE_ROW.match(sentence) and not _CAPTION.match(sentence)
            and not _BOILERPLATE.search(sentence)
            and sum(ch.isalpha() for ch in sentence) >= 0.5 * len(sentence.strip()))


def sentences(text: str) -> list[str]:
    """The passage's sentences in order, each on one line; lines are never joined."""
    out: list[str] = []
    new_line = True
    for line in text.split("\n"):
        line = _LIST_MARK.sub("", line).strip()
        if not line:
            continue
        for piece in _SENTENCE_END.split(line):
            piece = " ".join(piece.split())
            if out and piece and _ABBREVIATION.search(out[-1]) and not new_line:
                out[-1] += " " + piece  # "Dr. Smith": not the end of a sentence
            elif piece:
                out.append(piece)
            new_line = False
        new_line = True
    return out


def quote_from(candidates: Sequence[str], start: int) -> str:
    """The sentence at ``start``, then those after it while the quote stays within QUOTE_CHARS;
    a single sentence longer than that is cut at a word."""
    quote = candidates[start]
    for nxt in candidates[start + 1:]:
        if len(quote) + 1 + len(nxt) > QUOTE_CHARS:
            break
        quote += " " + nxt
    if len(quote) > QUOTE_CHARS:
        quote = quote[:QUOTE_CHARS].rsplit(" ", 1)[0] + " …"
    return quote
