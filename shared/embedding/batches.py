"""Token ids into forward passes: what the Embedder, the variant choice and the worker's embed
queue share, so none of them imports another for it.

``plan_batches`` cuts sequences into passes of at most a padded-token budget; ``pad`` pads one
pass; ``Packed`` holds one document's ids as arrays (from the chunker's int32 arrays in one
copy, or from lists of ints), made once when the document is queued, so a pass is gathered
from whole documents with numpy rather than one Python list per chunk.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

# A chunk's token ids: a list, or the chunker's read-only int32 array (docs/decisions/0410).
TokenIds = Sequence[int] | np.ndarray


def plan_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices into ``lengths`` cut into forward passes: sorted by length, so each pass pads to
    a length close to all of its members', and each pass at most ``batch_tokens`` once padded
    (count × longest; a single sequence longer than that still gets a pass of its own)."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    sorted_lengths = np.asarray(lengths, dtype=np.int64)[order]
    return [order[a:b].tolist() for a, b in cut_sorted(sorted_lengths, batch_tokens)]


def cut_sorted(lengths: np.ndarray, batch_tokens: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of ascending ``lengths``, each pass as full as the budget allows.

    Ascending order makes a pass's last member its longest, so a pass from ``start`` may run to
    the first position whose (count × length) would pass the budget: one search per pass, not a
    Python step per sequence.
    """
    ranges = []
    start, n = 0, len(lengths)
    while start < n:
        # No pass holds more than budget // its shortest member: search that far only.
        end = min(n, start + batch_tokens // max(1, int(lengths[start])) + 1)
        padded = np.arange(1, end - start + 1) * lengths[start:end]
        stop = start + max(1, int(np.searchsorted(padded, batch_tokens, side="right")))
        ranges.append((start, stop))
        start = stop
    return ranges


def cut_around(lengths: np.ndarray, at: int, budget: int) -> tuple[int, int]:
    """The [start, stop) range of ascending ``lengths`` that holds position ``at``, pads to at
    most ``budget`` tokens (count x its last, longest member; ``at`` alone if even that is
    over) and holds the most real tokens: among full passes, the one that pads least.

    Every candidate last member from ``at`` on is tried at once: its pass runs back as far as
    the budget allows, and must still reach ``at``.
    """
    n = len(lengths)
    last = np.arange(at, min(n, at + max(1, budget // max(1, int(lengths[at])))))
    count = np.maximum(1, budget // np.maximum(1, lengths[last]))
    first = np.maximum(0, last + 1 - count)
    total = np.concatenate(([0], np.cumsum(lengths[: last[-1] + 1])))
    real = np.where(first <= at, total[last + 1] - total[first], -1)
    best = int(np.argmax(real))
    return int(first[best]), int(last[best]) + 1


def pad(sequences: Sequence[TokenIds]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad with id 0 (BERT's [PAD]; masked out either way) to the longest sequence."""
    packed = Packed(sequences)
    return packed.ids, packed.mask()


class Packed:
    """One document's id sequences as a right-padded int64 matrix and their lengths, ``width``
    columns wide (default: its longest): documents packed to one width (the model's limit)
    stack into a window with one ``np.concatenate``."""

    __slots__ = ("ids", "lengths")

    def __init__(self, sequences: Sequence[TokenIds], width: int = 0,
                 dtype: type[np.integer] = np.int64) -> None:
        self.lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64,
                                   count=len(sequences))
        width = width or (int(self.lengths.max()) if len(sequences) else 0)
        if len(sequences) and all(isinstance(s, np.ndarray) for s in sequences):
            # The chunker's arrays (ADR 0410): one copy, no id unboxed (~20 ns an id).
            flat = np.concatenate(sequences).astype(dtype, copy=False)
        else:
            flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=dtype,
                               count=int(self.lengths.sum()))
        self.ids = np.zeros((len(sequences), width), dtype=dtype)
        self.ids[_mask(self.lengths, width)] = flat

    def __len__(self) -> int:
        return len(self.lengths)

    def mask(self) -> np.ndarray:
        return _mask(self.lengths, self.ids.shape[1]).astype(np.int64)


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width) < lengths[:, None]
