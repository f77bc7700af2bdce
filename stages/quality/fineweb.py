"""FineWeb signals: datatrove's FineWebQualityFilter on the text C4 leaves.

FineWeb's recipe runs after C4, so it reads the rewritten text: over its non-blank
lines, the share ending in terminal punctuation, the share of short lines, the share of
characters in duplicated lines, and newlines per word.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.utf8 import decode, n_chars, prev_start
from pipeline.text.char_tables import DT_TERM
from stages.quality.jit import kernel
from stages.quality.open_addressing import bytes_key, count_duplicates
from stages.quality.signals import (
    FW_CHAR_DUP_RATIO,
    FW_LINE_PUNCT_RATIO,
    FW_LINES,
    FW_LIST_RATIO,
    FW_SHORT_LINE_RATIO,
)
from stages.quality.str_methods import lstrip


@kernel
def fineweb(T, buf, short_len, ntok, sig):
    """datatrove's FineWebQualityFilter signals on buf (the text as C4 left it), which
    has ``ntok`` words."""
    flags = T.flags
    end = buf.shape[0]
    n_max = 1
    for i in range(end):
        if buf[i] == 10:
            n_max += 1
    n_newlines = n_max - 1
    keys = np.empty(n_max, np.uint64)
    lens = np.empty(n_max, np.int64)
    n = 0
    n_punct = 0
    n_short = 0
    denom = 0  # characters but newlines: those of every line
    start = 0
    for i in range(end + 1):
        if i == end or buf[i] == 10:
            a = lstrip(flags, buf, start, i)
            c = n_chars(buf, start, i)
            denom += c
            if a < i:  # line.strip() != ""
                p = prev_start(buf, i)
                cp, _ = decode(buf, p)
                if flags[cp] & DT_TERM:
                    n_punct += 1
                if c <= short_len:
                    n_short += 1
                keys[n] = bytes_key(buf, start, i)
                lens[n] = c
                n += 1
            start = i + 1
    sig[FW_LINES] = n
    if n == 0:
        return
    sig[FW_LINE_PUNCT_RATIO] = n_punct / n
    sig[FW_SHORT_LINE_RATIO] = n_short / n
    _, dup_chars = count_duplicates(keys, lens, n)
    sig[FW_CHAR_DUP_RATIO] = dup_chars / denom if denom > 0 else np.nan
    sig[FW_LIST_RATIO] = n_newlines / ntok if ntok > 0 else np.nan
