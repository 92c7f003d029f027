"""Ask's evidence test and quote selection (gateway/search/evidence.py, ADR 0223)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.search import evidence

RULE = {"min_lift": 0.23, "floor": 0.25, "small_tenant": 0.35}


def neighbours(best: float, background: float, n: int = 50) -> list[float]:
    return [best] + [background] * (n - 1)


def test_a_best_chunk_that_stands_out_is_evidence_whatever_the_corpus_level():
    # Figures of the evaluation (bench/search_quality.py): an on-topic question whose
    # relevant chunks raise its own background (flea, msmarco) and a vaguer one (dbpedia).
    assert evidence.judge(neighbours(0.836, 0.675), **RULE).answerable
    assert evidence.judge(neighbours(0.461, 0.290), **RULE).answerable


def test_a_best_chunk_no_better_than_the_neighbourhood_abstains_with_its_figures():
    verdict = evidence.judge(neighbours(0.333, 0.147), **RULE)  # "sous vide" over dbpedia
    assert not verdict.answerable and verdict.reason == "weak_evidence"
    assert verdict.facts() == {"best_similarity": 0.333, "background": 0.147,
                               "lift": pytest.approx(0.218, abs=1e-3)}


def test_the_floor_holds_even_when_everything_else_is_far():
    assert not evidence.judge(neighbours(0.24, -0.2), **RULE).answerable


def test_a_small_tenant_without_neighbours_needs_the_absolute_level():
    assert evidence.judge([0.5, 0.1, 0.1], **RULE).answerable
    verdict = evidence.judge([0.3, 0.1], **RULE)
    assert not verdict.answerable and verdict.background is None
    assert evidence.judge([], **RULE).reason == "no_candidates"


@settings(deadline=None)  # a loaded CI machine is no reason to fail
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=80))
def test_cited_chunks_are_exactly_those_at_or_above_the_bar(sims):
    verdict = evidence.judge(sims, **RULE)
    assert verdict.answerable == (max(sims) >= verdict.keep_above)
    assert verdict.keep_above >= (RULE["floor"] if len(sims) >= 40 else RULE["small_tenant"])


@pytest.mark.parametrize("line", [
    "# Installation", "## 2.3 Results and discussion", "Figure 3: Survival by treatment arm.",
    "Table 2. Baseline characteristics of the cohort", "Corresponding author: J. Doe, MD",
    "© 2019 Elsevier Ltd. All rights reserved.", "Contact us at info@example.org for details.",
    "| model | nDCG | recall |", "Page 12 of 40", "Keywords: dragonflies, wetlands, ponds",
    "See https://example.org/paper for the full text of it", "Too short.",
])
def test_headings_captions_and_boilerplate_are_never_quoted(line):
    assert not evidence.quotable(line)


@pytest.mark.parametrize("line", [
    "These insects reach 50 km/h when they chase prey above the pond.",
    "The table below compares the three methods on every collection we tried.",
])
def test_plain_sentences_are_quotable(line):
    assert evidence.quotable(line)


def test_sentences_split_lines_and_sentences_but_never_join_lines():
    text = ("# Heading line\n\n- First item of a list. Its second sentence!\n"
            "Dr. Smith wrote it in 2019. Then 2020 came.")
    assert evidence.sentences(text) == [
        "# Heading line", "First item of a list.", "Its second sentence!",
        "Dr. Smith wrote it in 2019.", "Then 2020 came."]


def test_a_quote_grows_by_whole_sentences_within_the_limit():
    group = ["A" * 150 + ".", "B" * 150 + ".", "C" * 150 + "."]
    assert evidence.quote_from(group, 0) == group[0] + " " + group[1]
    assert evidence.quote_from(["word " * 100], 0).endswith(" …")
