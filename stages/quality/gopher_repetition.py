"""Gopher repetition signals: datatrove's GopherRepetitionFilter on lines, paragraphs and
word n-grams.

Duplicated paragraphs and lines (their share of pieces and of characters), the share of
characters in the most frequent n-gram per ``top`` size, and in duplicated n-grams per
``dup`` size; n-gram signals go into the matrix from ``NGRAM_BASE`` on, in the order of
the options (``ngrams.py``). Pieces and n-grams are compared by 64-bit hashes
(``open_addressing.py``).
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.utf8 import n_chars
from stages.quality.jit import kernel
from stages.quality.ngrams import ngram_repetition
from stages.quality.open_addressing import bytes_key, count_duplicates
from stages.quality.signals import (
    GR_DUP_LINE_CHAR_FRAC,
    GR_DUP_LINE_FRAC,
    GR_DUP_PARA_CHAR_FRAC,
    GR_DUP_PARA_FRAC,
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
def gopher_repetition(T, buf, ntok, tok_s, tok_e, chars, poly, powlen, text_chars, top_ns, dup_ns, sig):
    """The Gopher repetition signals of one document whose ``ntok`` words
    buf[tok_s[t]:tok_e[t]] have the characters, hashes and powers ``words.word_stats`` gives."""
    flags = T.flags
    end = buf.shape[0]
    if end == 0:
        return
    a = lstrip(flags, buf, 0, end)
    b = rstrip(flags, buf, a, end)
    split_duplicates(buf, a, b, 2, text_chars, sig, GR_DUP_PARA_FRAC, GR_DUP_PARA_CHAR_FRAC)
    split_duplicates(buf, 0, end, 1, text_chars, sig, GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
    ngram_repetition(buf, ntok, tok_s, tok_e, chars, poly, powlen, text_chars, top_ns, dup_ns, sig)
