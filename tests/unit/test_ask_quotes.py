"""Ask's extractive quotes on a real document: a question is no answer (issue 35).

"What is Debian?" over tests/fixtures/documents/debian-faq.ch02.txt (README there: source and
licence), chunked by the worker's chunker and embedded by the shipped model as the stack would,
was answered by quoting the FAQ's own heading "What is the latest version of Debian?": the
sentence nearest the question in meaning is the question the FAQ asks.
"""

from __future__ import annotations

import asyncio
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

from gateway.search import answer, evidence

pytestmark = pytest.mark.slow  # loads the embedding model: seconds

FAQ = pathlib.Path(__file__).parents[1] / "fixtures" / "documents" / "debian-faq.ch02.txt"


@pytest.fixture(scope="module")
def model():
    from shared.embedding.model import load_embedder

    return load_embedder()


@pytest.fixture(scope="module")
def chunks(model) -> list[str]:
    from tokenizers import Tokenizer

    from worker.pipeline import chunk, extract

    tokenizer = Tokenizer.from_file(str(model.path / "tokenizer.json"))
    chunker = chunk.Chunker(tokenizer, target_tokens=200, max_tokens=254, model_max_tokens=256)
    return [c.text for c in chunker.split(extract.extract(FAQ, "txt"), title=FAQ.stem)]


class Embedder:
    def __init__(self, model) -> None:
        self.model = model

    async def embed(self, text: str) -> list[float]:
        return [float(x) for x in self.model.encode([text])[0]]


def quotes(model, chunks: list[str], question: str) -> list[str]:
    """The quotes ask gives: its nearest chunks in meaning, most similar first, quoted."""
    vectors = np.asarray(model.encode(chunks))
    q = np.asarray(model.encode([question])[0])
    nearest = [{"text": chunks[i], "chunk_id": str(i)} for i in np.argsort(-(vectors @ q))[:8]]
    runtime = SimpleNamespace(embedder=Embedder(model))
    return [p["quote"] for p in asyncio.run(answer._stating(runtime, list(q), nearest))]


def test_what_is_debian_is_not_answered_with_the_faqs_own_question(model, chunks):
    said = quotes(model, chunks, "What is Debian?")
    assert said, "the FAQ states things about Debian; ask quotes them"
    for q in said:
        assert not q.rstrip().endswith("?"), q
        assert any(all(part in p for part in evidence.quote_parts(q)) for p in chunks), q
        # verbatim (ADR 0311)
    assert "What is the latest version of Debian?" not in " ".join(said)


def test_a_passage_of_questions_alone_is_quoted_only_when_nothing_states():
    text = "2.1. What is the latest version of Debian?\n\nHow many versions are there?"
    chosen = [s for s in evidence.sentences(text) if evidence.quotable(s.text)]
    assert evidence.quote_kind(text, chosen, [0.9, 0.1]) == evidence.ASKS
    assert evidence.nearest_quote(text, chosen, [0.9, 0.1]) == \
        "What is the latest version of Debian?"
    stated = "Is it stable? Debian is a free operating system. Its name is Debian."
    chosen = evidence.sentences(stated)
    assert evidence.quote_kind(stated, chosen, [0.9, 0.1, 0.1]) == evidence.STATES
    # from the statement on, not running into a question
    assert evidence.nearest_quote(stated, chosen, [0.9, 0.1, 0.1]) == \
        "Debian is a free operating system. Its name is Debian."
