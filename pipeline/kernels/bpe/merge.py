"""Byte-pair encoding as tiktoken does it, over a batch of Arrow strings, each piece's tokens
remembered by its bytes.

A piece (``pretokenize``) that is itself a token is that token; otherwise its bytes are
merged pairwise, lowest rank first and the leftmost of equal ranks, exactly as
tiktoken's ``_byte_pair_merge``. Prose repeats its words, so most pieces were encoded
before in the same process: the memo (``byte_memo``) answers those with a hash and a
comparison instead of a merge.

The ranks live in a byte-string table built once per process (``rank_table``): the
tokens' bytes end to end, their offsets and ranks, and open-addressing slots over
their hashes.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.bpe.pretokenize import cl100k_piece, r50k_piece
from pipeline.kernels.byte_memo import key_hash, lookup, reserve, values_of
from pipeline.kernels.jit import njit

NO_RANK = np.int64(1) << 40
R50K, CL100K = 0, 1  # the split patterns ``encode_batch`` knows


@njit
def rank_table(blob, offsets, ranks):
    """Slots over the tokens blob[offsets[i]:offsets[i + 1]] of rank ranks[i]: (slots,
    hashes, offsets, blob, ranks, pairs, singles), ``slots`` holding token index + 1,
    ``pairs`` the rank of every two-byte token at 256 * first byte + second and ``singles``
    of every one-byte token (NO_RANK if none): the lookups a merge starts with."""
    size = 1
    while size < 2 * ranks.shape[0]:
        size *= 2
    slots = np.zeros(size, np.int64)
    hashes = np.empty(size, np.uint64)
    pairs = np.full(1 << 16, NO_RANK, np.int64)
    singles = np.full(256, NO_RANK, np.int64)
    for i in range(ranks.shape[0]):
        a = offsets[i]
        h = key_hash(blob, a, offsets[i + 1])
        k = np.int64(h & np.uint64(size - 1))
        while slots[k] != 0:
            k = (k + 1) & (size - 1)
        slots[k] = i + 1
        hashes[k] = h
        if offsets[i + 1] - a == 1:
            singles[blob[a]] = ranks[i]
        if offsets[i + 1] - a == 2:
            pairs[np.int64(blob[a]) << 8 | np.int64(blob[a + 1])] = ranks[i]
    return slots, hashes, offsets, blob, ranks, pairs, singles


@njit(_nrt=False)
def rank_of(table, buf, s, e):
    """The rank of the token with the bytes buf[s:e], or NO_RANK."""
    slots, hashes, offsets, blob, ranks, _, _ = table
    h = key_hash(buf, s, e)
    mask = slots.shape[0] - 1
    k = np.int64(h & np.uint64(mask))
    size = e - s
    while slots[k] != 0:
        if hashes[k] == h:
            i = slots[k] - 1
            a = offsets[i]
            if offsets[i + 1] - a == size:
                same = True
                for j in range(size):
                    if blob[a + j] != buf[s + j]:
                        same = False
                        break
                if same:
                    return np.int64(ranks[i])
        k = (k + 1) & mask
    return NO_RANK


@njit(_nrt=False)
def _merge(table, buf, s, e, starts, pair_ranks, tokens, out, n):
    """tiktoken's _byte_pair_merge on buf[s:e] (two bytes or more), its tokens appended at
    out[n:]; returns the new count. ``starts``, ``pair_ranks``, ``tokens``: scratch of
    e - s + 1 (each part's start, the rank of it and the next joined, its own rank)."""
    pairs = table[5]
    singles = table[6]
    size = e - s
    for i in range(size + 1):
        starts[i] = s + i
    for i in range(size - 1):
        pair_ranks[i] = pairs[np.int64(buf[s + i]) << 8 | np.int64(buf[s + i + 1])]
        tokens[i] = singles[buf[s + i]]
    tokens[size - 1] = singles[buf[e - 1]]
    pair_ranks[size - 1] = NO_RANK
    pair_ranks[size] = NO_RANK
    parts = size + 1
    while True:
        best = NO_RANK
        i = -1
        for j in range(parts - 1):
            if pair_ranks[j] < best:
                best = pair_ranks[j]
                i = j
        if i < 0:
            break
        tokens[i] = best  # parts i and i + 1 joined are the token of that rank
        # Ranks of the pairs that now start at parts i - 1 and i, before part i + 1 goes.
        if i > 0:
            pair_ranks[i - 1] = rank_of(table, buf, starts[i - 1], starts[i + 2]) if i + 2 < parts else NO_RANK
        pair_ranks[i] = rank_of(table, buf, starts[i], starts[i + 3]) if i + 3 < parts else NO_RANK
        for j in range(i + 1, parts - 1):
            starts[j] = starts[j + 1]
            pair_ranks[j] = pair_ranks[j + 1]
            tokens[j] = tokens[j + 1]
        parts -= 1
    for j in range(parts - 1):
        out[n] = tokens[j]
        n += 1
    return n


@njit
def encode_batch(table, classes, memo, pattern, data, offsets, max_row_bytes, out, lengths):
    """Tokens of each string data[offsets[d]:offsets[d + 1]] into ``out`` (one slot per
    byte is enough), their count per string into ``lengths``: -1 for a string holding a
    code point of unknown class or longer than ``max_row_bytes`` (nothing written for
    it). Returns the tokens written."""
    slots, hashes, entries, pool, values, _ = memo
    longest = 0  # of the rows encoded here: a piece is never longer than its row
    for d in range(offsets.shape[0] - 1):
        if offsets[d + 1] - offsets[d] <= max_row_bytes:
            longest = max(longest, offsets[d + 1] - offsets[d])
    starts = np.empty(longest + 1, np.int64)
    pair_ranks = np.empty(longest + 1, np.int64)
    tokens = np.empty(longest + 1, np.int64)
    w = 0
    for d in range(offsets.shape[0] - 1):
        end = offsets[d + 1]
        pos = offsets[d]
        n = w if end - pos <= max_row_bytes else -1
        while pos < end and n >= 0:
            stop = r50k_piece(classes, data, pos, end) if pattern == R50K else cl100k_piece(classes, data, pos, end)
            if stop < 0:
                n = -1
                break
            h = key_hash(data, pos, stop)
            x = lookup(slots, hashes, entries, pool, data, pos, stop, h)
            if x >= 0:
                first, count = values_of(entries, x)
                for t in range(count):
                    out[n + t] = values[first + t]
                n += count
            else:
                m = n + 1
                whole = rank_of(table, data, pos, stop)
                if whole != NO_RANK:
                    out[n] = whole
                else:
                    m = _merge(table, data, pos, stop, starts, pair_ranks, tokens, out, n)
                first = reserve(memo, data, pos, stop, h, m - n)
                for t in range(m - n if first >= 0 else 0):
                    values[first + t] = out[n + t]
                n = m
            pos = stop
        lengths[d] = n - w if n >= 0 else -1
        w = n if n >= 0 else w
    return w
