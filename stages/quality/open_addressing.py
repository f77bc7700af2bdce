"""Open-addressing hash tables over 64-bit keys, and those keys, for the repetition rules.

Duplicate lines, paragraphs and n-grams are found by hashing, never by building
strings. Keys are 64-bit (0 means an empty slot); at web-document sizes a collision is
about as likely as a cosmic-ray bit flip, and the tables stay linear in the input.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import mix64_nonzero
from stages.quality.jit import kernel, leaf


@leaf
def bytes_key(buf, start, end):
    """Key of the string buf[start:end] (length-aware polynomial hash, finalised; never 0)."""
    h = np.uint64(end - start)
    for i in range(start, end):
        h = h * np.uint64(0x100000001B3) + np.uint64(buf[i]) + np.uint64(1)
    return mix64_nonzero(h)


@leaf
def table_capacity(n_items):
    cap = 16
    while cap < 2 * n_items:
        cap *= 2
    return cap


@leaf
def slot_of(keys, key):
    """Slot holding ``key``, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    slot = np.int64(key & np.uint64(mask))
    while keys[slot] != 0 and keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


@kernel
def count_duplicates(keys_of_items, chars_of_items, n):
    """datatrove's ``find_duplicates``: (elements seen before, their characters)."""
    keys = np.zeros(table_capacity(n), np.uint64)
    dup = 0
    dup_chars = 0
    for i in range(n):
        k = keys_of_items[i]
        s = slot_of(keys, k)
        if keys[s] == k:
            dup += 1
            dup_chars += chars_of_items[i]
        else:
            keys[s] = k
    return dup, dup_chars
