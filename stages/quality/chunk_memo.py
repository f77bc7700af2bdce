"""A memo of the word splitter's long way: the words of each chunk it split with spaCy's
affix rules, looked up by the chunk's bytes before splitting it again.

Why: a chunk (text between spaces) that is not plain letters goes through spaCy's
prefix/suffix/infix loop, URL match and special-case merging (``word_splitter._chunk``),
about half a microsecond each, and code and math repeat such chunks all the time
("self.assertEqual(", "x);", "$\\frac{1}{2}$"): in the e2e corpus 54% of code's chunks
and 37% of math's take the long way, and three in four of those were seen before in the
same file. A chunk's words depend on its bytes alone (every rule reads only inside it),
so a chunk seen before gets the words it got then, relative to where it starts now.

One memo (``pipeline/kernels/byte_memo.py``) serves a batch; each entry's values are its
words' start and end offsets in the chunk. Chunks longer than ``MAX_BYTES`` are not kept
(they rarely repeat).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.byte_memo import byte_memo, key_hash, lookup, reserve, values_of
from stages.quality.jit import leaf

SLOTS = 1 << 15
ENTRIES = SLOTS // 2
MAX_BYTES = 48


def chunk_memo() -> tuple[np.ndarray, ...]:
    """An empty memo for a batch (about 1 MB)."""
    return byte_memo(SLOTS, 16, 8, MAX_BYTES)


@leaf
def chunk_hash(buf, s, e):
    return key_hash(buf, s, e)


@leaf
def recall(slots, hashes, entries, pool, spans, buf, s, e, h, out_s, out_e, n):
    """Appends the remembered words of buf[s:e] (hash ``h``) at out_s/out_e[n:] and
    returns the new count, or -1 if the memo does not hold the chunk. The arguments
    are the memo's first five arrays: a tuple would cost its fields on every call."""
    x = lookup(slots, hashes, entries, pool, buf, s, e, h)
    if x < 0:
        return -1
    first, count = values_of(entries, x)
    for t in range(count // 2):
        out_s[n] = s + spans[first + 2 * t]
        out_e[n] = s + spans[first + 2 * t + 1]
        n += 1
    return n


@leaf
def remember(memo, buf, s, e, h, out_s, out_e, n0, n):
    """Keeps the words out_s/out_e[n0:n] of buf[s:e] (hash ``h``, not held yet) in ``memo``."""
    first = reserve(memo, buf, s, e, h, 2 * (n - n0))
    if first < 0:
        return
    spans = memo[4]
    for t in range(n - n0):
        spans[first + 2 * t] = out_s[n0 + t] - s
        spans[first + 2 * t + 1] = out_e[n0 + t] - s
