"""A memo from byte strings to short runs of int32 values, for kernels that compute the same
answer for the same bytes again and again: the word splitter's long way per chunk
(``stages/quality/chunk_memo.py``) and the BPE tokenizer per piece (``pipeline/text/bpe/merge.py``,
whose table of token ranks is one too, made large enough never to empty).

An open-addressing table of 64-bit hashes to entries; each entry keeps the key's bytes
(compared on a hit, so a hash collision costs a miss, never a wrong answer) and where its
values start in the values pool. Keys longer than the memo's ``max_bytes`` are not kept.
When a new entry would not fit, the memo is emptied and starts over: what it holds
changes speed, never answers. One memo is used by one thread at a time.

A memo is a tuple of arrays (numba passes it to kernels as is):
(slots, hashes, entries, pool, values, fill).
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import fnv1a, mix64

# Fields of an entry (a row of ``entries``) and of ``fill``.
_AT, _LEN, _FIRST, _COUNT = 0, 1, 2, 3
_N_ENTRIES, _N_BYTES, _N_VALUES, _MAX_BYTES = 0, 1, 2, 3


def byte_memo(slots: int, bytes_per_entry: int, values_per_entry: int, max_bytes: int) -> tuple[np.ndarray, ...]:
    """An empty memo of ``slots`` (a power of two) slots, half of them usable, with room
    for keys of ``bytes_per_entry`` bytes and ``values_per_entry`` values on average;
    keys above ``max_bytes`` are never kept."""
    entries = slots // 2
    fill = np.zeros(4, np.int64)
    fill[_MAX_BYTES] = max_bytes
    return (
        np.zeros(slots, np.int32),  # entry index + 1 per slot, 0: empty
        np.empty(slots, np.uint64),  # the hash of the key in each used slot
        np.empty((entries, 4), np.int32),  # per entry: key at, key length, first value, values
        np.empty(entries * bytes_per_entry, np.uint8),
        np.empty(entries * values_per_entry, np.int32),
        fill,
    )


@njit(_nrt=False)
def key_hash(buf, s, e):
    return mix64(fnv1a(buf, s, e))


@njit(_nrt=False)
def lookup(slots, hashes, entries, pool, buf, s, e, h):
    """The entry holding the bytes buf[s:e] (hash ``h``), or -1."""
    mask = slots.shape[0] - 1
    k = np.int64(h & np.uint64(mask))
    size = e - s
    while slots[k] != 0:
        if hashes[k] == h:
            x = slots[k] - 1
            if entries[x, _LEN] == size and _same(pool, entries[x, _AT], buf, s, size):
                return x
        k = (k + 1) & mask
    return -1


@njit(_nrt=False)
def values_of(entries, x):
    """(first, count) of entry x's values in the memo's values array."""
    return entries[x, _FIRST], entries[x, _COUNT]


@njit(_nrt=False)
def reserve(memo, buf, s, e, h, count):
    """Adds buf[s:e] (hash ``h``, not held yet) with room for ``count`` values and returns
    where they go in the values array (the caller writes them), or -1 if it is not kept."""
    slots, hashes, entries, pool, values, fill = memo
    size = e - s
    if size > fill[_MAX_BYTES] or size > pool.shape[0] or count > values.shape[0]:
        return -1
    full = fill[_N_ENTRIES] == entries.shape[0]
    if full or fill[_N_BYTES] + size > pool.shape[0] or fill[_N_VALUES] + count > values.shape[0]:
        for k in range(slots.shape[0]):
            slots[k] = 0
        fill[_N_ENTRIES] = 0
        fill[_N_BYTES] = 0
        fill[_N_VALUES] = 0
    x = fill[_N_ENTRIES]
    at = fill[_N_BYTES]
    first = fill[_N_VALUES]
    for i in range(size):
        pool[at + i] = buf[s + i]
    entries[x, _AT] = at
    entries[x, _LEN] = size
    entries[x, _FIRST] = first
    entries[x, _COUNT] = count
    fill[_N_ENTRIES] = x + 1
    fill[_N_BYTES] = at + size
    fill[_N_VALUES] = first + count
    mask = slots.shape[0] - 1
    k = np.int64(h & np.uint64(mask))
    while slots[k] != 0:
        k = (k + 1) & mask
    slots[k] = x + 1
    hashes[k] = h
    return first


@njit(_nrt=False)
def _same(pool, at, buf, s, size):
    for i in range(size):
        if pool[at + i] != buf[s + i]:
            return False
    return True
