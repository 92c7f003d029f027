"""Token ids into forward passes: what the Embedder, the variant choice and the worker's embed
queue share, so none of them imports another for it.

``plan_batches`` cuts sequences into passes of at most a padded-token budget; ``pad`` pads one
pass; ``Packed`` holds one document's ids as arrays, made once when the document is queued, so a
pass is gathered from whole documents with numpy rather than one Python list per chunk.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


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


def pad(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad with id 0 (BERT's [PAD]; masked out either way) to the longest sequence."""
    packed = Packed(sequences)
    return packed.ids, packed.mask()


class Packed:
    """One document's id sequences as a right-padded int64 matrix and their lengths, ``width``
    columns wide (default: its longest): documents packed to one width (the model's limit)
    stack into a window with one ``np.concatenate``."""

    __slots__ = ("ids", "lengths")

    def __init__(self, sequences: Sequence[Sequence[int]], width: int = 0) -> None:
        self.lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64,
                                   count=len(sequences))
        width = width or (int(self.lengths.max()) if len(sequences) else 0)
        flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64,
                           count=int(self.lengths.sum()))
        self.ids = np.zeros((len(sequences), width), dtype=np.int64)
        self.ids[_mask(self.lengths, width)] = flat

    def __len__(self) -> int:
        return len(self.lengths)

    def mask(self) -> np.ndarray:
        return _mask(self.lengths, self.ids.shape[1]).astype(np.int64)


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width) < lengths[:, None]
