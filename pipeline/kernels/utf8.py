"""UTF-8 stepping for numba kernels: Arrow hands us bytes, the rules count code points.

Two decoders, because two callers want different things from bytes that are not
valid UTF-8 (Arrow validates string arrays, so in practice both see valid text):

- ``decode`` trusts its input (the quality kernels, which must match Python's ``str``
  on valid text and read one lead byte to know the length);
- ``decode_lenient`` never reads at or past ``end`` and gives every byte a code point
  (dedup's normalisation, whose hashes must be defined for any bytes).

They agree on valid UTF-8. Changing either changes quality signals or dedup hashes.
"""

from __future__ import annotations

import numba
import numpy as np

from pipeline.compile.jit import njit


@njit(_nrt=False)
def decode(buf, i):
    """(code point, byte length) of the character starting at buf[i] (input is valid UTF-8)."""
    b = buf[i]
    if b < 0x80:
        return numba.int64(b), 1
    if b < 0xE0:
        return ((numba.int64(b) & 0x1F) << 6) | (numba.int64(buf[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return (
            ((numba.int64(b) & 0x0F) << 12) | ((numba.int64(buf[i + 1]) & 0x3F) << 6) | (numba.int64(buf[i + 2]) & 0x3F)
        ), 3
    return (
        ((numba.int64(b) & 0x07) << 18)
        | ((numba.int64(buf[i + 1]) & 0x3F) << 12)
        | ((numba.int64(buf[i + 2]) & 0x3F) << 6)
        | (numba.int64(buf[i + 3]) & 0x3F)
    ), 4


@njit(_nrt=False)
def decode_lenient(buf, i, end):
    """(code point, byte length) of the character starting at buf[i], for any bytes.

    Reads nothing at or past ``end``. A lead byte is read as the longest sequence it may
    start that fits before ``end`` (so a 4-byte lead with three bytes left is decoded as
    a 3-byte one); continuation bytes are not checked. A byte that starts nothing (ASCII,
    a stray continuation byte, a lead byte at ``end - 1``) is its own code point."""
    c = np.int64(buf[i])
    if c < 0x80:
        return c, 1
    if c >= 0xF0 and i + 3 < end:
        return ((c & 0x07) << 18) | ((np.int64(buf[i + 1]) & 0x3F) << 12) | ((np.int64(buf[i + 2]) & 0x3F) << 6) | (
            np.int64(buf[i + 3]) & 0x3F
        ), 4
    if c >= 0xE0 and i + 2 < end:
        return ((c & 0x0F) << 12) | ((np.int64(buf[i + 1]) & 0x3F) << 6) | (np.int64(buf[i + 2]) & 0x3F), 3
    if c >= 0xC0 and i + 1 < end:
        return ((c & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F), 2
    return c, 1


@njit(_nrt=False)
def prev_start(buf, i):
    """Start of the character that ends just before byte i."""
    j = i - 1
    while (buf[j] & 0xC0) == 0x80:
        j -= 1
    return j


@njit(_nrt=False)
def n_chars(buf, start, end):
    """Number of code points in buf[start:end] (Python's len of that str)."""
    n = 0
    for i in range(start, end):
        if (buf[i] & 0xC0) != 0x80:
            n += 1
    return n
