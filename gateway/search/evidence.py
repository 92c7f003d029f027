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
- the best chunk stands out when ``lift ≥ ASK_MIN_LIFT`` and ``best ≥ ASK_MIN_SIMILARITY``
  (a low floor). A tenant with fewer neighbours than BACKGROUND_TO has no background to compare
  with: its best must reach ASK_SMALL_TENANT_SIMILARITY, and that alone decides.

A near miss — a question that shares the documents' words but not their subject ("Which
Coen Brothers film was shot in Iceland?" over abstracts of Coen Brothers films) — has a best
chunk that stands out as well. So more tests follow (``decide``, docs/decisions/0312, 0315),
each with its own ``reason``, over the question's words (gateway/search/terms.py) and its
nearest chunks that reach the lift's bar (the evidence):
``unknown_words`` when more than ASK_MAX_UNKNOWN of the question's IDF weight is words no
document holds; ``names_not_found`` when no evidence names every name and number of the
question ("Iceland"); then, if set, ``question_not_covered`` and ``keywords_disagree`` over the
evidence that does, ``content_not_covered`` when the passage cited first holds too little of
the question's weight, ``best_not_unusual`` when the best similarity is not far enough above
the question's other candidates (in their standard deviations), and ``keyword_top_elsewhere``
when the keyword list's first document is not among the vector list's first (ADR 0380).
The thresholds are fitted on one public collection and checked on another
(bench/ask_quality.py).

The chunks cited are the evidence that names what the question names, most similar first.

A quote is a sentence, never a heading, a caption, a table row or boilerplate (a corresponding
author, a copyright line, an address): the sentence of the passage nearest the question in
meaning, then the sentences after it while they fit.
"""

from __future__ import annotations

import logging
import re
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

import pysbd

log = logging.getLogger(__name__)

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
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
# A line that is a block of its own: a heading, a list item or a table row.
_LINE_BLOCK = re.compile(r"^\s*(?:#{1,6}\s|[-*+•]\s|\d+[.)]\s|\|)")
# A blank line is one of whitespace only ("\r\n\r\n" too).
_PARAGRAPH = re.compile(r"(?:[^\n]|\n(?![^\S\n]*\n))+")
_COMPLETE = re.compile(r"[.!?…][\"”’)\]]*$")
# A question: what a FAQ heads its answers with, and no answer itself.
_QUESTION = re.compile(r"[?？][\"”’)\]]*$")
# clean=False: the text as it is (no repairs), so every span is the passage's own characters.
_SEGMENTER = pysbd.Segmenter(language="en", clean=False, char_span=True)
# What pysbd reads in place of the text: every control character and every whitespace but the
# line feed becomes a space, one for one, so its offsets are the text's. Its rules match \s
# before a list number and then int() what they matched: "\x1f0. " raised ValueError (issue
# 35), and "\r" is one of its own markers.
# (Both kinds lie below U+3001: U+3000, the ideographic space, is the last whitespace.)
_PLAIN = {c: " " for c in range(0x3001)
          if c != 0x0A and (chr(c).isspace() or unicodedata.category(chr(c)) == "Cc")}
# A line feed before a lower-case word is a wrapped line (PDF text keeps its hard line breaks),
# not a sentence break, which pysbd would make of every line feed; so is one before a
# lower-case word that opens with a quote or a bracket ("the image is" | "`unstable' or …").
_WRAPPED_LINE = re.compile(r"\n(?=[^\S\n]*[`'\"‘“(\[]*(\w))")
# Where a sentence ends when pysbd fails on a block anyway: . ! ? … then whitespace.
_FALLBACK_END = re.compile(r"[.!?…][\"”’)\]]*(?=\s)")
# What joins the parts of a quote that are not one span, and ends a cut one.
ELLIPSIS = " …"


@dataclass(frozen=True)
class Passage:
    """One of the question's nearest chunks as the tests after the lift see it."""

    chunk_id: UUID
    similarity: float
    coverage: float  # its share of the IDF weight of the question's known words
    keyword_rank: int | None  # its document's rank in the keyword list (None: not in it)
    missing: tuple[str, ...] = ()  # the question's names and numbers it does not name
    # Its share of the known words' weight, a word held as names are (terms.Terms.content).
    content: float = 0.0

    def facts(self) -> dict[str, Any]:
        return {"chunk_id": str(self.chunk_id), "similarity": round(self.similarity, 4),
                "coverage": round(self.coverage, 4), "keyword_rank": self.keyword_rank,
                "missing": list(self.missing), "content": round(self.content, 4)}


