"""Which documents a classifier trains on and is judged on, decided by hashes of their ids.

A choice by id hash is the same on every run, whatever the order of the files or the
batches, and needs no random state. Three independent 64-bit keys come from each id:

- the sample key, the project's id hash (``kernels.hashing.id_hashes``, the one behind
  ``prep run --sample`` and ``prep tokenizer train --sample``): ``--max-per-label N`` keeps,
  for each label, the N documents with the smallest keys;
- the held-out key: a document is held out (never trained on) when its key is below
  ``holdout x 2^64``;
- the order key: the training file is written in this order. fastText reads its file
  front to back with a learning rate that falls to zero, so documents grouped by label
  would leave the last label the last word; hash order is a shuffle without a seed.

The held-out and order keys are SplitMix64 steps of the sample key xor a constant: a
bijective avalanche, so they are independent of the sample key (a held-out split by the
sample key itself would hold out exactly the documents a small sample picks first).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.kernels.hashing import id_hashes
from pipeline.kernels.mixing import splitmix64

HOLDOUT_SALT = np.uint64(0x486F6C644F757421)  # "HoldOut!"
ORDER_SALT = np.uint64(0x5368756666646C65)  # "Shuffdle"


def keys(ids: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sample, held-out, order) keys of each id, uint64."""
    sample = id_hashes(ids)
    return sample, splitmix64(sample ^ HOLDOUT_SALT), splitmix64(sample ^ ORDER_SALT)


def held_out(holdout_keys: np.ndarray, fraction: float) -> np.ndarray:
    """Which documents the held-out split takes: about ``fraction`` of them."""
    if fraction <= 0:
        return np.zeros(len(holdout_keys), dtype=bool)
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    return holdout_keys < threshold


def heldout_ids(ids: pa.Array, fraction: float) -> np.ndarray:
    """Which of ``ids`` a training run with ``--holdout fraction`` holds out (for checks)."""
    return held_out(keys(ids)[1], fraction)


class Quota:
    """The ``n`` smallest sample keys of each label, kept in O(n) memory per label."""

    def __init__(self, n: int):
        self.n = n
        self.kept: dict[str, list[np.ndarray]] = {}
        self.sizes: dict[str, int] = {}
        self.seen: dict[str, int] = {}

    def add(self, labels: list[str], sample_keys: np.ndarray) -> None:
        for label, chosen in _by_label(labels, sample_keys):
            self.kept.setdefault(label, []).append(chosen)
            self.sizes[label] = self.sizes.get(label, 0) + len(chosen)
            self.seen[label] = self.seen.get(label, 0) + len(chosen)
            if self.sizes[label] > max(4 * self.n, 1 << 16):
                smallest = _smallest(np.concatenate(self.kept[label]), self.n)
                self.kept[label], self.sizes[label] = [smallest], len(smallest)

    def selector(self) -> Selector:
        """What the second pass keeps: per label, a bound and how many keys equal to it."""
        bounds = {}
        for label, parts in self.kept.items():
            smallest = _smallest(np.concatenate(parts), self.n)
            if self.seen[label] > self.n:
                bound = smallest.max()
                bounds[label] = (bound, int(np.count_nonzero(smallest == bound)))
        return Selector(bounds)


class Selector:
    """Keeps documents of a label with keys below its bound, and as many equal to it as
    the quota counted (equal keys mean equal ids: those come in input order)."""

    def __init__(self, bounds: dict[str, tuple[np.uint64, int]] | None = None):
        self.bounds = bounds or {}
        self.equal_left = {label: n for label, (_, n) in self.bounds.items()}

    def take(self, labels: list[str], sample_keys: np.ndarray) -> np.ndarray:
        keep = np.ones(len(labels), dtype=bool)
        if not self.bounds:
            return keep
        label_array = np.array(labels, dtype=object)
        for label, (bound, _) in self.bounds.items():
            mine = label_array == label
            if not mine.any():
                continue
            keep[mine] = sample_keys[mine] < bound
            for i in np.flatnonzero(mine & (sample_keys == bound)):
                keep[i] = self.equal_left[label] > 0
                self.equal_left[label] -= int(keep[i])
        return keep


def _by_label(labels: list[str], values: np.ndarray):
    label_array = np.array(labels, dtype=object)
    for label in dict.fromkeys(labels):
        yield label, values[label_array == label]


def _smallest(values: np.ndarray, n: int) -> np.ndarray:
    return values if len(values) <= n else np.partition(values, n - 1)[:n]
