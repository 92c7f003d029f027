"""The onnx-int8 variant gives the torch variant's answers (docs/decisions/0110, 0111).

A fixed corpus of a few hundred varied chunks (topics, lengths from a heading to the token cap,
lists, numbers, code, other languages), generated from a seed, embedded by both variants.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from shared.embedding import backends
from shared.embedding import model as embed

pytestmark = pytest.mark.slow  # loads the model twice and exports it once, a minute or so

TOPICS = {
    "astronomy": ("the telescope", "a red dwarf star", "the comet's tail", "Jupiter's moons",
                  "the observatory", "a distant galaxy", "the solar eclipse"),
    "cooking": ("the sourdough starter", "a pinch of salt", "the braised lamb", "fresh basil",
                "the oven at 220 degrees", "a cast-iron pan", "the risotto"),
    "finance": ("quarterly revenue", "the interest rate", "the pension fund", "a bond yield",
                "operating margin", "the annual audit", "currency exposure"),
    "medicine": ("the patient's blood pressure", "a course of antibiotics", "the MRI scan",
                 "chronic migraine", "the vaccine trial", "post-operative care", "insulin"),
    "law": ("the tenancy agreement", "the court of appeal", "a breach of contract",
            "the data protection act", "the witness statement", "an injunction", "the verdict"),
    "software": ("the database migration", "a memory leak", "the HTTP gateway", "unit tests",
                 "the message queue", "a race condition", "the deployment pipeline"),
    "sport": ("the marathon runner", "a penalty kick", "the relay team", "the tennis final",
              "the cycling stage", "a swimming record", "the goalkeeper"),
    "nature": ("dragonflies", "the glacier", "a coral reef", "migrating geese", "the rainforest",
               "wild mushrooms", "the river delta"),
}
VERBS = ("was measured against", "depends heavily on", "changed sharply after",
         "was discussed alongside", "is often confused with", "improved because of",
         "was reported next to", "cannot be separated from")
CLOSERS = ("in the spring report", "according to the committee", "over the last decade",
           "during the night shift", "for the third year running", "despite early doubts")
FOREIGN = ("Le comité a approuvé le budget pour l'année prochaine.",
           "Die Messungen am Gletscher wurden im Winter fortgesetzt.",
           "El paciente recibió el alta después de tres días.",
           "Il treno per Milano parte alle nove e un quarto.")
QUERIES = ("how fast do dragonflies fly", "interest rates and bond markets",
           "a bug that slowly uses up all memory", "court ruling on a broken contract",
           "baking bread at home", "observing planets through a telescope",
           "side effects of antibiotics", "who won the football match",
           "melting ice in the mountains", "database schema changes in production",
           "heart rate and blood pressure readings", "coral bleaching in warm seas",
           "annual financial statements", "a recipe with herbs", "running a long race",
           "privacy law and personal data", "queue consumers and retries", "galaxies far away",
           "budget approved by the committee", "tiles and the kitchen floor")


def _sentence(rng: random.Random, topic: str) -> str:
    subject, other = rng.sample(TOPICS[topic], 2)
    return (f"{subject[0].upper()}{subject[1:]} {rng.choice(VERBS)} {other} "
            f"{rng.choice(CLOSERS)}.")


def corpus(n: int = 300, seed: int = 15) -> list[str]:
    rng = random.Random(seed)
    names = sorted(TOPICS)
    chunks = []
    for i in range(n):
        topic = names[i % len(names)]
        kind = i % 6
        if kind == 0:  # a bare heading
            chunks.append(f"## {rng.choice(TOPICS[topic]).capitalize()}")
        elif kind == 1:  # a long paragraph, close to the chunk cap
            chunks.append(" ".join(_sentence(rng, topic) for _ in range(rng.randint(10, 14))))
        elif kind == 2:  # a list with numbers
            chunks.append("\n".join(f"- {rng.choice(TOPICS[topic])}: {rng.randint(1, 9999)} "
                                    f"({rng.random() * 100:.1f} %)" for _ in range(6)))
        elif kind == 3:  # mixed topics and another language
            chunks.append(f"{_sentence(rng, topic)} {rng.choice(FOREIGN)} "
                          f"{_sentence(rng, rng.choice(names))}")
        elif kind == 4:  # code
            chunks.append(f"```python\ndef check_{topic}(value):\n    # {_sentence(rng, topic)}"
                          f"\n    return value > {rng.randint(0, 500)}\n```")
        else:  # a short paragraph
            chunks.append(" ".join(_sentence(rng, topic) for _ in range(rng.randint(2, 4))))
    return chunks


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    cache = tmp_path_factory.mktemp("models")
    return (embed.load_embedder(variant="torch"),
            embed.load_embedder(variant="onnx-int8", cache_dir=cache), cache)


def _ids(embedder: embed.Embedder, texts: list[str]) -> list[list[int]]:
    # As the pipeline does: ids made once, with the special tokens, fed to either variant.
    return [e.ids for e in embedder.tokenizer.encode_batch(texts, add_special_tokens=True)]


def test_int8_vectors_stay_within_cosine_0_99_of_fp32(variants):
    fp32, int8, _ = variants
    texts = corpus()
    a, b = fp32.encode_ids(_ids(fp32, texts)), int8.encode_ids(_ids(int8, texts))

    cosines = np.sum(a * b, axis=1)
    assert len(texts) == 300 and max(len(ids) for ids in _ids(fp32, texts)) > 200
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert cosines.mean() >= 0.99, f"mean cosine {cosines.mean():.4f}"
    assert cosines.min() >= 0.95, f"worst cosine {cosines.min():.4f}"


def test_int8_finds_the_same_top_10_neighbours(variants):
    fp32, int8, _ = variants
    texts = corpus()
    docs_a, docs_b = fp32.encode(texts), int8.encode(texts)
    queries_a, queries_b = fp32.encode(list(QUERIES)), int8.encode(list(QUERIES))

    overlaps = []
    for qa, qb in zip(queries_a, queries_b, strict=True):
        top_a = set(np.argsort(-(docs_a @ qa))[:10])
        top_b = set(np.argsort(-(docs_b @ qb))[:10])
        overlaps.append(len(top_a & top_b) / 10)
    assert np.mean(overlaps) >= 0.9, f"top-10 overlap {np.mean(overlaps):.3f}: {overlaps}"


def test_batch_neighbours_move_int8_vectors_only_within_tolerance(variants):
    # Dynamic int8 scales activations per batch, padding included: a text's vector depends a
    # little on the texts batched with it (ADR 0111). Never more than the variant's tolerance,
    # and the export, traced from one sample shape, must serve every batch shape and padding.
    _, int8, _ = variants
    texts = corpus(40)
    together = int8.encode(texts)
    alone = np.vstack([int8.encode([text]) for text in texts])

    cosines = np.sum(together * alone, axis=1)
    assert cosines.min() >= 0.98, f"worst cosine {cosines.min():.4f}"
    assert cosines.mean() >= 0.99, f"mean cosine {cosines.mean():.4f}"


def test_the_export_is_made_once_and_reused(variants):
    _, int8, cache = variants
    int8.load()
    exported = sorted(cache.glob("*.onnx"))
    assert len(exported) == 1 and backends.ONNX_RECIPE in exported[0].name
    stamp = exported[0].stat().st_mtime_ns

    again = embed.load_embedder(variant="onnx-int8", cache_dir=cache)
    again.load()

    assert sorted(cache.glob("*.onnx")) == exported
    assert exported[0].stat().st_mtime_ns == stamp
    assert not [p for p in cache.iterdir() if p.name.startswith(".export-")]


def test_onnx_refuses_a_model_that_does_not_mean_pool(tmp_path):
    model = tmp_path / "cls-model"
    source = embed.model_path(embed.DEFAULT_MODEL)
    model.mkdir()
    for name in ("tokenizer.json", "modules.json", "sentence_bert_config.json"):
        (model / name).write_bytes((source / name).read_bytes())
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(
        '{"word_embedding_dimension": 384, "pooling_mode_cls_token": true, '
        '"pooling_mode_mean_tokens": false}')

    with pytest.raises(ValueError, match="mean-pooling models only"):
        embed.load_embedder(str(model), variant="onnx-int8", cache_dir=tmp_path / "cache")