@dataclass(frozen=True)
class Verdict:
    answerable: bool
    # why not: no_candidates | weak_evidence | unknown_words | names_not_found |
    # question_not_covered | keywords_disagree | content_not_covered | best_not_unusual |
    # keyword_top_elsewhere
    reason: str | None
    best: float | None
    background: float | None
    keep_above: float  # a chunk is evidence when its similarity reaches this
    coverage: float | None = None  # the best-covered cited chunk's share of the question
    keyword_rank: int | None = None  # the cited chunks' best document rank in the keyword list
    unknown: float | None = None  # the question's share of words no document holds
    # The chunks to cite, most similar first: evidence that names what the question names.
    cited: tuple[UUID, ...] = ()
    # The names and numbers the nearest evidence lacks (what names_not_found means).
    missing: tuple[str, ...] = ()
    passages: tuple[Passage, ...] = ()  # the nearest chunks, as judged
    # How far the best similarity lies above the rest of the question's candidates, in their
    # standard deviations (best_z); the content share of the passage cited first; where the
    # keyword list's first document ranks among the vector list's documents (None: not there).
    best_z: float | None = None
    content: float | None = None
    keyword_top: int | None = None

    def facts(self) -> dict[str, Any]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        lift = None if self.best is None or self.background is None else \
            (self.best - self.background) / (1.0 - self.background)
        return {"best_similarity": rounded(self.best), "background": rounded(self.background),
                "lift": rounded(lift), "unknown": rounded(self.unknown),
                "coverage": rounded(self.coverage), "keyword_rank": self.keyword_rank,
                "missing_names": list(self.missing), "best_z": rounded(self.best_z),
                "content": rounded(self.content), "keyword_top": self.keyword_top,
                "passages": [p.facts() for p in self.passages]}


@dataclass(frozen=True)
class Rule:
    """The thresholds of ask's evidence tests (settings ASK_*; fitted by bench/ask_quality.py
    on one collection and checked on another, docs/decisions/0312, 0315)."""

    min_lift: float
    floor: float
    small_tenant: float
    min_coverage: float = 0.0
    max_keyword_rank: int = 0  # 0: the keyword test is off
    max_unknown: float = 1.0
    names: bool = False  # evidence must name the question's names and numbers
    min_content: float = 0.0  # the passage cited first must hold this share (0: off)
    min_best_z: float = 0.0  # the best must lie this many deviations above the rest (0: off)
    max_keyword_top: int = 0  # the keyword list's first document in the vector top n (0: off)

    @classmethod
    def of(cls, settings: Any) -> Rule:
        """The rule the ASK_* settings give (GatewaySettings, or anything with those fields)."""
        return cls(settings.ask_min_lift, settings.ask_min_similarity,
                   settings.ask_small_tenant_similarity, settings.ask_min_coverage,
                   settings.ask_max_keyword_rank, settings.ask_max_unknown,
                   settings.ask_require_names, settings.ask_min_content,
                   settings.ask_min_best_z, settings.ask_max_keyword_top)


def judge(similarities: Sequence[float], *, min_lift: float, floor: float,
          small_tenant: float) -> Verdict:
    """The verdict on a question from its neighbours' cosine similarities (any order)."""
    sims = sorted(similarities, reverse=True)
    if not sims:
        return Verdict(False, "no_candidates", None, None, 1.0)
    if len(sims) < BACKGROUND_TO:
        ok = sims[0] >= small_tenant
        return Verdict(ok, None if ok else "weak_evidence", sims[0], None, small_tenant)
    return lifted(sims[0], statistics.median(sims[BACKGROUND_FROM:BACKGROUND_TO]),
                  min_lift=min_lift, floor=floor)


