"""Open-addressing hash tables over 64-bit keys, and those keys, for the repetition rules.

Duplicate lines, paragraphs and n-grams are found by hashing, never by building
strings. Keys are 64-bit (0 means an empty slot); at web-document sizes a collision is
about as likely as a cosmic-ray bit flip, and the tables stay linear in the input.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import mix64_nonzero
from stages.quality.jit import kernel, leaf

_B = np.uint64(0x100000001B3)
_POWERS = np.array([pow(int(_B), k, 1 << 64) for k in range(64)], np.uint64)  # B**k mod 2**64
_INVERSE_POWERS = np.array([pow(int(_B), -k, 1 << 64) for k in range(64)], np.uint64)  # B**-k
_B2, _B3, _B4 = (np.uint64(pow(int(_B), k, 1 << 64)) for k in (2, 3, 4))


@leaf
def poly_hash(h, buf, start, end):
    """``h`` extended by the bytes of buf[start:end]: h * B + byte + 1 per byte, four bytes a
    step (the same value, with a quarter of the dependent multiplications)."""
    i = start
    while i + 4 <= end:
        x = (np.uint64(buf[i]) + np.uint64(1)) * _B3 + (np.uint64(buf[i + 1]) + np.uint64(1)) * _B2
        x += (np.uint64(buf[i + 2]) + np.uint64(1)) * _B + (np.uint64(buf[i + 3]) + np.uint64(1))
        h = h * _B4 + x
        i += 4
    while i < end:
        h = h * _B + np.uint64(buf[i]) + np.uint64(1)
        i += 1
    return h


@leaf
def poly_power(n):
    """B ** n mod 2**64: what ``poly_hash`` multiplies a hash by when it extends it by n bytes."""
    if n < 64:
        return _POWERS[n]
    p = _POWERS[63]
    for _ in range(n - 63):
        p *= _B
    return p


@leaf
def inverse_power(n, p):
    """B ** -n, where p = B ** n (``poly_power``): a table below 64, else Newton's
    iteration for p**-1 mod 2**64 (p is odd), each step doubling the correct low bits
    (``p`` itself is right to 3)."""
    if n < 64:
        return _INVERSE_POWERS[n]
    x = p
    for _ in range(5):
        x = x * (np.uint64(2) - p * x)
    return x


@leaf
def bytes_key(buf, start, end):
    """Key of the string buf[start:end] (length-aware polynomial hash, finalised; never 0)."""
    return mix64_nonzero(poly_hash(np.uint64(end - start), buf, start, end))


@leaf
def table_capacity(n_items):
    cap = 16
    while cap < 2 * n_items:
        cap *= 2
    return cap


@leaf
def clear_pairs(table, n_items):
    """Empties the first table_capacity(n_items) slots of a table of (key, value) pairs
    (``table[2 * slot]``, ``table[2 * slot + 1]``); returns the slot mask."""
    cap = table_capacity(n_items)
    for s in range(cap):
        table[2 * s] = 0
    return cap - 1


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
