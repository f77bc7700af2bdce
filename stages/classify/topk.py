"""The exact k-th best document of a source, in bounded memory, the same for any split.

Documents are ranked by a total order, best first:

1. higher score (the float32 the score column holds);
2. then smaller id hash (``pipeline.kernels.hashing.id_hashes``): a tie on the score is
   broken by the document's id, not by where it happened to be read;
3. then the unit (input file) name and the row within it, which only two copies of one
   id with the same score can reach: so the order is total and exactly k are kept.

In a 128-bit key that sorts ascending (``order_key``: the score's bits inverted, then the
id hash), the threshold is the k-th smallest key. ``kth_best`` finds it by radix
selection, 16 bits a pass over every unit's scores: each pass counts how many candidates
fall on each value of the next 16 bits and keeps the one value where the k-th lies, until
at most ``GATHER`` candidates are left, which are gathered and sorted. Memory is a 65,536
counter histogram, one unit's scores and at most ``GATHER`` candidates, whatever the size
of the run. A source of up to ``GATHER`` documents takes one read; a larger one a pass or
two more (the top 16 bits of a score in [0.5, 1) split it into 128 ranges), more only
when millions of documents share one score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

GATHER = 1 << 22  # candidates gathered and sorted in memory (about 40 bytes each while sorted)
DIGITS = 6  # 16-bit digits of the key: 2 of the score, 4 of the id hash
_SCORE_BITS = np.uint32(0xFFFFFFFF)

# A source's units, in order: (score keys, id hashes) of each unit's rows.
Units = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class Threshold:
    """The last kept document: its score, id hash, unit (ordinal in the source's sorted
    unit names) and row in that unit."""

    score: float
    id_hash: int
    unit: int
    row: int


def order_key(scores: np.ndarray) -> np.ndarray:
    """uint32 keys that sort ascending as ``scores`` sort descending (NaN and negative
    scores rank as 0: a non-negative float32's bits grow with its value)."""
    scores = np.asarray(scores, np.float32)
    clean = np.where(scores > 0, scores, np.float32(0.0)).astype(np.float32)
    return _SCORE_BITS - clean.view(np.uint32)


def key_score(key: int) -> float:
    """The score a key was made from."""
    return float(np.array([_SCORE_BITS - np.uint32(key)], np.uint32).view(np.float32)[0])


def _digit(keys: np.ndarray, hashes: np.ndarray, j: int) -> np.ndarray:
    if j < 2:
        return ((keys >> np.uint32(16 * (1 - j))) & np.uint32(0xFFFF)).astype(np.intp)
    return ((hashes >> np.uint64(16 * (5 - j))) & np.uint64(0xFFFF)).astype(np.intp)


def _matches(keys: np.ndarray, hashes: np.ndarray, prefix: list[int]) -> np.ndarray:
    mask = np.ones(len(keys), bool)
    for j, value in enumerate(prefix):
        mask &= _digit(keys, hashes, j) == value
    return mask


def kth_best(units: Units, k: int, total: int) -> Threshold:
    """The ``k``-th best document (1-based) of the ``total`` that ``units`` yields."""
    if not 1 <= k <= total:
        raise ValueError(f"k = {k} is not within 1..{total}")
    prefix: list[int] = []
    rank, count = k, total
    while count > GATHER and len(prefix) < DIGITS:
        histogram = np.zeros(1 << 16, np.int64)
        for keys, hashes in units():
            digits = _digit(keys, hashes, len(prefix))[_matches(keys, hashes, prefix)]
            histogram += np.bincount(digits, minlength=1 << 16)
        below = np.cumsum(histogram)
        value = int(np.searchsorted(below, rank))  # the first digit value reaching the rank
        rank -= int(below[value - 1]) if value else 0
        count = int(histogram[value])
        prefix.append(value)
    found = [[], [], [], []]  # keys, hashes, unit ordinals, rows
    for ordinal, (keys, hashes) in enumerate(units()):
        rows = np.flatnonzero(_matches(keys, hashes, prefix))
        for column, values in zip(found, (keys[rows], hashes[rows], np.full(len(rows), ordinal, np.int64), rows)):
            column.append(values)
    keys, hashes, ordinals, rows = (np.concatenate(column) for column in found)
    pick = np.lexsort((rows, ordinals, hashes, keys))[rank - 1]
    return Threshold(key_score(int(keys[pick])), int(hashes[pick]), int(ordinals[pick]), int(rows[pick]))


def within(keys: np.ndarray, hashes: np.ndarray, rows: np.ndarray, t: Threshold, unit_vs: int) -> np.ndarray:
    """Which documents of one unit rank at or above the threshold ``t`` (are kept):
    ``keys`` and ``hashes`` are theirs, ``rows`` their rows in the unit, and ``unit_vs``
    is -1, 0 or 1 as this unit sorts before, as or after the threshold's unit."""
    position = rows <= t.row if unit_vs == 0 else np.full(len(rows), unit_vs < 0)
    key = order_key(np.array([t.score], np.float32))[0]
    id_hash = np.uint64(t.id_hash)
    return (keys < key) | ((keys == key) & ((hashes < id_hash) | ((hashes == id_hash) & position)))