def lifted(best: float, background: float, *, min_lift: float, floor: float) -> Verdict:
    """The lift test alone, from the best similarity and the background."""
    keep_above = max(floor, background + min_lift * (1.0 - background))
    ok = best >= keep_above
    return Verdict(ok, None if ok else "weak_evidence", best, background, keep_above)


def best_z(similarities: Sequence[float]) -> float | None:
    """How many standard deviations the best similarity lies above the other candidates'
    mean: the best against the question's own score distribution over the collection's
    nearest chunks (None: too few to have one)."""
    sims = sorted(similarities, reverse=True)
    if len(sims) < 3:
        return None
    spread = statistics.pstdev(sims[1:])
    return (sims[0] - statistics.fmean(sims[1:])) / spread if spread > 0 else None


def decide(lift: Verdict, passages: Sequence[Passage], *, unknown: float,
           rule: Rule, z: float | None = None, keyword_top: int | None = None) -> Verdict:
    """The lift verdict, then the tests a near miss fails though its best chunk stands out (it
    shares the corpus's words, not its subject), over ``passages`` (the nearest chunks, most
    similar first). Evidence is a passage whose similarity reaches the lift's bar; then:
    the question must not lean on words no document holds (unknown_words); some evidence must
    name every name and number of the question (names_not_found); the evidence that does must
    cover enough of the question's weight (question_not_covered) and rank in the keyword list
    (keywords_disagree). The first test failed is the reason; the evidence that passes is
    cited."""
    evidence = [p for p in passages if p.similarity >= lift.keep_above]
    judged = replace(lift, unknown=unknown, passages=tuple(passages),
                     missing=evidence[0].missing if evidence else (), best_z=z,
                     keyword_top=keyword_top)
    if lift.reason == "no_candidates":
        return judged
    if lift.background is None:
        # A tenant too small for a neighbourhood (under BACKGROUND_TO chunks) has too few words
        # for these tests too: nearly every question holds words it never uses. The absolute
        # similarity decides there, as it did (ADR 0106).
        return replace(judged, cited=tuple(p.chunk_id for p in evidence) if lift.answerable
                       else ())
    named = [p for p in evidence if not p.missing] if rule.names else evidence
    coverage = max((p.coverage for p in named), default=None)
    ranks = [p.keyword_rank for p in named if p.keyword_rank is not None]
    keyword_rank = min(ranks, default=None)
    content = named[0].content if named else None
    reason = lift.reason
    if reason is None and unknown > rule.max_unknown:
        reason = "unknown_words"
    elif reason is None and not named:
        reason = "names_not_found"
    elif reason is None and (coverage or 0.0) < rule.min_coverage:
        reason = "question_not_covered"
    elif reason is None and rule.max_keyword_rank and (
            keyword_rank is None or keyword_rank > rule.max_keyword_rank):
        reason = "keywords_disagree"
    elif reason is None and (content or 0.0) < rule.min_content:
        reason = "content_not_covered"
    elif reason is None and rule.min_best_z and (z is None or z < rule.min_best_z):
        reason = "best_not_unusual"
    elif reason is None and rule.max_keyword_top and (
            keyword_top is None or keyword_top > rule.max_keyword_top):
        reason = "keyword_top_elsewhere"
    return replace(judged, answerable=reason is None, reason=reason, coverage=coverage,
                   keyword_rank=keyword_rank, content=content,
                   cited=tuple(p.chunk_id for p in named) if reason is None else ())


@dataclass(frozen=True)
class Sentence:
    """A sentence of a passage: ``text[start:end]`` of the passage, verbatim, trimmed."""

    start: int
    end: int
    paragraph: int  # which block of the passage (blocks are separated by a blank line)
    text: str

    @property
    def complete(self) -> bool:
        """Ends as a sentence does (., !, ?, maybe a closing quote or bracket after it): not a
        title line or a heading, which are quoted only when a passage has nothing better."""
        return bool(_COMPLETE.search(self.text))

    @property
    def question(self) -> bool:
        """Ends with a question mark: it asks, it does not answer ("What is the latest version
        of Debian?" heading a FAQ's answer)."""
        return bool(_QUESTION.search(self.text))


