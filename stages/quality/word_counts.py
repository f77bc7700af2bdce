"""How often each word of a page occurs, and the bound on the top n-gram signals it gives.

Why: most code and math pages the web rules drop are dropped by a rule after the top
n-gram ones (the duplicate 5-grams, the share of words with a letter: 0.7 of code's bytes
and 0.9 of math's in the e2e corpus), and counting the top n-grams was the largest part
of judging them. A dropped page's signals are written nowhere, only the value of the rule
that drops it. So the kernel judges the top n-gram rules last (``kernels.web_batch``),
and for a page the other rules drop, counts its top n-grams only where this bound does
not prove that no top n-gram rule fires: every reason, and every signal of a kept page,
is the same.

The bound: each of the n words of an n-gram occurring c times occurs at least c times
(each occurrence holds it at a place of its own). So with L the most characters of a
word occurring at least c times, the n-gram's characters times its count, the top share's
numerator, is at most c * (n * (L + 1) - 1); for c = 1 (all n-grams unique) it is that of
the first n-gram. Words are counted by the key the top count hashes them by, in buckets
of counts (one per count below 64, then eight per power of two) that keep the longest
word of each; the bound is taken over the buckets c may fall in, c at most the largest
count in the bucket's range and the largest count there is.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import GOLDEN_GAMMA
from stages.quality.jit import leaf
from stages.quality.open_addressing import clear_pairs
from stages.quality.rules import GREATER
from stages.quality.signals import NGRAM_BASE

_EXACT = 64  # counts below this have a bucket each
_STEPS = 8  # and above it eight buckets per power of two
BUCKETS = _EXACT + 26 * _STEPS  # counts below 2**32
_MOST_WORDS = 1 << 15  # distinct words counted at most
_LOW = np.uint64(0xFFFFFFFF)  # a word's entry: count << 32 | characters
_ONE = np.uint64(1 << 32)


@leaf
def _count_words(table, ntok, cum, by_word):
    """Counts the ``ntok`` words in ``table``, pairs of (key, count << 32 | characters):
    a word's key is the one the top count hashes it by, read off the prefix sums. Returns
    the slot mask, or -1 where there are more than ``_MOST_WORDS`` distinct words (few
    pages have that many; a table for them all would not stay in the cache)."""
    most = min(ntok, _MOST_WORDS)
    mask = clear_pairs(table, most)
    distinct = 0
    for t in range(ntok):
        key = by_word[t + 1] - by_word[t] * GOLDEN_GAMMA
        chars = np.uint64(cum[t + 1] - cum[t])
        s = np.int64(key & np.uint64(mask))
        while table[2 * s] != 0 and table[2 * s] != key:
            s = (s + 1) & mask
        if table[2 * s] != key:
            if distinct == most:
                return -1
            distinct += 1
            table[2 * s] = key
            table[2 * s + 1] = chars
        v = table[2 * s + 1]
        if chars > v & _LOW:  # a collision of two keys: keep the longer word
            v = (v & ~_LOW) | chars
        table[2 * s + 1] = v + _ONE
    return mask


@leaf
def _bucket(c):
    """The bucket of count c >= 1, ascending with c."""
    if c < _EXACT:
        return c
    k = 6
    while (c >> (k + 1)) > 0:
        k += 1
    return _EXACT + _STEPS * (k - 6) + (((c - (1 << k)) * _STEPS) >> k)


@leaf
def _bucket_top(b):
    """A count at least as large as any in bucket b."""
    if b < _EXACT:
        return b
    k = 6 + (b - _EXACT) // _STEPS
    j = (b - _EXACT) % _STEPS
    return (1 << k) + (((j + 1) << k) + _STEPS - 1) // _STEPS


@leaf
def top_may_fire(scratch, ntok, text_chars, top_ns, rules, words):
    """Whether a top n-gram rule of ``rules`` may fire on a page of ``ntok`` words, False
    where the bound proves none does. ``scratch``: ``ngrams.ngram_scratch``, its prefix
    sums filled (``words.word_stats``); its table is left holding the word counts."""
    cum, _, by_word, _, _, _, table, _, _, _, _, _, longest = scratch
    columns, ops, thresholds, words_only = rules
    mask = _count_words(table, ntok, cum, by_word)
    if mask < 0:
        return True
    for b in range(BUCKETS):
        longest[b] = -1
    top = 0  # the largest count
    for s in range(mask + 1):
        if table[2 * s] != 0:
            v = table[2 * s + 1]
            c = np.int64(v >> np.uint64(32))
            b = _bucket(c)
            longest[b] = max(longest[b], np.int64(v & _LOW))
            top = max(top, c)
    last = _bucket(top)
    for b in range(last - 1, -1, -1):  # longest[b]: of the words in bucket b or above
        longest[b] = max(longest[b], longest[b + 1])
    for k in range(columns.shape[0]):
        q = columns[k] - NGRAM_BASE
        if q < 0 or q >= top_ns.shape[0] or (words_only[k] and not words):
            continue
        if ops[k] != GREATER:
            return True
        n = top_ns[q]
        # Count 1 is the case of n-grams all unique, where the top one is the first.
        bound = cum[n] + n - 1 if ntok >= n else 0
        for b in range(2, last + 1):
            if longest[b] >= 0:
                bound = max(bound, min(_bucket_top(b), top) * (n * (longest[b] + 1) - 1))
        if bound / text_chars > thresholds[k]:
            return True
    return False
