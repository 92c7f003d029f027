"""Chunk stage: split extracted text into pieces the embedding model can take whole, each one
able to stand alone in a search hit.

Sizes are measured in the embedding model's own tokens, so a chunk never exceeds what the model
reads (it would silently truncate the rest); boundaries follow the Markdown structure that the
extract stage emits, so headings, paragraphs and list items stay together when they fit.

A chunk stands alone (docs/decisions/0221): a bare heading is never a chunk of its own, a chunk
smaller than ``min_tokens`` is merged into a neighbour, and every chunk carries its heading
path (the Markdown headings above it) and a contextual header — the document's title and that
path — which the embed and index stages put before its text. The header's tokens are reserved
out of the model's limit, so header and text together always fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import regex
from semantic_text_splitter import MarkdownSplitter
from tokenizers import Tokenizer

from worker.pipeline import extract

# [CLS] and [SEP], which the model adds to every input.
SPECIAL_TOKENS = 2
# At most this many tokens of a chunk's input go to its header; a longer title or path is cut.
HEADER_MAX_TOKENS = 48
# Between the header and the text in what the model and the keyword index read.
HEADER_SEPARATOR = "\n\n"
PATH_SEPARATOR = " › "
MAX_HEADING_CHARS = 200
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)
_HEADINGS_ONLY = re.compile(r"(?:#{1,6}[ \t][^\n]*\n*)+")
# Unicode word boundaries (UAX #29): "earth's", "l'eau" and "3.5" are one word each, every CJK
# ideograph is a word of its own, and a space or punctuation mark always bounds a word.
_WORD_BOUNDARY = regex.compile(r"\b", flags=regex.WORD)
_SPACE = regex.compile(r"\s+")
# A "word" longer than this (a hash, a URL, a run of letters with no break) may be cut: there is
# no better place, and it may not fit a chunk at all.
MAX_WORD_CHARS = 64


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    text: str
    token_count: int  # tokens of ``text`` alone, without the header or the special tokens
    char_start: int
    char_end: int
    page: int | None
    # The model's input ids for the header and ``text``, special tokens included, as the chunker
    # tokenized them: the embed stage feeds these to the model, so no text is tokenized twice
    # (ADR 0112). An int32 array (read-only): the embed queue copies arrays into its pool with
    # no id unboxed, ~20 ns an id of the GIL on the queue's one packing thread (ADR 0410).
    # Not compared or hashed (an array is neither): the text says the same.
    token_ids: np.ndarray = field(default_factory=lambda: _ids(()), compare=False)
    heading_path: tuple[str, ...] = ()
    # The contextual header ("Title › Chapter › Section"), '' when there is none.
    context: str = ""

    @property
    def indexed_text(self) -> str:
        """What the embedding model and the keyword index read: the header, then the text."""
        return f"{self.context}{HEADER_SEPARATOR}{self.text}" if self.context else self.text


def _ids(ids: list[int] | tuple[int, ...]) -> np.ndarray:
    array = np.asarray(ids, dtype=np.int32)
    array.flags.writeable = False  # a frozen Chunk's ids stay as tokenized
    return array


@dataclass(frozen=True)
class Heading:
    start: int  # offset of the heading line in the document's text
    level: int
    title: str


class Chunker:
    """Splits documents into chunks of ``target_tokens`` to the hard cap, without overlap.

    The hard cap is ``min(max_tokens, model_max_tokens - 2)``: the model's limit includes the two
    special tokens it adds. A document's header budget (its longest header, at most
    HEADER_MAX_TOKENS) comes off the target and the cap for its text. Chunks fill up until they
    reach the target, so most land between the target and the cap; one shorter than
    ``min_tokens`` is merged into a neighbour, or shares the text of one with it.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        target_tokens: int,
        max_tokens: int,
        model_max_tokens: int,
        min_tokens: int = 64,
    ) -> None:
        self.cap = min(max_tokens, model_max_tokens - SPECIAL_TOKENS)
        if not 0 < target_tokens <= self.cap:
            raise ValueError(
                f"chunk: target_tokens={target_tokens} must be between 1 and the hard cap "
                f"{self.cap} (min of max_tokens and the model limit minus 2); fix the settings."
            )
        self.target = target_tokens
        # Never above half the target: two minimal chunks must fit in one.
        self.min_tokens = max(1, min(min_tokens, target_tokens // 2))
        # A header never takes more than a quarter of what the model reads.
        self.header_max = min(HEADER_MAX_TOKENS, self.cap // 4)
        self._tokenizer = _untruncated_copy(tokenizer)
        self._splitters: dict[int, MarkdownSplitter] = {}

    def split(self, doc: extract.Extracted, title: str = "") -> list[Chunk]:
        headings = headings_of(doc.text)
        contexts = {path: self._header(title, path) for path in _paths(headings)}
        budget = max((self._count(c) for c in contexts.values() if c), default=0)
        cap = self.cap - budget
        splitter = self._splitter(budget)
        # chunk_indices yields character offsets (not UTF-8 byte offsets) into doc.text.
        pieces = [(s, text) for s, text in splitter.chunk_indices(doc.text) if text.strip()]
        pieces = self._whole_words(doc.text, self._stand_alone(doc.text, pieces, cap), cap)
        paths = [path_at(headings, _content_start(start, text)) for start, text in pieces]
        chunks = [Chunk(ordinal=0, text=text, token_count=0, char_start=start,
                        char_end=start + len(text), page=doc.page_at(start),
                        heading_path=path, context=contexts.get(path, ""))
                  for (start, text), path in zip(pieces, paths, strict=True)]
        return self._tokenized(chunks)

    def _tokenized(self, chunks: list[Chunk]) -> list[Chunk]:
        # With the special tokens, as the model reads them; token_count counts the text alone.
        inputs = self._tokenizer.encode_batch([c.indexed_text for c in chunks],
                                              add_special_tokens=True)
        bodies = self._tokenizer.encode_batch([c.text for c in chunks], add_special_tokens=False)
        return [
            Chunk(ordinal=ordinal, text=c.text, token_count=len(body.ids),
                  char_start=c.char_start, char_end=c.char_end, page=c.page,
                  token_ids=_ids(encoding.ids), heading_path=c.heading_path, context=c.context)
            for ordinal, (c, encoding, body) in enumerate(zip(chunks, inputs, bodies, strict=True))
        ]

    def _splitter(self, budget: int) -> MarkdownSplitter:
        if budget not in self._splitters:
            cap = self.cap - budget
            target = min(cap, max(self.min_tokens, self.target - budget))
            self._splitters[budget] = MarkdownSplitter.from_huggingface_tokenizer(
                self._tokenizer, capacity=(target, cap), overlap=0)
        return self._splitters[budget]

    def _header(self, title: str, path: tuple[str, ...]) -> str:
        """"Title › Chapter › Section", cut to ``header_max`` tokens: the middle sections go
        first (the title and the section nearest the text say the most), then the title's end."""
        parts = [" ".join(title.split())] if title.strip() else []
        # A document whose first heading repeats its title would say it twice.
        inner = list(path[1:] if path and parts and path[0].casefold() == parts[0].casefold()
                     else path)
        parts += inner
        header = PATH_SEPARATOR.join(parts)
        while parts and self._count(header) > self.header_max:
            if len(parts) > 2:
                del parts[1]  # the section nearest the text and the title say the most
            else:
                words = parts[0].split()
                parts[0] = " ".join(words[: max(0, len(words) - max(1, len(words) // 4))])
                parts = [p for p in parts if p]
            header = PATH_SEPARATOR.join(parts)
        return header

    def _stand_alone(self, text: str, pieces: list[tuple[int, str]],
                     cap: int) -> list[tuple[int, str]]:
        """No bare heading and nothing under ``min_tokens``: such a piece joins its neighbour
        when the two fit under the cap (the next one first: a heading belongs to what follows
        it), or else the two are cut again into halves that each reach the minimum."""
        out: list[tuple[int, str]] = []
        queue = list(pieces)
        while queue:
            start, piece = queue.pop(0)
            if not self._weak(piece) or (not queue and not out):  # strong, or the whole document
                out.append((start, piece))
                continue
            end = start + len(piece)
            if queue and self._fits(text[start : queue[0][0] + len(queue[0][1])], cap):
                queue[0] = (start, text[start : queue[0][0] + len(queue[0][1])])
            elif out and (not queue or not _HEADINGS_ONLY.fullmatch(piece)) and self._fits(
                    text[out[-1][0] : end], cap):
                out[-1] = (out[-1][0], text[out[-1][0] : end])
            elif queue:  # too big together: the two shared out again, each at least a minimum
                nxt_start, nxt = queue.pop(0)
                out.extend(self._halves(text, start, nxt_start + len(nxt), cap))
            else:  # the last piece, after a full one
                prev_start, _ = out.pop()
                out.extend(self._halves(text, prev_start, end, cap))
        return out

    def _whole_words(self, text: str, pieces: list[tuple[int, str]],
                     cap: int) -> list[tuple[int, str]]:
        """No chunk ends inside a word: the splitter can cut "earth's" after "earth" (it measures
        in tokens, and its word level is not UAX #29's). Where two pieces meet mid-word, the
        word moves whole into the next piece, or else into the previous one, whichever still
        fits under the cap; when both are full, the word starts the next piece and that piece's
        last words move on (``_carry``); a word longer than MAX_WORD_CHARS stays cut."""
        out = list(pieces)
        i = 0
        while i < len(out) - 1:
            (a_start, a), (b_start, b) = out[i], out[i + 1]
            cut, b_end = a_start + len(a), b_start + len(b)
            word = word_around(text, cut) if cut == b_start else None
            if word is not None:
                left = text[a_start : word[0]].rstrip()
                rest = text[word[1] : b_end]
                if left.strip() and self._fits(text[word[0] : b_end], cap):
                    out[i], out[i + 1] = (a_start, left), (word[0], text[word[0] : b_end])
                elif rest.strip() and self._fits(text[a_start : word[1]], cap):
                    right = word[1] + len(rest) - len(rest.lstrip())
                    out[i], out[i + 1] = ((a_start, text[a_start : word[1]]),
                                          (right, text[right:b_end]))
                elif left.strip():
                    out[i] = (a_start, left)
                    out[i + 1 : i + 3] = self._carry(text, word[0], b_end, out[i + 2 : i + 3], cap)
            i += 1
        return out

    def _carry(self, text: str, start: int, end: int, after: list[tuple[int, str]],
               cap: int) -> list[tuple[int, str]]:
        """``text[start:end]`` (a word grown past the cap) cut at its last space that fits,
        the words beyond it joined to the piece ``after`` (zero or one) where they fit with it,
        or else kept as a piece of their own: rare (two full pieces meeting mid-word), so a
        short piece here beats a chunk over the model's length or a word cut in two."""
        for space in reversed(list(_SPACE.finditer(text, start, end))):
            if space.start() > start and self._fits(text[start : space.start()], cap):
                head, tail_start = (start, text[start : space.start()]), space.end()
                break
        else:  # no space that fits: as the splitter cut it
            return [(start, text[start:end]), *after]
        if after and self._fits(text[tail_start : after[0][0] + len(after[0][1])], cap):
            return [head, (tail_start, text[tail_start : after[0][0] + len(after[0][1])])]
        return [head, (tail_start, text[tail_start:end]), *after]

    def _fits(self, span: str, cap: int) -> bool:
        return self._count(span) <= cap

    def _halves(self, text: str, start: int, end: int, cap: int) -> list[tuple[int, str]]:
        """``text[start:end]`` in two pieces under the cap, cut at the structural boundary that
        leaves the smaller of the two the largest (neither a bare heading)."""
        span = text[start:end]
        fine = [(s, t) for s, t in self._fine_splitter().chunk_indices(span) if t.strip()]
        best: tuple[int, int, int] | None = None  # (smaller side, left end, right start)
        for i in range(len(fine) - 1):
            left_end = fine[i][0] + len(fine[i][1])
            right_at = fine[i + 1][0]
            left, right = span[:left_end], span[right_at:]
            sizes = self._count(left), self._count(right)
            if max(sizes) > cap or _HEADINGS_ONLY.fullmatch(left.strip()):
                continue
            if best is None or min(sizes) > best[0]:
                best = (min(sizes), left_end, right_at)
        if best is None:  # no cut keeps both under the cap: as the splitter cuts it
            splitter = MarkdownSplitter.from_huggingface_tokenizer(
                self._tokenizer, capacity=cap, overlap=0)
            return [(start + s, t) for s, t in splitter.chunk_indices(span) if t.strip()]
        _, left_end, right_at = best
        left_start = len(span) - len(span.lstrip())
        return [(start + left_start, span[left_start:left_end]),
                (start + right_at, span[right_at:].rstrip())]

    def _fine_splitter(self) -> MarkdownSplitter:
        """Pieces of about a quarter of the minimum: the candidate cuts of ``_halves``."""
        if -1 not in self._splitters:
            self._splitters[-1] = MarkdownSplitter.from_huggingface_tokenizer(
                self._tokenizer, capacity=max(4, self.min_tokens // 4), overlap=0)
        return self._splitters[-1]

    def _weak(self, piece: str) -> bool:
        return bool(_HEADINGS_ONLY.fullmatch(piece)) or self._count(piece) < self.min_tokens

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def headings_of(text: str) -> list[Heading]:
    """The Markdown headings of ``text`` in order, outside fenced code blocks."""
    fenced = _fenced_spans(text)
    found = []
    for match in _HEADING.finditer(text):
        if any(a <= match.start() < b for a, b in fenced):
            continue
        title = " ".join(match.group(2).split())[:MAX_HEADING_CHARS]
        if title:
            found.append(Heading(match.start(), len(match.group(1)), title))
    return found


def word_around(text: str, at: int) -> tuple[int, int] | None:
    """The (start, end) of the word that ``at`` falls inside, or None when ``at`` is a word
    boundary (UAX #29) or the word is longer than MAX_WORD_CHARS."""
    if at <= 0 or at >= len(text) or _WORD_BOUNDARY.match(text, at):
        return None
    start = next((p for p in range(at - 1, max(0, at - MAX_WORD_CHARS) - 1, -1)
                  if _WORD_BOUNDARY.match(text, p)), None)
    end = next((p for p in range(at + 1, min(len(text), at + MAX_WORD_CHARS) + 1)
                if _WORD_BOUNDARY.match(text, p)), None)
    if start is None or end is None or end - start > MAX_WORD_CHARS:
        return None
    return start, end


def path_at(headings: list[Heading], offset: int) -> tuple[str, ...]:
    """The heading path in force at ``offset``: each level's latest heading before it."""
    stack: list[Heading] = []
    for heading in headings:
        if heading.start > offset:
            break
        while stack and stack[-1].level >= heading.level:
            stack.pop()
        stack.append(heading)
    return tuple(h.title for h in stack)


def _paths(headings: list[Heading]) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = {()}
    for heading in headings:
        paths.add(path_at(headings, heading.start))
    return paths


def _content_start(start: int, piece: str) -> int:
    """Where a piece's text begins after the headings it opens with (their path is its own)."""
    lead = re.match(r"(?:#{1,6}[ \t][^\n]*\n*)*", piece)
    return start + (lead.end() if lead and lead.end() < len(piece) else 0)


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    marks = [m.start() for m in _FENCE.finditer(text)]
    if len(marks) % 2:
        marks.append(len(text))  # an unclosed fence runs to the end
    return list(zip(marks[::2], marks[1::2], strict=True))


def _untruncated_copy(tokenizer: Tokenizer) -> Tokenizer:
    """A copy that counts every token: a truncating tokenizer would make long chunks look short.

    A copy, so the caller's tokenizer keeps whatever settings the caller gave it.
    """
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy
