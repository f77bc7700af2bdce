"""How deeply JSON lines nest, measured on the raw bytes before any parser sees them.

Arrow's JSON parser recurses once per level and builds one nested type per level: a line
nested 5,000 deep overflows its stack (SIGSEGV, the whole process dies, ``--strict``
included), and 2,000 deep already costs over a gigabyte and seconds for a 4 KB line.
Lines deeper than ``MAX_DEPTH`` are therefore quarantined unparsed. The scan is one
linear pass over the block in native code, run on the prefetch thread (it releases the
GIL), so it costs a fraction of the parse it protects.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz

from pipeline.kernels.jit import njit

# Real corpora nest a few levels (C4: 1; RedPajama's meta: 2-3; chat trees rarely past
# 10). The bound is set by what must read the documents back: Parquet readers refuse a
# schema nested past 100 levels, and a JSON array takes two of them (list, element), so
# a kept document nested 100 deep would be written and then unreadable. 40 keeps the
# worst case (arrays all the way down) at 81. Arrow's parse cost grows quadratically with
# depth and its stack runs out in the thousands.
MAX_DEPTH = 40

# Bit tricks that test 8 bytes at once (see _deep_lines).
_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(ord('"') * 0x0101010101010101)
_NEWLINES = np.uint64(ord("\n") * 0x0101010101010101)
_ZERO, _ONE = np.uint64(0), np.uint64(1)
_QUOTE, _BACKSLASH, _NEWLINE = ord('"'), ord("\\"), ord("\n")
_OPENERS, _CLOSERS = (ord("{"), ord("[")), (ord("}"), ord("]"))


def scan_lines(block, limit: int = MAX_DEPTH) -> tuple[np.ndarray, int]:
    """0-based indices (newlines counted from the block's start) of the lines whose
    bracket nesting exceeds ``limit``, and the block's newline count (the scan meets every
    newline anyway, so the reader needs no pass of its own to number lines). Brackets
    inside strings do not count. ``block`` is bytes or a memoryview of them."""
    data = np.frombuffer(block, dtype=np.uint8)
    words = np.frombuffer(block, dtype=np.uint64, count=len(block) // 8)
    # A line too deep holds more than ``limit`` brackets: room for every one there could
    # be (memory is only used where written: a few lines, if any).
    found = np.empty(len(block) // (limit + 1) + 1, np.int64)
    n_found, lines = _deep_lines(data, words, limit, found)
    return found[:n_found].copy(), lines


def too_deep_lines(block, limit: int = MAX_DEPTH) -> np.ndarray:
    return scan_lines(block, limit)[0]


@njit(inline="always")
def _has_zero_byte(word):
    """The high bit of every byte of ``word`` that is 0 is set (a byte just above a 0 may
    be flagged too: candidates are checked)."""
    return (word - _ONES) & ~word & _HIGH


@njit(inline="always")
def _is_escaped(data, i):
    """Whether the byte at ``i`` follows an odd run of backslashes (inside a string,
    whose opening quote ends the run)."""
    k = i - 1
    while data[k] == _BACKSLASH:
        k -= 1
    return (i - 1 - k) % 2 == 1


@njit(inline="always")
def _string_end(data, words, i):
    """Position of the quote closing the string whose body starts at ``i``, or of the
    newline that cuts it short (a raw newline is invalid JSON; the line is broken anyway).

    String bodies are most of a document's bytes, so they are read by aligned 8-byte
    words (``words[k]`` is ``data[8k:8k + 8]``; ``& 7`` and ``>> 3`` are ``% 8`` and
    ``// 8``): two words with neither a quote nor a newline are skipped at once, and in
    other words only the candidate bytes are looked at (escaped quotes, as in HTML, are
    common).
    """
    n = len(data)
    while i < n:
        if (i & 15) == 0 and i + 16 <= n and (_candidates(words[i >> 3]) | _candidates(words[(i >> 3) + 1])) == _ZERO:
            i += 16
        elif (i & 7) == 0 and i + 8 <= n:
            candidates = _candidates(words[i >> 3])
            while candidates != _ZERO:
                j = i + (np.int64(trailing_zeros(candidates)) >> 3)
                if _ends_string(data, j):
                    return j
                candidates &= candidates - _ONE
            i += 8
        elif _ends_string(data, i):
            return i
        else:
            i += 1
    return n


@njit(inline="always")
def _candidates(word):
    """The high bit of each byte of ``word`` that may be a quote or a newline."""
    return _has_zero_byte(word ^ _QUOTES) | _has_zero_byte(word ^ _NEWLINES)


@njit(inline="always")
def _ends_string(data, i):
    c = data[i]
    return c == _NEWLINE or (c == _QUOTE and not _is_escaped(data, i))


@njit(nogil=True)
def _deep_lines(data, words, limit, found):
    """Writes the lines nested deeper than ``limit`` to ``found``; returns how many, and
    the newline count. (An array from Python rather than a list: a list, and the array
    made of it, were a third of this kernel's compile time.)"""
    n_found = line = depth = 0
    flagged = False  # this line is already in ``found``
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c == _QUOTE:
            i = _string_end(data, words, i + 1)
            if i < n and data[i] == _NEWLINE:
                continue  # the newline ends the line below
        elif c == _NEWLINE:
            line += 1
            depth = 0
            flagged = False
        elif c == _OPENERS[0] or c == _OPENERS[1]:
            depth += 1
            if depth > limit and not flagged:
                found[n_found] = line
                n_found += 1
                flagged = True
        elif (c == _CLOSERS[0] or c == _CLOSERS[1]) and depth > 0:
            depth -= 1
        i += 1
    return n_found, line