def quotable(sentence: str) -> bool:
    """A sentence that can answer: not a heading, caption, table row or boilerplate line."""
    return (len(sentence.split()) >= MIN_QUOTE_WORDS and not _HEADING.match(sentence)
            and not _TABLE_ROW.match(sentence) and not _CAPTION.match(sentence)
            and not _BOILERPLATE.search(sentence)
            and sum(ch.isalpha() for ch in sentence) >= 0.5 * len(sentence.strip()))


def sentences(text: str) -> list[Sentence]:
    """The passage's sentences in order, as spans of ``text``.

    Blocks: a blank line ends a paragraph, and a heading, list item or table row is a block of
    its own line; a quote never crosses blocks. Within a block, sentence boundaries are
    pysbd's (a rule-based segmenter, Golden Rules tested: abbreviations such as "refs." "e.g."
    "Dr.", decimals, initials, and sentences ending " ." then a lower-case word, as in
    Cranfield's abstracts); its spans are offsets into the block, never overlapping. A list item's
    marker is not part of its sentence. Total: no text makes it raise (control characters are
    spaces to pysbd, and a block pysbd fails on is split at full stops).
    """
    out: list[Sentence] = []
    for paragraph, (block_start, block) in enumerate(_blocks(text)):
        done = 0  # pysbd finds its spans by searching the text: on odd input they can overlap
        for span_start, span_end in _spans(block):
            begin = max(span_start, done)
            piece = block[begin:span_end]
            done = max(done, span_end)
            lead = len(piece) - len(piece.lstrip())
            body = piece.strip()
            if body:
                start = block_start + begin + lead
                marker = _LIST_MARK.match(body)
                if marker and marker.end() < len(body):
                    start, body = start + marker.end(), body[marker.end():]
                out.append(Sentence(start, start + len(body), paragraph, body))
    return out


def _spans(block: str) -> list[tuple[int, int]]:
    """pysbd's sentence spans of a block, or, should it fail on some text, the spans between
    sentence-ending punctuation: splitting never fails, whatever a document holds."""
    try:
        return _within_words(block, [(span.start, span.end) for span in
                                     _SEGMENTER.segment(_unwrapped(block.translate(_PLAIN)))])
    except Exception:  # noqa: BLE001 - a third-party rule engine; any failure has the fallback
        log.warning("sentence splitter failed on a passage; splitting at full stops",
                    extra={"chars": len(block)})
        ends = [m.end() for m in _FALLBACK_END.finditer(block)]
        return list(zip([0, *ends], [*ends, len(block)], strict=True))


