"""Gopher's word n-gram rules: the share of characters in the most frequent n-gram per
``top`` size, and in duplicated n-grams per ``dup`` size (datatrove's
``find_top_duplicate`` and greedy ``find_all_duplicate``), in time that follows the
n-grams that repeat rather than sizes x words.

Two things make it fast without changing a value:

- Each n-gram's key is read off prefix hashes in O(1). Polynomial hashes of a
  concatenation compose, and the bases are odd, hence invertible mod 2**64, so
  ``prefix[i + n] - prefix[i] * base**len`` is the very value a fold over the n words
  gives (the keys are those the per-n-gram fold produced before).
- For the top n-grams (counted as word sequences), an n-gram that occurs once can
  only be the most frequent if all are unique (then the first one is), and the n-gram
  one word longer at the same place occurs once too. So the sizes are counted in
  ascending order, each at the places whose shorter n-gram repeats; in prose most
  3-grams are unique. The duplicate walk compares words joined without a separator
  ("a" "bc" equals "ab" "c"), where that argument fails, so it visits every place.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64_nonzero
from stages.quality.jit import kernel, leaf
from stages.quality.open_addressing import slot_of, table_capacity
from stages.quality.signals import NGRAM_BASE


@leaf
def _inverse(a):
    """a**-1 mod 2**64 for odd ``a``: Newton's iteration, each step doubling the correct
    low bits (``a`` itself is right to 3)."""
    x = a
    for _ in range(5):
        x = x * (np.uint64(2) - a * x)
    return x


@kernel
def ngram_repetition(ntok, chars, poly, powlen, text_chars, top_ns, dup_ns, sig):
    """The n-gram signals of a document whose ``ntok`` words have the characters, byte
    hashes and powers ``words.word_stats`` gives, into sig[NGRAM_BASE:] in the order of
    ``top_ns`` then ``dup_ns``. ``text_chars`` > 0."""
    cum = np.empty(ntok + 1, np.int64)  # characters before word t
    by_word = np.empty(ntok + 1, np.uint64)  # prefix hash over word keys (top n-grams)
    by_byte = np.empty(ntok + 1, np.uint64)  # prefix hash over the words' bytes (dup n-grams)
    power = np.empty(ntok + 1, np.uint64)  # the byte hash's base ** bytes before word t
    inverse = np.empty(ntok + 1, np.uint64)  # and its inverse
    cum[0] = 0
    by_word[0] = 0
    by_byte[0] = 0
    power[0] = 1
    inverse[0] = 1
    for t in range(ntok):
        cum[t + 1] = cum[t] + chars[t]
        by_word[t + 1] = by_word[t] * GOLDEN_GAMMA + mix64_nonzero(poly[t] ^ np.uint64(chars[t]))
        by_byte[t + 1] = by_byte[t] * powlen[t] + poly[t]
        power[t + 1] = power[t] * powlen[t]
        inverse[t + 1] = inverse[t] * _inverse(powlen[t])
    n_top = top_ns.shape[0]
    live = np.empty(ntok, np.int64)  # places whose n-gram may repeat, ascending
    for i in range(ntok):
        live[i] = i
    n_live = ntok
    slot_at = np.empty(ntok, np.int64)
    keys = np.empty(table_capacity(ntok), np.uint64)
    counts = np.empty(keys.shape[0], np.int64)
    first = np.empty(keys.shape[0], np.int64)
    n = 0
    for _ in range(n_top):
        n = _next_size(top_ns, n)
        if n == 0:
            break
        places = ntok - n + 1
        while n_live > 0 and live[n_live - 1] >= places:
            n_live -= 1
        # Count the n-grams at the live places (Counter.most_common(1): the highest
        # count, the first seen among equals; all unique: the first n-gram).
        table = keys[: table_capacity(n_live)]
        table[:] = 0
        step = np.uint64(1)
        for _ in range(n):
            step *= GOLDEN_GAMMA
        best_count = 1
        best_first = 0
        for p in range(n_live):
            i = live[p]
            h = mix64_nonzero(by_word[i + n] - by_word[i] * step)
            s = slot_of(table, h)
            if table[s] != h:
                table[s] = h
                counts[s] = 0
                first[s] = i
            counts[s] += 1
            slot_at[p] = s
            c = counts[s]
            if c > best_count or (c == best_count and first[s] < best_first):
                best_count = c
                best_first = first[s]
        kept = 0
        for p in range(n_live):
            if counts[slot_at[p]] > 1:
                live[kept] = live[p]
                kept += 1
        n_live = kept
        top_share = 0.0
        if places > 0:
            top_chars = cum[best_first + n] - cum[best_first] + (n - 1)
            top_share = top_chars * best_count / text_chars
        for q in range(n_top):
            if top_ns[q] == n:
                sig[NGRAM_BASE + q] = top_share
    for q in range(dup_ns.shape[0]):
        repeated = _greedy_duplicates(ntok, dup_ns[q], cum, by_byte, power, inverse, keys)
        sig[NGRAM_BASE + n_top + q] = repeated / text_chars


@leaf
def _next_size(sizes, after):
    """The smallest size larger than ``after``, or 0 (a handful of sizes: no sort to compile)."""
    best = 0
    for k in range(sizes.shape[0]):
        if sizes[k] > after and (best == 0 or sizes[k] < best):
            best = sizes[k]
    return best


@leaf
def _greedy_duplicates(ntok, n, cum, by_byte, power, inverse, keys):
    """datatrove's find_all_duplicate on "".join of n words: characters of the n-grams
    seen before, skipping past each."""
    table = keys[: table_capacity(max(ntok - n + 1, 0))]
    table[:] = 0
    repeated = 0
    i = 0
    while i < ntok - n + 1:
        size = cum[i + n] - cum[i]
        h = by_byte[i + n] - by_byte[i] * power[i + n] * inverse[i]
        h = mix64_nonzero(h ^ np.uint64(size))
        s = slot_of(table, h)
        if table[s] == h:
            repeated += size
            i += n
        else:
            table[s] = h
            i += 1
    return repeated
