"""The keyword list's top n by BM25 without scoring every chunk that holds a query word.

A query of common words matches a large share of a tenant's chunks (three words each in one
chunk of eight: 31,000 of 100,000), and scoring them all costs time in proportion. Yet a
chunk can only reach the top n if its score can reach the n-th best score, θ. This module
bounds a chunk's score from the index alone, so that Postgres reads only the chunks whose
bound reaches θ, and the answer is still the exact top n (docs/decisions/0225):

- Migration 0056 indexes each chunk's lexemes with the *tier* of their BM25 weight
  (``search_bm25_tiers``: the token ``'lexeme 3'`` says the weight is in [1.0, 1.2)). A chunk
  whose lexeme t sits in tier q scores at most ``idf(t) · TIER_TOP[q]`` for t.
- ``prune_query`` writes the set {chunks whose bound reaches θ} as a tsquery over those tokens
  (WAND's test, evaluated by the GIN index instead of by a merge of postings lists).
- θ is not known in advance: ``first_threshold`` guesses it from the words' document
  frequencies; a guess too low only reads more chunks, a guess too high is seen (fewer than n
  chunks reach it) and the next try uses the n-th best score found, or a lower guess. The
  last resort is no pruning at all, so the result is always the exact top n.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

# The tiers of migration 0056 (search_bm25_tiers): width_bucket of a weight over these edges.
TIER_EDGES = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8)
# k1 + 1: a BM25 weight tf·(k1+1)/(tf + k1·(…)) stays below it however large tf grows.
MAX_WEIGHT = 2.2
# Each tier's largest weight, with room for the real (float4) rounding of the stored weights.
TIER_TOP = tuple(edge * (1 + 1e-5) for edge in (*TIER_EDGES, MAX_WEIGHT))
TIERS = len(TIER_TOP)
# A weight typical of a word found once in a chunk (avgdl 100 of migration 0055: dl = 100
# gives 2.2 / 2.2): what the first guess of θ expects a matching word to add.
TYPICAL_WEIGHT = 1.0
# Above this many tokens, the tsquery costs the GIN scan more than it saves: the bounds are made
# coarser (a term's tiers merged in pairs, then halves, then one, then the term left out and
# counted at its maximum), which keeps the test sound, only less selective.
MAX_TOKENS = 192
# Residual thresholds are rounded down to this step while the tsquery is built: lower is sound
# (more chunks pass) and makes equal sub-queries share one computation.
STEP = 0.05
# The guess of θ considers at most this many terms (the rarest): 2^12 word combinations.
GUESS_TERMS = 12


@dataclass(frozen=True)
class Term:
    lexeme: str
    idf: float
    df: int


def quote(token: str) -> str:
    """A tsquery operand for ``token`` exactly (tsquery's own quoting rules)."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def first_threshold(terms: Sequence[Term], chunks: int, n: int) -> float:
    """A guess of the n-th best score: words treated as independent, each matching word adding
    its IDF times a typical weight; θ is the score above which about n chunks are expected."""
    rare = sorted(terms, key=lambda t: -t.idf)[:GUESS_TERMS]
    share = [min(1.0, t.df / max(chunks, 1)) for t in rare]
    combos = []
    for present in itertools.product((False, True), repeat=len(rare)):
        expected = float(chunks)
        score = 0.0
        for has, t, p in zip(present, rare, share, strict=True):
            expected *= p if has else 1.0 - p
            score += t.idf * TYPICAL_WEIGHT if has else 0.0
        if score > 0:
            combos.append((score, expected))
    seen = 0.0
    for score, expected in sorted(combos, reverse=True):
        seen += expected
        if seen >= n:
            return score
    return 0.0


# ── the tsquery of "the bound reaches θ" ─────────────────────────────────────────────────────
# A node is TRUE, FALSE, or (text, tokens): a tsquery and how many operands it holds.
# prune_query's answer when no chunk's bound reaches θ.
NOTHING = ""
TRUE: tuple[str, int] = ("TRUE", 0)
FALSE: tuple[str, int] = ("FALSE", 0)
_BANDS = (1, 2, 4, 8, 0)  # the coarsening steps of one term: tiers per band merged


class _TooLarge(Exception):
    pass


def prune_query(terms: Sequence[Term], theta: float, *,
                max_tokens: int = MAX_TOKENS) -> str | None:
    """A tsquery over search_bm25_tiers' tokens matching every chunk whose BM25 bound reaches
    θ (and few others); None when that is every chunk holding a query word, NOTHING when no
    chunk can reach θ."""
    ordered = sorted({t.lexeme: t for t in terms}.values(), key=lambda t: (-t.idf, t.lexeme))
    if not ordered or theta <= 0:
        return None
    bands = [0] * len(ordered)  # index into _BANDS per term: 0 = every tier on its own
    while True:
        try:
            node = _Builder(ordered, [_BANDS[b] for b in bands], max_tokens).build(theta)
        except _TooLarge:
            # The rarest terms keep their detail longest: the least coarsened of the commonest
            # terms is made coarser by one step.
            open_ = [i for i in range(len(ordered)) if bands[i] < len(_BANDS) - 1]
            if not open_:
                return None
            bands[min(open_, key=lambda i: (bands[i], -i))] += 1
            continue
        if node is TRUE:
            return None
        if node is FALSE:  # θ above any chunk's bound: nothing can reach it
            return NOTHING
        return node[0]


class _Builder:
    """F(i, r): the chunks whose terms i.. can add r to their bound, written recursively as
    F(i+1, r) | OR over t_i's bands b of (t_i in b & F(i+1, r − idf_i·top_b))."""

    def __init__(self, terms: Sequence[Term], bands: Sequence[int], max_tokens: int) -> None:
        self.terms = terms
        self.max_tokens = max_tokens
        # Per term, its bands: (the band's tsquery of tokens, the band's top weight); a term
        # coarsened to 0 bands is left out and counted at its maximum.
        self.bands: list[list[tuple[tuple[str, int], float]]] = []
        for term, width in zip(terms, bands, strict=True):
            self.bands.append([(_or([(quote(f"{term.lexeme} {q}"), 1)
                                     for q in range(low, low + width)]),
                                TIER_TOP[low + width - 1])
                               for low in range(0, TIERS, width)] if width else [])
        # The most the terms from i on can add.
        self.rest = [0.0] * (len(terms) + 1)
        for i in reversed(range(len(terms))):
            self.rest[i] = self.rest[i + 1] + terms[i].idf * MAX_WEIGHT
        self.memo: dict[tuple[int, int], tuple[str, int]] = {}

    def build(self, theta: float) -> tuple[str, int]:
        return self.f(0, math.floor(theta / STEP))

    def f(self, i: int, units: int) -> tuple[str, int]:
        key = (i, units)
        if key not in self.memo:
            self.memo[key] = self._f(i, units)
        return self.memo[key]

    def _f(self, i: int, units: int) -> tuple[str, int]:
        need = units * STEP
        if need <= 0:
            return TRUE
        if need > self.rest[i] or i == len(self.terms):
            return FALSE
        idf = self.terms[i].idf
        if not self.bands[i]:  # left out: counted as present at its maximum weight
            return self.f(i + 1, math.floor((need - idf * MAX_WEIGHT) / STEP))
        absent = self.f(i + 1, units)
        parts = [absent]
        for band, top in self.bands[i]:
            rest = self.f(i + 1, math.floor((need - idf * top) / STEP))
            if rest != absent:  # this band adds nothing the term's absence does not
                parts.append(_and(band, rest))
        node = _or(parts)
        if node[1] > self.max_tokens:
            raise _TooLarge()
        return node


def _or(parts: Sequence[tuple[str, int]]) -> tuple[str, int]:
    kept = [p for p in parts if p is not FALSE]
    if any(p is TRUE for p in kept):
        return TRUE
    if not kept:
        return FALSE
    if len(kept) == 1:
        return kept[0]
    return "(" + " | ".join(p[0] for p in kept) + ")", sum(p[1] for p in kept)


def _and(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    if a is FALSE or b is FALSE:
        return FALSE
    if a is TRUE:
        return b
    if b is TRUE:
        return a
    return "(" + a[0] + " & " + b[0] + ")", a[1] + b[1]
