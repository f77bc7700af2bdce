"""Gopher repetition signals: datatrove's GopherRepetitionFilter on lines, paragraphs and
word n-grams.

Duplicated paragraphs and lines (their share of pieces and of characters), the share of
characters in the most frequent n-gram per ``top`` size, and in duplicated n-grams per
``dup`` size; n-gram signals go into the matrix from ``NGRAM_BASE`` on, in the order of
the options. Pieces and n-grams are compared by 64-bit hashes (``open_addressing.py``).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64_nonzero
from pipeline.kernels.utf8 import n_chars
from stages.quality.jit import kernel
from stages.quality.open_addressing import bytes_key, count_duplicates, slot_of, table_capacity
from stages.quality.signals import (
    GR_DUP_LINE_CHAR_FRAC,
    GR_DUP_LINE_FRAC,
    GR_DUP_PARA_CHAR_FRAC,
    GR_DUP_PARA_FRAC,
    NGRAM_BASE,
)
from stages.quality.str_methods import lstrip, rstrip


@kernel
def split_duplicates(buf, a, b, min_run, text_chars, sig, i_frac, i_chars):
    """Duplicates among the pieces of buf[a:b] split at runs of >= min_run newlines: their
    share of the pieces into sig[i_frac], of ``text_chars`` characters into sig[i_chars]."""
    n_max = (b - a) // max(min_run, 1) + 1
    keys = np.empty(n_max, np.uint64)
    lens = np.empty(n_max, np.int64)
    n = 0
    start = a
    i = a
    while i < b:
        if buf[i] == 10:
            j = i
            while j < b and buf[j] == 10:
                j += 1
            if j - i >= min_run:
                keys[n] = bytes_key(buf, start, i)
                lens[n] = n_chars(buf, start, i)
                n += 1
                start = j
            i = j
        else:
            i += 1
    keys[n] = bytes_key(buf, start, b)
    lens[n] = n_chars(buf, start, b)
    n += 1
    dup, dup_chars = count_duplicates(keys, lens, n)
    sig[i_frac] = dup / n
    sig[i_chars] = dup_chars / text_chars if text_chars > 0 else np.nan


@kernel
def gopher_repetition(T, buf, ntok, chars, poly, powlen, text_chars, top_ns, dup_ns, sig):
    """The Gopher repetition signals of one document whose ``ntok`` words have the
    characters, hashes and powers ``words.word_stats`` gives."""
    flags = T.flags
    end = buf.shape[0]
    if end == 0:
        return
    a = lstrip(flags, buf, 0, end)
    b = rstrip(flags, buf, a, end)
    split_duplicates(buf, a, b, 2, text_chars, sig, GR_DUP_PARA_FRAC, GR_DUP_PARA_CHAR_FRAC)
    split_duplicates(buf, 0, end, 1, text_chars, sig, GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
    cum = np.zeros(ntok + 1, np.int64)
    for t in range(ntok):
        cum[t + 1] = cum[t] + chars[t]
    wkey = np.empty(ntok, np.uint64)
    for t in range(ntok):
        wkey[t] = mix64_nonzero(poly[t] ^ np.uint64(chars[t]))
    keys = np.zeros(table_capacity(ntok), np.uint64)
    counts = np.zeros(keys.shape[0], np.int64)
    first = np.zeros(keys.shape[0], np.int64)
    col = NGRAM_BASE
    for q in range(top_ns.shape[0]):
        n = top_ns[q]
        if ntok - n + 1 > 0:
            # Counter.most_common(1): highest count, the first seen among equals.
            keys[:] = 0
            best_count = 0
            best_first = 0
            for i in range(ntok - n + 1):
                h = np.uint64(0)
                for j in range(n):
                    h = h * GOLDEN_GAMMA + wkey[i + j]
                h = mix64_nonzero(h)
                s = slot_of(keys, h)
                if keys[s] != h:
                    keys[s] = h
                    counts[s] = 0
                    first[s] = i
                counts[s] += 1
                c = counts[s]
                if c > best_count or (c == best_count and first[s] < best_first):
                    best_count = c
                    best_first = first[s]
            top_chars = cum[best_first + n] - cum[best_first] + (n - 1)
            sig[col] = top_chars * best_count / text_chars
        else:
            sig[col] = 0.0
        col += 1
    for q in range(dup_ns.shape[0]):
        n = dup_ns[q]
        # datatrove's find_all_duplicate: greedy, on "".join of n words.
        keys[:] = 0
        repeated = 0
        idx = 0
        while idx < ntok - n + 1:
            h = np.uint64(0)
            for j in range(n):
                h = h * powlen[idx + j] + poly[idx + j]
            h = mix64_nonzero(h ^ np.uint64(cum[idx + n] - cum[idx]))
            s = slot_of(keys, h)
            if keys[s] == h:
                repeated += cum[idx + n] - cum[idx]
                idx += n
            else:
                keys[s] = h
                idx += 1
        sig[col] = repeated / text_chars
        col += 1
