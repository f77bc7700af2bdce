"""Gopher quality signals: datatrove's GopherQualityFilter on a document's words and lines.

Word count and mean length over the words that are not only symbols, "#" and ellipses
per word, bullet and ellipsis lines, alphabetic words and distinct stop words; the
thresholds are applied in ``rules.py``.
"""

from __future__ import annotations

import numpy as np

from stages.quality.jit import leaf
from stages.quality.signals import (
    GQ_ALPHA_WORDS,
    GQ_BULLET_LINES,
    GQ_ELLIPSIS_LINES,
    GQ_ELLIPSIS_RATIO,
    GQ_HASH_RATIO,
    GQ_MEAN_WORD_LEN,
    GQ_STOP_WORDS,
    GQ_WORDS,
)
from stages.quality.str_methods import DOTS, endswith, lstrip, next_line, rstrip, startswith

_BULLET = np.array([0xE2, 0x80, 0xA2], np.uint8)  # •
_DASH = np.array([45], np.uint8)
_HELLIP = np.array([0xE2, 0x80, 0xA6], np.uint8)  # …


@leaf
def symbol_counts(buf, end):
    """``text.count("#")`` and ``text.count("...") + text.count("…")`` in one scan (the
    three share no byte, so counting them together leaves each count as it was)."""
    hashes = 0
    ellipses = 0
    i = 0
    while i < end:
        b = buf[i]
        if b == 35:
            hashes += 1
        elif b == 46 and i + 2 < end and buf[i + 1] == 46 and buf[i + 2] == 46:
            ellipses += 1
            i += 2
        elif b == 0xE2 and i + 2 < end and buf[i + 1] == 0x80 and buf[i + 2] == 0xA6:
            ellipses += 1
            i += 2
        i += 1
    return hashes, ellipses


@leaf
def stop_word_count(buf, ntok, tok_s, tok_e, stop_blob, stop_off):
    """How many distinct stop words occur as words (reading words until all have)."""
    n_stop = stop_off.shape[0] - 1  # at most 64 (checked by the options)
    seen = np.uint64(0)
    count = 0
    for t in range(ntok):
        if count == n_stop:
            break
        ln = tok_e[t] - tok_s[t]
        for k in range(n_stop):
            bit = np.uint64(1) << np.uint64(k)
            if (seen & bit) or stop_off[k + 1] - stop_off[k] != ln:
                continue
            same = True
            for j in range(ln):
                if buf[tok_s[t] + j] != stop_blob[stop_off[k] + j]:
                    same = False
                    break
            if same:
                seen |= bit
                count += 1
    return count


@leaf
def gopher_quality(T, buf, ntok, tok_s, tok_e, n_ns, ns_chars, n_alpha, stop_blob, stop_off, sig):
    """The Gopher quality signals of one document with ``ntok`` words, of which ``n_ns``
    are not only symbols (with ``ns_chars`` characters) and ``n_alpha`` hold a letter."""
    flags = T.flags
    end = buf.shape[0]
    sig[GQ_WORDS] = n_ns
    sig[GQ_MEAN_WORD_LEN] = ns_chars / n_ns if n_ns > 0 else np.nan
    if ntok > 0:
        hashes, ellipses = symbol_counts(buf, end)
        sig[GQ_HASH_RATIO] = hashes / ntok
        sig[GQ_ELLIPSIS_RATIO] = ellipses / ntok
        sig[GQ_ALPHA_WORDS] = n_alpha / ntok
    n_lines = 0
    n_bullet = 0
    n_ell = 0
    i = 0
    while i < end:
        le, nx = next_line(flags, buf, i, end)
        a = lstrip(flags, buf, i, le)
        if startswith(buf, a, le, _BULLET) or startswith(buf, a, le, _DASH):
            n_bullet += 1
        b = rstrip(flags, buf, i, le)
        if endswith(buf, i, b, DOTS) or endswith(buf, i, b, _HELLIP):
            n_ell += 1
        n_lines += 1
        i = nx
    if n_lines > 0:
        sig[GQ_BULLET_LINES] = n_bullet / n_lines
        sig[GQ_ELLIPSIS_LINES] = n_ell / n_lines
    sig[GQ_STOP_WORDS] = stop_word_count(buf, ntok, tok_s, tok_e, stop_blob, stop_off)
