"""Chunk stage: split extracted text into pieces the embedding model can take whole.

Sizes are measured in the embedding model's own tokens, so a chunk never exceeds what the model
reads (it would silently truncate the rest); boundaries follow the Markdown structure that the
extract stage emits, so headings, paragraphs and list items stay together when they fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from semantic_text_splitter import MarkdownSplitter
from tokenizers import Tokenizer

from worker.pipeline import extract

# [CLS] and [SEP], which the model adds to every input.
SPECIAL_TOKENS = 2
_HEADINGS_ONLY = re.compile(r"(?:#{1,6}[ \t][^\n]*\n*)+")


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    text: str
    token_count: int
    char_start: int
    char_end: int
    page: int | None
    # The model's input ids for ``text``, special tokens included, as the chunker tokenized them:
    # the embed stage feeds these to the model, so no text is tokenized twice (ADR 0112).
    token_ids: tuple[int, ...] = ()


class Chunker:
    """Splits documents into chunks of ``target_tokens`` to the hard cap, without overlap.

    The hard cap is ``min(max_tokens, model_max_tokens - 2)``: the model's limit includes the two
    special tokens it adds. Chunks fill up until they reach the target, so most land between the
    target and the cap; the text before a heading may make a shorter one.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        target_tokens: int,
        max_tokens: int,
        model_max_tokens: int,
    ) -> None:
        self.cap = min(max_tokens, model_max_tokens - SPECIAL_TOKENS)
        if not 0 < target_tokens <= self.cap:
            raise ValueError(
                f"chunk: target_tokens={target_tokens} must be between 1 and the hard cap "
                f"{self.cap} (min of max_tokens and the model limit minus 2); fix the settings."
            )
        self._tokenizer = _untruncated_copy(tokenizer)
        self._splitter = MarkdownSplitter.from_huggingface_tokenizer(
            self._tokenizer, capacity=(target_tokens, self.cap), overlap=0
        )

    def split(self, doc: extract.Extracted) -> list[Chunk]:
        # chunk_indices yields character offsets (not UTF-8 byte offsets) into doc.text.
        pieces = [(s, text) for s, text in self._splitter.chunk_indices(doc.text) if text.strip()]
        pieces = self._glue_headings(doc.text, pieces)
        # With the special tokens, as the model reads them; token_count leaves them out.
        encodings = self._tokenizer.encode_batch(
            [text for _, text in pieces], add_special_tokens=True
        )
        return [
            Chunk(
                ordinal=ordinal,
                text=text,
                token_count=len(encoding.ids) - sum(encoding.special_tokens_mask),
                char_start=start,
                char_end=start + len(text),
                page=doc.page_at(start),
                token_ids=tuple(encoding.ids),
            )
            for ordinal, ((start, text), encoding) in enumerate(zip(pieces, encodings, strict=True))
        ]

    def _glue_headings(self, text: str, pieces: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Join a chunk of bare headings to the chunk after it when the two fit under the cap.

        When a section is too big for one chunk the splitter cuts it below its heading, and the
        heading can come out alone: a chunk that matches its title in search and says nothing.
        """
        glued: list[tuple[int, str]] = []
        for start, piece in pieces:
            if glued and _HEADINGS_ONLY.fullmatch(glued[-1][1]):
                merged = text[glued[-1][0] : start + len(piece)]
                if self._count(merged) <= self.cap:
                    glued[-1] = (glued[-1][0], merged)
                    continue
            glued.append((start, piece))
        return glued

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _untruncated_copy(tokenizer: Tokenizer) -> Tokenizer:
    """A copy that counts every token: a truncating tokenizer would make long chunks look short.

    A copy, so the caller's tokenizer keeps whatever settings the caller gave it.
    """
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy
