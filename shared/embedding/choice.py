"""EMBEDDING_VARIANT=auto: the faster variant on this machine, chosen by measurement (ADR 0231).

Which variant is faster depends on the machine: on this project's 2-core build machine the int8
export embeds 1.6-3.6x faster than torch fp32, on a 16-core host torch is 1.8x faster than int8
(issue 27: 190 against 106 chunks/s). So at first load both run over the same fixed sample of
token ids, interleaved, each timed at its best of a few rounds; the faster one whose vectors
agree with fp32 (mean cosine >= AGREEMENT) is used, and both figures are logged. The choice is
written beside the ONNX export, named by what decides it (CPU model, cores, threads, library
versions, weights, sample, batch size), so later starts on such a machine read it instead of
measuring again; delete the file to measure again, or name a variant to skip all this.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import platform
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from shared.embedding import backends, batches
from shared.logging import setup as log_as_json_lines

log = logging.getLogger(__name__)

# The bar of ADR 0110: int8's mean cosine to fp32 was 0.993 on a varied corpus.
AGREEMENT = 0.99
# Bump when the sample or the procedure changes: cached choices then measure again.
SAMPLE_VERSION = "v2"
# Lengths of the sample's sequences in tokens, special tokens included: the spread of a
# document's chunks (most near the chunker's 200-token target, a tail of short ones).
SAMPLE_LENGTHS = (24, 48, 80, 112, 144, 176, 200, 208, 224, 240, 254, 256) * 2
ROUNDS = 2
# Ordinary prose on unrelated topics, cut into the sample's sequences. Real sentences matter:
# int8's agreement with fp32 is a property of text like what is embedded (0.993 on a varied
# corpus, ADR 0110), and word salad from a small vocabulary reads about 0.98.
PROSE = (
    "The river rose two metres overnight after three days of rain in the hills, and the town "
    "council closed the lower bridge to traffic until engineers could inspect its supports. "
    "Residents of the streets nearest the water were asked to move their cars to higher ground.",
    "The court of appeal held that the supplier had breached the contract by delivering the "
    "goods six weeks late, but it reduced the damages because the buyer had not tried to find "
    "another supplier when the delay first became clear.",
    "Before running the database migration in production, we copied last night's backup to a "
    "staging server, applied the new schema there and timed every step; the longest one, "
    "rebuilding an index on the orders table, took eleven minutes.",
    "Knead the dough for ten minutes until it is smooth and elastic, then cover the bowl with a "
    "damp cloth and leave it somewhere warm for an hour. It should roughly double in size "
    "before you shape the loaves and bake them at 220 degrees.",
    "Through the small telescope the four largest moons of Jupiter looked like a line of faint "
    "stars beside the planet, and over two hours of watching one of them slipped behind it.",
    "Patients with high blood pressure are advised to reduce the salt in their diet, take "
    "regular exercise and keep a record of their readings at home, which the doctor reviews "
    "at each visit before changing the dose of any medicine.",
    "Quarterly revenue rose by nine percent compared with the same period last year, mainly "
    "because of higher sales in Asia, while operating costs grew more slowly than expected and "
    "the company repaid part of its long-term debt.",
    "The marathon runner kept a steady pace for the first thirty kilometres, then pulled away "
    "from the leading group on the long climb and crossed the finish line almost a minute "
    "ahead of her closest rival, setting a new course record.",
    "In the winter of 1848 the railway reached the village for the first time, and within a "
    "decade its weekly market had grown into one of the busiest in the county, drawing "
    "traders from towns that had once been a full day's journey away.",
    "To reset the device, hold the power button for ten seconds until the light flashes "
    "orange, then release it and wait for the light to turn green. Your settings are kept, "
    "but you will need to connect to the wireless network again.",
    "Le comité a approuvé le budget pour l'année prochaine après une longue discussion sur le "
    "financement des écoles. Die Messungen am Gletscher wurden im Winter fortgesetzt.",
    "Every worker takes a lock on the run before it changes the run's status, so two workers "
    "that receive the same message never both process it; the second one leaves the message "
    "and moves on to the next one in the queue.",
)

Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Trial:
    variant: str
    chunks_per_s: float
    # Mean cosine of this variant's vectors to torch fp32 on the CPU, over the sample.
    cosine_to_fp32: float


class _Embedder(Protocol):
    """What ``resolve`` reads of shared.embedding.model.Embedder."""

    path: Path
    threads: int
    batch_tokens: int
    max_seq_length: int
    mean_pooling: bool
    cache_dir: Path | None
    tokenizer: Any

    @property
    def device(self) -> str: ...  # read-only here: the Embedder's is a Literal

    def open_backend(self, variant: str) -> backends.Backend: ...


def choose(trials: Sequence[Trial]) -> Trial:
    """The fastest trial among those that agree with fp32; torch fp32 always agrees (1.0)."""
    agreeing = [t for t in trials if t.cosine_to_fp32 >= AGREEMENT]
    if not agreeing:
        raise ValueError("embed: no variant agrees with fp32; EMBEDDING_VARIANT=torch is the "
                         "reference and must be among the trials.")
    return max(agreeing, key=lambda t: t.chunks_per_s)


def measure(forwards: Mapping[str, Forward], passes: Sequence[tuple[np.ndarray, np.ndarray]],
            *, reference: str = "torch", rounds: int = ROUNDS,
            clock: Callable[[], float] = time.perf_counter) -> list[Trial]:
    """Time each variant over ``passes``: a small warm-up pass each, then ``rounds`` full runs,
    the variants' order alternating per round so a burst of load from elsewhere hits both;
    each keeps its best run. Vectors of the first run are compared with ``reference``'s."""
    ids, mask = passes[-1]
    for forward in forwards.values():
        forward(ids[:2], mask[:2])  # first calls allocate; not what a running worker pays
    best = {name: float("inf") for name in forwards}
    vectors: dict[str, np.ndarray] = {}
    for round_no in range(rounds):
        names = list(forwards) if round_no % 2 == 0 else list(reversed(list(forwards)))
        for name in names:
            started = clock()
            out = [forwards[name](ids, mask) for ids, mask in passes]
            best[name] = min(best[name], clock() - started)
            vectors.setdefault(name, _unit(np.vstack(out)))
    count = sum(len(ids) for ids, _ in passes)
    return [Trial(name, count / max(best[name], 1e-9),
                  float(np.mean(np.sum(vectors[name] * vectors[reference], axis=1))))
            for name in forwards]


