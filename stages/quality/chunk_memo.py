"""A memo of the word splitter's long way: the words of each chunk it split with spaCy's
affix rules, looked up by the chunk's bytes before splitting it again.

Why: a chunk (text between spaces) that is not plain letters goes through spaCy's
prefix/suffix/infix loop, URL match and special-case merging (``word_splitter._chunk``),
about half a microsecond each, and code and math repeat such chunks all the time
("self.assertEqual(", "x);", "$\\frac{1}{2}$"): in the e2e corpus 54% of code's chunks
and 37% of math's take the long way, and three in four of those were seen before in the
same file. A chunk's words depend on its bytes alone (every rule reads only inside it),
so a chunk seen before gets the words it got then, relative to where it starts now.

One memo serves a batch (``chunk_memo``): an open-addressing table of hashes to entries,
each holding the chunk's bytes (compared on a hit, so a hash collision costs a miss, never
a wrong split) and its words as offsets into it. Chunks longer than ``MAX_BYTES`` are not
kept (they rarely repeat). When an entry would not fit, the memo is emptied and starts
over: what it holds changes speed, never words.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.jit import njit
from pipeline.kernels.mixing import fnv1a, mix64
from stages.quality.jit import leaf

SLOTS = 1 << 15  # a power of two; at most half are used
ENTRIES = SLOTS // 2
MAX_BYTES = 48
BYTE_POOL = ENTRIES * 16
SPAN_POOL = ENTRIES * 8  # two offsets per word
# Fields of an entry (a row of ``entries``) and of ``fill``.
_AT, _LEN, _SPANS, _WORDS = 0, 1, 2, 3
_N_ENTRIES, _N_BYTES, _N_SPANS = 0, 1, 2


@njit
def chunk_memo():
    """An empty memo: (slots, hashes, entries, bytes, spans, fill)."""
    return (
        np.zeros(SLOTS, np.int32),  # entry index + 1 per slot, 0: empty
        np.empty(SLOTS, np.uint64),  # the hash of the chunk in each used slot
        np.empty((ENTRIES, 4), np.int32),  # per entry: at, length (in ``bytes``), first span, words
        np.empty(BYTE_POOL, np.uint8),
        np.empty(SPAN_POOL, np.int32),
        np.zeros(3, np.int64),  # entries, bytes and spans used
    )


@leaf
def chunk_hash(buf, s, e):
    return mix64(fnv1a(buf, s, e))


@leaf
def recall(slots, hashes, entries, pool, spans, buf, s, e, h, out_s, out_e, n):
    """Appends the remembered words of buf[s:e] (hash ``h``) at out_s/out_e[n:] and
    returns the new count, or -1 if the memo does not hold the chunk."""
    mask = slots.shape[0] - 1
    k = np.int64(h & np.uint64(mask))
    size = e - s
    while slots[k] != 0:
        if hashes[k] == h:
            x = slots[k] - 1
            at = entries[x, _AT]
            if entries[x, _LEN] == size and _same(pool, at, buf, s, size):
                first = entries[x, _SPANS]
                for t in range(entries[x, _WORDS]):
                    out_s[n] = s + spans[first + 2 * t]
                    out_e[n] = s + spans[first + 2 * t + 1]
                    n += 1
                return n
        k = (k + 1) & mask
    return -1


@leaf
def remember(memo, buf, s, e, h, out_s, out_e, n0, n):
    """Keeps the words out_s/out_e[n0:n] of buf[s:e] (hash ``h``, not held yet) in ``memo``."""
    slots, hashes, entries, pool, spans, fill = memo
    size = e - s
    words = n - n0
    if size > MAX_BYTES or 2 * words > SPAN_POOL:
        return
    if fill[_N_ENTRIES] == ENTRIES or fill[_N_BYTES] + size > BYTE_POOL or fill[_N_SPANS] + 2 * words > SPAN_POOL:
        for k in range(slots.shape[0]):
            slots[k] = 0
        fill[_N_ENTRIES] = 0
        fill[_N_BYTES] = 0
        fill[_N_SPANS] = 0
    x = fill[_N_ENTRIES]
    at = fill[_N_BYTES]
    first = fill[_N_SPANS]
    for i in range(size):
        pool[at + i] = buf[s + i]
    for t in range(words):
        spans[first + 2 * t] = out_s[n0 + t] - s
        spans[first + 2 * t + 1] = out_e[n0 + t] - s
    entries[x, _AT] = at
    entries[x, _LEN] = size
    entries[x, _SPANS] = first
    entries[x, _WORDS] = words
    fill[_N_ENTRIES] = x + 1
    fill[_N_BYTES] = at + size
    fill[_N_SPANS] = first + 2 * words
    mask = slots.shape[0] - 1
    k = np.int64(h & np.uint64(mask))
    while slots[k] != 0:
        k = (k + 1) & mask
    slots[k] = x + 1
    hashes[k] = h


@leaf
def _same(pool, at, buf, s, size):
    for i in range(size):
        if pool[at + i] != buf[s + i]:
            return False
    return True
