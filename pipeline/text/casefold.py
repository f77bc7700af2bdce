"""The one case fold of the stages that compare words: ``dedup``'s shingles and exact hash,
``decontaminate``'s n-grams.

``fold(cp)`` is a word character's lower-case form, or ``SPACE`` (whitespace: it ends a
word) or ``PUNCT`` (punctuation and symbols: dedup ends a word there, decontaminate
deletes it and the word goes on). Case folding covers ASCII, Latin-1, Latin Extended-A,
Greek, Cyrillic and full-width Latin; punctuation is ASCII's, Latin-1's symbols, the
General Punctuation, currency, arrows, mathematical and technical symbol blocks, CJK
punctuation, full-width punctuation and emoji. Everything else is a word character.

Why one table: each stage had a copy and they drifted apart. Where they differed, this
table follows Python's ``str`` predicates, which ``char_tables`` (the quality stage's
word splitting) follows too:

- code points 28-31 (the information separators FS, GS, RS, US) are whitespace, as
  ``str.isspace`` and ``str.split`` have them (dedup's copy had them as punctuation);
- ``¹ ² ³`` (0xB9, 0xB2, 0xB3) are digits of a word, as ``str.isdigit`` has them: ``m²``
  is not ``m`` (dedup's copy had them as punctuation; the vulgar fractions ``¼ ½ ¾``,
  not ``isdigit``, stay symbols in both);
- the currency, arrow, mathematical, technical and emoji blocks are symbols (dedup's copy
  had them as word characters).

So decontaminate's output is unchanged and dedup's is not, for text holding any of those
characters: its signatures, exact hashes and so its duplicate decisions (``Dedup.version``
2; a run or an ``index_from`` index made before refuses to mix with one made after).

A change to this table changes both stages' outputs: bump ``Dedup.version``,
``Decontaminate.version`` and decontaminate's ``INDEX_VERSION``;
``tests/test_casefold.py`` pins the table's digest to those versions.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pipeline.compile.jit import njit

SPACE = -2  # whitespace: ends a word
PUNCT = -1  # punctuation and symbols
NARROW = 0x800  # code points of one or two UTF-8 bytes: looked up in a table


def _fold_narrow(cp: int) -> int:
    """``fold`` below ``NARROW``, in Python: it fills the table, and only the table is
    compiled (a kernel with all these ranges took 0.2 s more to compile)."""
    if cp < 128:
        if 65 <= cp <= 90:
            return cp + 32
        if 97 <= cp <= 122 or 48 <= cp <= 57:
            return cp
        if cp == 32 or 9 <= cp <= 13 or 28 <= cp <= 31:
            return SPACE
        return PUNCT
    if cp < 0xC0:
        if cp == 0x85 or cp == 0xA0:
            return SPACE
        if cp == 0xAA or cp == 0xB2 or cp == 0xB3 or cp == 0xB5 or cp == 0xB9 or cp == 0xBA:
            return cp
        return PUNCT
    if cp < 0x100:
        if cp == 0xD7 or cp == 0xF7:
            return PUNCT
        if cp < 0xDF:
            return cp + 32
        return cp
    if cp < 0x180:
        if (cp < 0x138 or 0x14A <= cp < 0x178) and cp % 2 == 0:
            return cp + 1
        if (0x139 <= cp < 0x149 or 0x179 <= cp < 0x17F) and cp % 2 == 1:
            return cp + 1
        return cp
    if 0x391 <= cp <= 0x3A9 and cp != 0x3A2:
        return cp + 32
    if 0x410 <= cp <= 0x42F:
        return cp + 32
    if 0x400 <= cp <= 0x40F:
        return cp + 80
    return cp


FOLD = np.array([_fold_narrow(cp) for cp in range(NARROW)], np.int32)


@njit
def _fold_wide(cp):
    """``fold`` from ``NARROW`` up."""
    if 0x2000 <= cp <= 0x206F:
        if cp <= 0x200A or cp == 0x2028 or cp == 0x2029 or cp == 0x202F or cp == 0x205F:
            return SPACE
        return PUNCT
    if cp == 0x1680 or cp == 0x3000:
        return SPACE
    if 0x20A0 <= cp <= 0x20FF or 0x2190 <= cp <= 0x2BFF or 0x2E00 <= cp <= 0x2E7F:
        return PUNCT
    if 0x3001 <= cp <= 0x303F or 0xFE30 <= cp <= 0xFE4F or cp == 0xFEFF or 0x1F000 <= cp <= 0x1FAFF:
        return PUNCT
    if 0xFF00 <= cp <= 0xFF65:
        if 0xFF21 <= cp <= 0xFF3A:
            return cp + 32
        if 0xFF10 <= cp <= 0xFF19 or 0xFF41 <= cp <= 0xFF5A:
            return cp
        return PUNCT
    return cp


@njit(inline="always")
def fold(cp):
    """``cp`` lower-cased, or ``SPACE`` / ``PUNCT``."""
    if cp < NARROW:
        return np.int64(FOLD[cp])
    return _fold_wide(cp)


def fold_py(cp: int) -> int:
    """``fold`` in plain Python (no compile): for the stages' plain-Python references."""
    return int(FOLD[cp]) if cp < NARROW else int(_fold_wide.py_func(cp))


def table_digest(last: int = 0x30000) -> str:
    """sha256 of the fold of every code point below ``last`` (int32, little-endian): what
    the stages' versions are pinned to."""
    wide = [_fold_wide.py_func(cp) for cp in range(NARROW, last)]
    folded = np.concatenate([FOLD, np.array(wide, np.int32)]).astype("<i4")
    return hashlib.sha256(folded.tobytes()).hexdigest()