def sample_passes(tokenizer: Any, batch_tokens: int,
                  max_length: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The fixed sample as the embed queue would pass it: sorted by length, cut by the budget."""
    sequences = sample_ids(tokenizer, max_length)
    return [batches.pad([sequences[i] for i in rows])
            for rows in batches.plan_batches([len(s) for s in sequences], batch_tokens)]


def sample_ids(tokenizer: Any, max_length: int) -> list[list[int]]:
    """SAMPLE_LENGTHS sequences of ordinary prose, tokenized by the model's own tokenizer:
    each starts at the beginning of a paragraph and runs on through the next ones as needed."""
    sequences = []
    for k, length in enumerate(min(n, max_length) for n in SAMPLE_LENGTHS):
        first = (k + 6 * (k // len(PROSE))) % len(PROSE)  # each length twice, two beginnings
        text = " ".join(PROSE[(first + j) % len(PROSE)] for j in range(len(PROSE)))
        ids = tokenizer.encode(text, add_special_tokens=True).ids
        sequences.append([*ids[: length - 1], ids[-1]])  # keep the closing special token
    return sequences


def resolve(embedder: _Embedder, *, clock: Callable[[], float] = time.perf_counter,
            rounds: int = ROUNDS, in_child: bool = False) -> tuple[str, backends.Backend]:
    """The variant ``auto`` stands for on this machine, and its backend, loaded.

    ``in_child``: measure in a fresh process (the worker's and the gateway's way), so this one
    only ever loads the variant it keeps: torch's runtime and an ONNX session side by side are
    a gigabyte and more that the chosen variant never uses (issue 34). Tests measure here."""
    if embedder.device == "cuda" or not embedder.mean_pooling or embedder.cache_dir is None:
        # int8 runs on the CPU only, and only for mean pooling; without a cache it cannot be
        # exported. None of these needs a measurement to decide.
        why = ("the device is cuda" if embedder.device == "cuda" else
               "the model does not pool by mean" if not embedder.mean_pooling else
               "EMBEDDING_CACHE_DIR is not set")
        log.info("embedding variant chosen", extra={"variant": "torch", "reason": why})
        return "torch", embedder.open_backend("torch")
    path = embedder.cache_dir / f"variant-{_profile_key(embedder)}.json"
    cached = _read(path)
    if cached is None:
        # One process measures; its peers wait for its file rather than time the variants
        # against each other's load (and export the model side by side).
        with backends.cache_lock(embedder.cache_dir, path.name):
            cached = _read(path)
            if cached is None:
                return _measure(embedder, path, clock, rounds, in_child)
    log.info("embedding variant chosen", extra={
        "variant": cached["chosen"], "reason": "cached measurement", "file": str(path),
        **_figures(cached["trials"])})
    return cached["chosen"], embedder.open_backend(cached["chosen"])


def _measure(embedder: _Embedder, path: Path, clock: Callable[[], float], rounds: int,
             in_child: bool) -> tuple[str, backends.Backend]:
    if in_child:
        return _measured_in_child(embedder, path, rounds)
    opened = {"torch": embedder.open_backend("torch")}
    try:
        opened["onnx-int8"] = embedder.open_backend("onnx-int8")
    except Exception as exc:  # noqa: BLE001 - auto must still serve; torch is always correct
        log.warning("embedding variant auto: onnx-int8 could not be loaded; using torch",
                    extra={"error": f"{type(exc).__name__}: {exc}"})
        return "torch", opened["torch"]
    chosen = _measure_and_record(embedder, {name: b.forward for name, b in opened.items()},
                                 path, clock, rounds)
    return chosen, opened[chosen]


def _measure_and_record(embedder: _Embedder, forwards: Mapping[str, Forward], path: Path,
                        clock: Callable[[], float], rounds: int) -> str:
    started = time.monotonic()
    trials = measure(forwards, sample_passes(embedder.tokenizer, embedder.batch_tokens,
                                             embedder.max_seq_length),
                     rounds=rounds, clock=clock)
    chosen = choose(trials).variant
    figures = [asdict(t) for t in trials]
    measured_s = round(time.monotonic() - started, 2)
    _write(path, {"chosen": chosen, "trials": figures, "profile": _profile(embedder),
                  "measured_s": measured_s})
    log.info("embedding variant chosen", extra={
        "variant": chosen, "reason": "measured", "file": str(path), "measure_s": measured_s,
        **_figures(figures)})
    return chosen


# Generous: the sample takes seconds on an idle machine, minutes on an overloaded one (ADR 0231).
CHILD_TIMEOUT_S = 1800


def _measured_in_child(embedder: _Embedder, path: Path,
                       rounds: int) -> tuple[str, backends.Backend]:
    """Both variants measured in a spawned process that writes the choice's file; then only
    the chosen one opened here. If the child cannot decide (int8 fails to load or export, the
    child dies), torch: always correct, as in-process."""
    facts = {"path": str(embedder.path), "cache_dir": str(embedder.cache_dir),
             "threads": embedder.threads, "batch_tokens": embedder.batch_tokens,
             "max_seq_length": embedder.max_seq_length, "record": str(path), "rounds": rounds}
    child = multiprocessing.get_context("spawn").Process(
        target=_measure_in_this_process, args=(facts,), name="embedding-variant-choice")
    child.start()
    child.join(CHILD_TIMEOUT_S)
    if child.is_alive():
        child.kill()
        child.join()
    record = _read(path)
    if record is None:
        log.warning("embedding variant auto: the measurement did not finish; using torch",
                    extra={"exitcode": child.exitcode})
        return "torch", embedder.open_backend("torch")
    log.info("embedding variant chosen", extra={
        "variant": record["chosen"], "reason": "measured", "file": str(path),
        "measure_s": record.get("measured_s"), **_figures(record["trials"])})
    return record["chosen"], embedder.open_backend(record["chosen"])


class _Facts:
    """An Embedder's facts in the measuring child, opening the real backends."""

    device = "cpu"
    mean_pooling = True

    def __init__(self, facts: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        self.path = Path(facts["path"])
        self.cache_dir: Path | None = Path(facts["cache_dir"])
        self.threads, self.batch_tokens = facts["threads"], facts["batch_tokens"]
        self.max_seq_length = facts["max_seq_length"]
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def open_backend(self, variant: str) -> backends.Backend:
        if variant == "onnx-int8":  # this process is the throwaway one: export here
            assert self.cache_dir is not None
            return backends.OnnxBackend(self.path, self.cache_dir, self.threads,
                                        export_here=True)
        return backends.TorchBackend(self.path, "cpu", self.threads)


def _measure_in_this_process(facts: dict[str, Any]) -> None:
    """The child's whole life: open both variants, measure, write the record (or nothing if
    int8 cannot be opened: the parent then keeps torch, and the next start tries again)."""
    log_as_json_lines("embedding-choice", os.environ.get("LOG_LEVEL", "INFO"))
    embedder = _Facts(facts)
    opened = {"torch": embedder.open_backend("torch"),
              "onnx-int8": embedder.open_backend("onnx-int8")}
    _measure_and_record(embedder, {name: b.forward for name, b in opened.items()},
                        Path(facts["record"]), time.perf_counter, facts["rounds"])


def _figures(trials: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Both variants' figures as log fields: torch_chunks_per_s, onnx_int8_cosine, …"""
    out = {}
    for t in trials:
        name = t["variant"].replace("-", "_")
        out[f"{name}_chunks_per_s"] = round(t["chunks_per_s"], 1)
        out[f"{name}_cosine"] = round(t["cosine_to_fp32"], 4)
    return out


def _profile(embedder: _Embedder) -> dict[str, Any]:
    """What decides which variant is faster: the machine, the settings, the software."""
    return {"cpu": _cpu_model(), "cores": len(os.sched_getaffinity(0)),
            "threads": embedder.threads, "batch_tokens": embedder.batch_tokens,
            "torch": _version("torch"), "onnxruntime": _version("onnxruntime"),
            "weights": backends.weights_digest(embedder.path), "recipe": backends.ONNX_RECIPE,
            "sample": SAMPLE_VERSION, "torch_runner": backends.TORCH_RUNNER}


def _profile_key(embedder: _Embedder) -> str:
    text = json.dumps(_profile(embedder), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("chosen") not in ("torch", "onnx-int8"):
        return None
    return record


def _write(path: Path, record: dict[str, Any]) -> None:
    """Best effort, atomic: two processes measuring at once each write a whole file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".variant-",
                                         delete=False) as tmp:
            json.dump(record, tmp, indent=1)
        os.chmod(tmp.name, 0o644)  # as readable as the export beside it
        os.replace(tmp.name, path)
    except OSError as exc:
        log.warning("could not cache the embedding variant choice; the next start measures "
                    "again", extra={"error": str(exc)})


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