def _within_words(block: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans, each boundary that falls inside a word joined again: pysbd ends a sentence
    at any full stop it judges final, also one in a path or a name ("Read the CD label in
    /." | "disk/ info to find out …" in the Debian FAQ), and ask then quoted the tail. A
    sentence ends before white space, never between two characters of one word."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if (out and start == out[-1][1] and 0 < start < len(block)
                and not block[start - 1].isspace() and not block[start].isspace()):
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _unwrapped(block: str) -> str:
    """The block with each wrapped line's line feed a space, one for one (offsets hold)."""
    return _WRAPPED_LINE.sub(lambda m: " " if m.group(1).islower() else "\n", block)


def _blocks(text: str) -> list[tuple[int, str]]:
    """(offset, block): paragraphs split at blank lines, and every heading, list item or
    table row line a block of its own."""
    blocks: list[tuple[int, str]] = []
    for para in _PARAGRAPH.finditer(text):
        lines = list(re.finditer(r"[^\n]+", para.group()))
        run: list[re.Match[str]] = []
        for line in lines:
            if _LINE_BLOCK.match(line.group()):
                if run:
                    blocks.append(_joined(para.start(), para.group(), run))
                    run = []
                blocks.append((para.start() + line.start(), line.group()))
            else:
                run.append(line)
        if run:
            blocks.append(_joined(para.start(), para.group(), run))
    return blocks


def _joined(offset: int, para: str, run: list[re.Match[str]]) -> tuple[int, str]:
    return offset + run[0].start(), para[run[0].start():run[-1].end()]


def quote(passage: str, chosen: Sequence[Sentence], at: int) -> str:
    """The sentence ``chosen[at]``, then the sentences right after it in the same paragraph
    while the quote stays within QUOTE_CHARS, as one verbatim span of ``passage``; a single
    sentence longer than that is cut at a word and ends with " …"."""
    first = last = chosen[at]
    for nxt in chosen[at + 1:]:
        if (nxt.paragraph != first.paragraph or nxt.end - first.start > QUOTE_CHARS
                or not nxt.complete  # a title line, or the chunk's end cutting a sentence
                or (nxt.question and not first.question)):  # nor runs into a question
            break
        last = nxt
    span = passage[first.start:last.end]
    if len(span) <= QUOTE_CHARS:
        return span
    cut = span[:QUOTE_CHARS].rsplit(None, 1)[0].rstrip(" ,;:") or span[:QUOTE_CHARS]
    return cut + ELLIPSIS


# What a quote starts at, best first: a whole sentence that states; a line that is not one (a
# title, a line ending ":"); a question; the tail of a sentence the chunk's start cut.
STATES, LINE, ASKS, CUT = range(4)


def nearest_quote(passage: str, chosen: Sequence[Sentence], similarities: Sequence[float]) -> str:
    """The quote that starts at the complete sentence most similar to the question (a title
    line or other incomplete one only when the passage has no complete sentence that states, a
    question only when it has nothing but questions and a cut tail, and that tail only when it
    has nothing else)."""
    return quote(passage, chosen, _best_start(passage, chosen, similarities)[1])


def quote_kind(passage: str, chosen: Sequence[Sentence], similarities: Sequence[float]) -> int:
    """What the passage's best quote starts at (STATES, LINE, ASKS or CUT): ask leaves out a
    passage that can only quote a question when another passage states something."""
    return _best_start(passage, chosen, similarities)[0]


def _best_start(passage: str, chosen: Sequence[Sentence],
                similarities: Sequence[float]) -> tuple[int, int]:
    """(kind, index) of the sentence the passage's quote starts at."""
    cut = _cut_at_the_start(passage, chosen)

    def kind(s: Sentence) -> int:
        return CUT if s is cut else ASKS if s.question else STATES if s.complete else LINE

    at = min(range(len(chosen)), key=lambda i: (kind(chosen[i]), -similarities[i], i))
    return kind(chosen[at]), at


def _cut_at_the_start(passage: str, chosen: Sequence[Sentence]) -> Sentence | None:
    """The passage's first sentence when it is the tail of one the chunk boundary cut: it opens
    the passage in lower case where other sentences open in capitals (text written all in
    lower case, like Cranfield's abstracts, has no such tell)."""
    if not chosen or chosen[0].start != len(passage) - len(passage.lstrip()):
        return None
    opens = [s.text[0] for s in chosen if s.text[:1].isalpha()]
    if opens[:1] and opens[0].islower() and any(c.isupper() for c in opens[1:]):
        return chosen[0]
    return None


def first_quote(passage: str) -> str:
    """A quote for a passage cited without one chosen (a provider's answer): its first
    complete quotable sentence and those after it, else the passage's first words."""
    chosen = [s for s in sentences(passage) if quotable(s.text)] or sentences(passage)
    if not chosen:
        return ""
    return nearest_quote(passage, chosen, [0.0] * len(chosen))


def quote_parts(q: str) -> list[str]:
    """A quote's verbatim parts: split at " … ", without a trailing " …" (what the checker of
    every quote against its chunk reads, and what a client may highlight)."""
    body = q[:-len(ELLIPSIS)] if q.endswith(ELLIPSIS) else q
    return body.split(ELLIPSIS + " ")
