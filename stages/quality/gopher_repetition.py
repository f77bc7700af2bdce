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

from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64_nonzero
from pipeline.kernels.utf8 import n_chars
from stages.quality.jit import kernel
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
    _duplicate_shares(keys, lens, n, text_chars, sig, i_frac, i_chars)


@kernel
def _duplicate_shares(keys, lens, n, text_chars, sig, i_frac, i_chars):
    """Of n pieces with these keys and characters, the share of duplicates into
    sig[i_frac], of their characters in ``text_chars`` into sig[i_chars]."""
    dup, dup_chars = count_duplicates(keys, lens, n)
    sig[i_frac] = dup / n
    sig[i_chars] = dup_chars / text_chars if text_chars > 0 else np.nan


@kernel
def lines_and_paragraphs(flags, buf, text_chars, sig):
    """Duplicated lines (``re.split("\\n+", text)``) and paragraphs
    (``re.split("\\n{2,}", text.strip())``) in one pass over the lines. A paragraph is
    the lines between two runs of newlines, joined by single newlines, so it is keyed by
    a fold of its lines' keys: each byte is hashed and counted once, for both. Only the
    first and last line of the stripped text are keyed again, stripped. ``buf`` is not
    empty."""
    end = buf.shape[0]
    a = lstrip(flags, buf, 0, end)
    b = rstrip(flags, buf, a, end)
    line_keys = np.empty(end + 1, np.uint64)
    line_lens = np.empty(end + 1, np.int64)
    para_keys = np.empty(end // 2 + 1, np.uint64)
    para_lens = np.empty(end // 2 + 1, np.int64)
    n = 0
    n_para = 0
    fold = np.uint64(0)  # the open paragraph's lines so far
    para_chars = -1  # and its characters, -1 before its first line
    start = 0
    i = 0
    while i <= end:
        if i < end and buf[i] != 10:
            i += 1
            continue
        j = i
        while j < end and buf[j] == 10:
            j += 1
        key = bytes_key(buf, start, i)
        chars = n_chars(buf, start, i)
        line_keys[n] = key
        line_lens[n] = chars
        n += 1
        s = max(start, a)
        e = min(i, b)
        if s < e:
            if s != start or e != i:
                key = bytes_key(buf, s, e)
                chars = n_chars(buf, s, e)
            fold = fold * GOLDEN_GAMMA + key
            para_chars += chars + 1
            if j - i >= 2 or e == b:
                para_keys[n_para] = mix64_nonzero(fold)
                para_lens[n_para] = para_chars
                n_para += 1
                fold = np.uint64(0)
                para_chars = -1
        start = j
        i = j if j > i else i + 1
    _duplicate_shares(line_keys, line_lens, n, text_chars, sig, GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
    if n_para == 0:  # all whitespace: one empty paragraph
        para_keys[0] = bytes_key(buf, a, a)
        para_lens[0] = 0
        n_para = 1
    _duplicate_shares(para_keys, para_lens, n_para, text_chars, sig, GR_DUP_PARA_FRAC, GR_DUP_PARA_CHAR_FRAC)
