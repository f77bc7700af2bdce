"""Words, rolling n-gram hashes and index look-ups over Arrow string buffers, in numba.

Normalisation (GPT-3's): lower-case, punctuation *deleted* (it never splits a word),
whitespace splits. So ``"1,000"``, ``"1000"`` and ``"$1000."`` are the word ``1000``,
``"don't"`` is ``dont``, and ``"48/2"`` is ``482``. A no-break, thin or narrow no-break
space between two digits (``1 000``, French and SI style) groups digits and is
deleted too. Which code points fold to which, and which are whitespace or punctuation,
is ``pipeline/text/casefold.py``, the fold ``dedup`` uses too.

A word's hash is FNV-1a over its folded code points, then SplitMix64's finaliser. An
n-gram's key is a polynomial over its words' hashes (rolled: one multiply-add per word
whatever ``n``), then the finaliser again, so keys are uniform 64-bit values: the
sorted index is cut into ``2**b`` buckets by the top ``b`` bits, and a look-up is a
binary search (``np.searchsorted``) within one bucket of about one entry.

``words`` is the same normalisation in plain Python (the tests and the benchmark's
reference implementation compare against it).
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import FNV_OFFSET, FNV_PRIME, GOLDEN_GAMMA, mix64
from pipeline.kernels.utf8 import decode_lenient
from pipeline.text.casefold import PUNCT, SPACE, fold, fold_py

POLY = GOLDEN_GAMMA  # odd: the multiplier of the n-gram polynomial
# Between two digits these spaces group digits ("1 000") and are deleted.
DIGIT_GROUP_SPACES = (0xA0, 0x2009, 0x202F)


@njit(_nrt=False, inline="always")
def _is_digit_group_space(cp):
    return cp == 0xA0 or cp == 0x2009 or cp == 0x202F


@njit(inline="always")
def next_word(data, i, end):
    """The word at or after byte ``i``: (found, hash, first byte, end byte, where to go on)."""
    h = FNV_OFFSET
    start = -1
    stop = -1
    last_digit = False
    while i < end:
        cp, size = decode_lenient(data, i, end)
        f = fold(cp)
        if f == SPACE and start >= 0 and last_digit and _is_digit_group_space(cp) and i + size < end:
            after = data[i + size]
            if 48 <= after <= 57:
                f = PUNCT
        if f >= 0:
            if start < 0:
                start = i
            h = (h ^ np.uint64(f)) * FNV_PRIME
            stop = i + size
            last_digit = 48 <= f <= 57
        elif f == SPACE and start >= 0:
            return True, mix64(h), start, stop, i + size
        i += size
    return start >= 0, mix64(h), start, stop, end


@njit
def ngram_keys(data, offsets, n):
    """Every n-gram key of every row, and the row it came from (rows of fewer than ``n``
    words give none)."""
    rows = len(offsets) - 1
    counts = np.zeros(rows, np.int64)
    for r in range(rows):
        i, end = offsets[r], offsets[r + 1]
        words = 0
        while True:
            found, _, _, _, i = next_word(data, i, end)
            if not found:
                break
            words += 1
        counts[r] = max(0, words - n + 1)
    keys = np.empty(counts.sum(), np.uint64)
    owner = np.empty(counts.sum(), np.int64)
    ring = np.zeros(n, np.uint64)
    top = _top_power(n)
    k = 0
    for r in range(rows):
        i, end = offsets[r], offsets[r + 1]
        h = np.uint64(0)
        words = 0
        while True:
            found, w, _, _, i = next_word(data, i, end)
            if not found:
                break
            h = _roll(h, ring, words, n, top, w)
            words += 1
            if words >= n:
                keys[k] = mix64(h)
                owner[k] = r
                k += 1
    return keys, owner


@njit(inline="always")
def _roll(h, ring, words, n, top, w):
    """The hash of the window after word ``w`` (the ``words``-th) enters and the oldest leaves."""
    slot = words % n
    if words >= n:
        h -= ring[slot] * top
    ring[slot] = w
    return h * POLY + w


@njit
def _top_power(n):
    """POLY ** (n - 1) modulo 2**64: the weight of the oldest word of a window."""
    p = np.uint64(1)
    for _ in range(n - 1):
        p *= POLY
    return p


@njit(inline="always")
def _find(key, table, buckets, shift):
    """Position of ``key`` in the sorted ``table``, or -1."""
    b = np.int64(key >> shift)
    lo, hi = buckets[b], buckets[b + 1]
    if lo == hi:
        return -1
    p = lo + np.searchsorted(table[lo:hi], key)
    if p < hi and table[p] == key:
        return p
    return -1


@njit
def _scan(data, start, end, n, top, table, buckets, shift, ring, ring_start, hits):
    """Matched windows of one document; the first ``len(hits)`` as (index position,
    first byte, end byte). Returns how many windows matched."""
    h = np.uint64(0)
    words = 0
    count = 0
    i = start
    while True:
        found, w, first, stop, i = next_word(data, i, end)
        if not found:
            break
        h = _roll(h, ring, words, n, top, w)
        ring_start[words % n] = first
        words += 1
        if words >= n:
            p = _find(mix64(h), table, buckets, shift)
            if p >= 0:
                if count < len(hits):
                    hits[count, 0] = p
                    hits[count, 1] = ring_start[words % n]
                    hits[count, 2] = stop
                count += 1
    return count


@njit
def scan_batch(data, offsets, n, table, buckets, shift):
    """Per row: how many windows matched, and the first one (position, first byte, end
    byte; -1 where none)."""
    rows = len(offsets) - 1
    counts = np.zeros(rows, np.int64)
    first = np.full((rows, 3), -1, np.int64)
    ring = np.zeros(n, np.uint64)
    ring_start = np.zeros(n, np.int64)
    hits = np.empty((1, 3), np.int64)
    top = _top_power(n)
    for r in range(rows):
        c = _scan(data, offsets[r], offsets[r + 1], n, top, table, buckets, shift, ring, ring_start, hits)
        counts[r] = c
        if c > 0:
            first[r] = hits[0]
    return counts, first


@njit
def match_spans(data, start, end, n, table, buckets, shift):
    """Every matched window of ``data[start:end]``: (index position, first byte, end byte)."""
    hits = np.empty(((end - start) // 2 + 1, 3), np.int64)  # a word and its space take 2 bytes
    ring = np.zeros(n, np.uint64)
    ring_start = np.zeros(n, np.int64)
    count = _scan(data, start, end, n, _top_power(n), table, buckets, shift, ring, ring_start, hits)
    return hits[: min(count, len(hits))]


def bucket_table(table: np.ndarray) -> tuple[np.ndarray, np.uint64]:
    """Start of each bucket of the sorted ``table`` (by the top bits), and the shift."""
    bits = int(min(24, max(1, int(np.ceil(np.log2(len(table) + 1))))))
    shift = np.uint64(64 - bits)
    starts = np.searchsorted(table, np.arange(1 << bits, dtype=np.uint64) << shift)
    return np.append(starts, len(table)).astype(np.int64), shift


def words(text: str) -> list[str]:
    """The normalised words of ``text``, in plain Python (what the kernels hash)."""
    out: list[str] = []
    word: list[str] = []
    last_digit = False
    for i, ch in enumerate(text):
        f = fold_py(ord(ch))
        if f == SPACE and word and last_digit and ord(ch) in DIGIT_GROUP_SPACES and text[i + 1 : i + 2].isascii():
            if text[i + 1 : i + 2].isdigit():
                f = PUNCT
        if f >= 0:
            word.append(chr(f))
            last_digit = 48 <= f <= 57
        elif f == SPACE and word:
            out.append("".join(word))
            word = []
    if word:
        out.append("".join(word))
    return out
