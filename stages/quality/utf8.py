"""UTF-8 stepping for numba kernels: Arrow hands us bytes, the rules count code points."""

from __future__ import annotations

import numba


@numba.njit(cache=True, _nrt=False, inline="always")
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


@numba.njit(cache=True, _nrt=False, inline="always")
def prev_start(buf, i):
    """Start of the character that ends just before byte i."""
    j = i - 1
    while (buf[j] & 0xC0) == 0x80:
        j -= 1
    return j


@numba.njit(cache=True, _nrt=False, inline="always")
def n_chars(buf, start, end):
    """Number of code points in buf[start:end] (Python's len of that str)."""
    n = 0
    for i in range(start, end):
        if (buf[i] & 0xC0) != 0x80:
            n += 1
    return n
