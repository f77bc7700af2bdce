"""Code signals (The Stack, StarCoder) and the character counts every rule set reads.

For code: the longest and the mean line, the share of alphanumeric characters, a
generated-file marker in the first lines, and the longest encoded blob (base64 or hex),
which math reads too. ``char_counts`` gives the characters and visible characters the
code, math and web drivers record.
"""

from __future__ import annotations

from pipeline.kernels.utf8 import decode, n_chars
from pipeline.text.char_tables import ALNUM, SPACE
from stages.quality.jit import leaf
from stages.quality.signals import (
    BLOB_LEN,
    CODE_ALNUM_FRAC,
    CODE_AUTOGEN,
    CODE_MAX_LINE_LEN,
    CODE_MEAN_LINE_LEN,
    P_CODE_AUTOGEN_LINES,
)
from stages.quality.str_methods import contains_lower, next_line


@leaf
def char_counts(flags, buf):
    """(characters, alphanumeric characters, non-whitespace characters)."""
    total = 0
    alnum = 0
    nonspace = 0
    i = 0
    end = buf.shape[0]
    while i < end:
        cp, n = decode(buf, i)
        f = flags[cp]
        total += 1
        if f & ALNUM:
            alnum += 1
        if not (f & SPACE):
            nonspace += 1
        i += n
    return total, alnum, nonspace


@leaf
def blob_length(buf):
    """Longest encoded blob in characters: a run of base64 characters ([A-Za-z0-9+/=]),
    or a run of escaped or literal hex bytes ("\\x3f\\x00..." or "0x3f, 0x00, ...")."""
    end = buf.shape[0]
    best = 0
    run = 0
    for i in range(end):
        c = buf[i]
        if (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 43 or c == 47 or c == 61:
            run += 1
            if run > best:
                best = run
        else:
            run = 0
    # hex byte sequences: "\xHH" repeated, or "0xHH" separated by commas/spaces
    i = 0
    start = -1
    last = -1
    while i < end:
        c = buf[i]
        if (c == 92 or c == 48) and i + 3 < end and (buf[i + 1] == 120 or buf[i + 1] == 88):
            j = i + 2
            while j < end and ((48 <= buf[j] <= 57) or (65 <= buf[j] <= 70) or (97 <= buf[j] <= 102)):
                j += 1
            if j > i + 2:
                if start < 0:
                    start = i
                last = j
                i = j
                continue
        if start >= 0 and (c == 44 or c == 32 or c == 10 or c == 9 or c == 13):
            i += 1
            continue
        if start >= 0:
            best = max(best, last - start)
            start = -1
        i += 1
    if start >= 0:
        best = max(best, last - start)
    return best


@leaf
def code_rules(T, buf, params, marker_blob, marker_off, sig):
    """The Stack / StarCoder signals: line lengths, alphanumeric share, generated-file
    markers in the first lines, encoded blobs."""
    flags = T.flags
    end = buf.shape[0]
    total, alnum, _ = char_counts(flags, buf)
    n_lines = 0
    longest = 0
    line_chars = 0
    autogen = 0
    i = 0
    while i < end:
        le, nx = next_line(flags, buf, i, end)
        c = n_chars(buf, i, le)
        longest = max(longest, c)
        line_chars += c
        if n_lines < params[P_CODE_AUTOGEN_LINES] and autogen == 0:
            for k in range(marker_off.shape[0] - 1):
                if contains_lower(buf, i, le, marker_blob, marker_off[k], marker_off[k + 1]):
                    autogen = 1
                    break
        n_lines += 1
        i = nx
    sig[CODE_MAX_LINE_LEN] = longest
    sig[CODE_MEAN_LINE_LEN] = line_chars / n_lines if n_lines > 0 else 0.0
    sig[CODE_ALNUM_FRAC] = alnum / total if total > 0 else 0.0
    sig[CODE_AUTOGEN] = autogen
    sig[BLOB_LEN] = blob_length(buf)
