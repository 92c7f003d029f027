"""The words of a question as ask's evidence tests read them (docs/decisions/0312, 0315).

A question's words are Postgres's (the parser and english stemmer that index the chunks:
queries.sql `question_terms`), each weighted by its IDF over the tenant's active chunks. Two
kinds matter beyond their weight:

- words no active chunk holds (``unknown``): a question that leans on them is about something
  the documents never mention;
- the question's names and numbers (``names``): a capitalised word that does not start the
  question ("Iceland", "Winter Olympics", "Edinburgh Castle"), a word in capitals ("UK",
  "AML") or with a capital inside it ("McDouble"), and any token with a digit ("1973",
  "747"). They say which thing the question is about; a passage that does not name it is about
  another thing, however close its meaning ("Which Coen Brothers film was shot in Iceland?"
  over the abstract of a Coen Brothers film). A passage names one when it holds its lexeme, or
  a lexeme with the same first NAME_PREFIX characters ("Germany" in a passage saying
  "German", "Canada" in one saying "Canadian"). A small number is named by its word as well
  ("Formula 1" by a passage saying "Formula One"): up to twenty, numbers are written either way
  (docs/decisions/0420).

A hyphenated word is indexed whole and by its parts ("Silver-Tongued": silver-tongu, silver,
tongu); only the parts are weighed, as only they are likely to be in another text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The whole of a hyphenated word (ts_debug's aliases): its parts come as tokens of their own.
COMPOUNDS = frozenset({"asciihword", "hword", "numhword"})
NAME_PREFIX = 5
# A number up to twenty -> its word's lexeme (the english stemmer's: "twelve" is "twelv").
NUMBER_WORDS = dict(zip(map(str, range(21)), [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelv", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenti"], strict=True))


@dataclass(frozen=True)
class Word:
    """One token of a question with its lexeme (None: a stop word), as ts_debug lists them."""

    alias: str
    token: str
    lexeme: str | None
    df: int  # the tenant's active chunks holding the lexeme


@dataclass(frozen=True)
class Terms:
    weights: dict[str, float]  # lexeme -> IDF, for the lexemes some active chunk holds
    unknown: float  # share of the question's IDF weight in lexemes no active chunk holds
    names: dict[str, str]  # lexeme -> the question's word, for its names and numbers

    def coverage(self, lexemes: set[str]) -> float:
        """The share of the known words' weight that a passage's lexemes hold."""
        total = sum(self.weights.values())
        held = sum(w for lexeme, w in self.weights.items() if lexeme in lexemes)
        return held / total if total else 0.0

    def content(self, lexemes: set[str]) -> float:
        """The share of the known words' weight that a passage holds, a word held as names are
        (its lexeme, or one with the same first NAME_PREFIX characters: "German" for
        "Germany", "born" and "birth" do not match): how much of the question it is about."""
        total = sum(self.weights.values())
        prefixes = _prefixes(lexemes)
        held = sum(w for lexeme, w in self.weights.items() if _named(lexeme, lexemes, prefixes))
        return held / total if total else 0.0

    def missing(self, lexemes: set[str]) -> tuple[str, ...]:
        """The question's names and numbers that a passage does not name, as the question
        writes them."""
        prefixes = _prefixes(lexemes)
        return tuple(word for lexeme, word in self.names.items()
                     if not _named(lexeme, lexemes, prefixes))


def _prefixes(lexemes: set[str]) -> set[str]:
    return {lexeme[:NAME_PREFIX] for lexeme in lexemes if len(lexeme) >= NAME_PREFIX}


def _named(lexeme: str, lexemes: set[str], prefixes: set[str]) -> bool:
    return (lexeme in lexemes or NUMBER_WORDS.get(lexeme) in lexemes
            or (len(lexeme) >= NAME_PREFIX and lexeme[:NAME_PREFIX] in prefixes))


def is_name(token: str, *, first: bool) -> bool:
    """A name or a number: a digit anywhere; capitals throughout (two letters or more); a
    capital inside the word; or a capital first letter, except on the question's first word,
    which is capitalised whatever it is."""
    letters = [ch for ch in token if ch.isalpha()]
    if any(ch.isdigit() for ch in token):
        return True
    if len(letters) >= 2 and all(ch.isupper() for ch in letters):
        return True
    if any(ch.isupper() for ch in token[1:]):
        return True
    return not first and token[:1].isupper()


def idf(df: int, total: int) -> float:
    """BM25's IDF, as text_candidates weighs a lexeme (queries.sql)."""
    n = max(total, df, 1)
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def question_terms(words: Sequence[Word], total: int) -> Terms:
    """The weights, unknown share and names of a question's words (in the question's order)."""
    weights: dict[str, float] = {}
    unknown: dict[str, float] = {}
    names: dict[str, str] = {}
    first = True
    for word in words:
        if word.alias == "blank":
            continue
        name = is_name(word.token, first=first)
        first = False
        if word.lexeme is None or word.alias in COMPOUNDS:
            continue
        (weights if word.df > 0 else unknown)[word.lexeme] = idf(word.df, total)
        if name:
            names.setdefault(word.lexeme, word.token)
    every = sum(weights.values()) + sum(unknown.values())
    return Terms(weights, sum(unknown.values()) / every if every else 0.0, names)


def words_of(rows: Iterable[Mapping[str, Any]]) -> list[Word]:
    """Word rows of queries.sql `question_terms`."""
    return [Word(r["alias"], r["token"], r["lexeme"], int(r["df"] or 0)) for r in rows]
