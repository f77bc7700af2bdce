"""Python's ``str`` methods on a UTF-8 byte span, for the signal kernels.

datatrove's rules are written with ``str.splitlines``, ``strip``, ``startswith``,
``endswith`` and ``in`` on ``lower()``; the kernels answer the same questions
on the Arrow buffer's bytes, without building strings, so each rule counts exactly what
the reference counts (characters as code points, whitespace and line breaks as
``str.isspace`` and ``str.splitlines`` define them).
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.utf8 import decode, prev_start
from pipeline.text.char_tables import LINEBREAK, SPACE
from stages.quality.jit import leaf

DOTS = np.array([46, 46, 46], np.uint8)  # "...": Gopher counts it, C4 drops lines ending in it


@leaf
def next_line(flags, buf, i, end):
    """``str.splitlines``: (end of the line starting at i, start of the next)."""
    j = i
    while j < end:
        cp, n = decode(buf, j)
        if flags[cp] & LINEBREAK:
            if cp == 13 and j + 1 < end and buf[j + 1] == 10:
                return j, j + 2
            return j, j + n
        j += n
    return end, end


@leaf
def lstrip(flags, buf, a, b):
    while a < b:
        cp, n = decode(buf, a)
        if not (flags[cp] & SPACE):
            break
        a += n
    return a


@leaf
def rstrip(flags, buf, a, b):
    while b > a:
        p = prev_start(buf, b)
        cp, _ = decode(buf, p)
        if not (flags[cp] & SPACE):
            break
        b = p
    return b


@njit(_nrt=False)
def startswith(buf, a, b, lit):
    n = lit.shape[0]
    if b - a < n:
        return False
    for k in range(n):
        if buf[a + k] != lit[k]:
            return False
    return True


@njit(_nrt=False)
def endswith(buf, a, b, lit):
    n = lit.shape[0]
    if b - a < n:
        return False
    for k in range(n):
        if buf[b - n + k] != lit[k]:
            return False
    return True


@leaf
def contains_lower(buf, a, b, blob, pa, pb):
    """Whether ``blob[pa:pb]`` (lowercase ASCII) occurs in ``buf[a:b].lower()`` (ASCII folding)."""
    n = pb - pa
    if n == 0:
        return True
    first = blob[pa]
    for i in range(a, b - n + 1):
        c = buf[i]
        if 65 <= c <= 90:
            c += 32
        if c != first:
            continue
        ok = True
        for k in range(1, n):
            d = buf[i + k]
            if 65 <= d <= 90:
                d += 32
            if d != blob[pa + k]:
                ok = False
                break
        if ok:
            return True
    return False
