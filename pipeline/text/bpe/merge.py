"""Byte-pair encoding as tiktoken does it, over a batch of Arrow strings, each piece's tokens
remembered by its bytes.

A piece (``pretokenize``) that is itself a token is that token; otherwise its bytes are
merged pairwise, lowest rank first and the leftmost of equal ranks, exactly as
tiktoken's ``_byte_pair_merge``. Prose repeats its words, so most pieces were encoded
before in the same process: the memo (``byte_memo``) answers those with a hash and a
comparison instead of a merge.

The ranks live in a byte memo too, built once per process (``rank_table``).
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.byte_memo import byte_memo, key_hash, lookup, reserve, values_of
from pipeline.text.bpe.pretokenize import piece_end

NO_RANK = np.int64(1) << 40
# A piece longer than this sends its row to tiktoken: merging here takes time quadratic in
# a piece's length (a 60 KB run of one letter took 6 s), where tiktoken switches to a
# heap for long pieces. Real pieces are words and runs of punctuation or spaces.
MAX_PIECE_BYTES = 256


def rank_table(blob: np.ndarray, offsets: np.ndarray, ranks: np.ndarray) -> tuple:
    """(memo, pairs, singles) for the tokens blob[offsets[i]:offsets[i + 1]] of rank
    ranks[i]: a ``byte_memo`` holding every token with its rank as its one value (large
    enough never to empty), and the rank of every two-byte token at 256 * first byte +
    second and of every one-byte token (NO_RANK if none), the lookups a merge starts with."""
    lengths = np.diff(offsets)
    slots = 1 << int(2 * len(ranks)).bit_length()
    entries = slots // 2
    memo = byte_memo(slots, int(offsets[-1]) // entries + 1, 1, int(lengths.max(initial=1)))
    fill_ranks(memo, blob, offsets, ranks)
    starts = offsets[:-1]
    pairs = np.full(1 << 16, NO_RANK, np.int64)
    two = lengths == 2
    pairs[blob[starts[two]].astype(np.int64) << 8 | blob[starts[two] + 1]] = ranks[two]
    singles = np.full(256, NO_RANK, np.int64)
    one = lengths == 1
    singles[blob[starts[one]]] = ranks[one]
    return memo, pairs, singles


@njit
def fill_ranks(memo, blob, offsets, ranks):
    """Puts every token of ``rank_table`` in its memo."""
    values = memo[4]
    for i in range(ranks.shape[0]):
        a, b = offsets[i], offsets[i + 1]
        values[reserve(memo, blob, a, b, key_hash(blob, a, b), 1)] = ranks[i]


@njit(_nrt=False)
def rank_of(table, buf, s, e):
    """The rank of the token with the bytes buf[s:e], or NO_RANK."""
    slots, hashes, entries, pool, values, _ = table[0]
    x = lookup(slots, hashes, entries, pool, buf, s, e, key_hash(buf, s, e))
    return NO_RANK if x < 0 else np.int64(values[values_of(entries, x)[0]])


@njit(_nrt=False)
def _merge(table, buf, s, e, starts, pair_ranks, tokens, out, n):
    """tiktoken's _byte_pair_merge on buf[s:e] (two bytes or more), its tokens appended at
    out[n:]; returns the new count. ``starts``, ``pair_ranks``, ``tokens``: scratch of
    e - s + 1 (each part's start, the rank of it and the next joined, its own rank)."""
    _, pairs, singles = table
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


@njit(nogil=True)  # threads each with their own memo encode at once (benchmarks/tokenizer_peers.py)
def encode_batch(table, classes, memo, pattern, data, offsets, max_row_bytes, out, lengths):
    """Tokens of each string data[offsets[d]:offsets[d + 1]] into ``out`` (one slot per
    byte is enough), their count per string into ``lengths``: -1 for a string holding a
    code point of unknown class or a piece over MAX_PIECE_BYTES, or longer than
    ``max_row_bytes`` (nothing written for it). Returns the tokens written. ``pattern``
    numbers the scanner (``pretokenize.piece_end``), ``classes`` is the class view it reads."""
    slots, hashes, entries, pool, values, _ = memo
    starts = np.empty(MAX_PIECE_BYTES + 1, np.int64)
    pair_ranks = np.empty(MAX_PIECE_BYTES + 1, np.int64)
    tokens = np.empty(MAX_PIECE_BYTES + 1, np.int64)
    w = 0
    for d in range(offsets.shape[0] - 1):
        end = offsets[d + 1]
        pos = offsets[d]
        n = w if end - pos <= max_row_bytes else -1
        while pos < end and n >= 0:
            stop = piece_end(pattern, classes, data, pos, end)
            if stop < 0 or stop - pos > MAX_PIECE_BYTES:
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
