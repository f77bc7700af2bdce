"""Which documents ``normalize`` can leave as they are: one numba pass over the Arrow
text buffers, a table lookup per character.

A document needs no rewrite under NFC when it holds a visible ASCII character (so it is
not emptied) and no character any step could change: nothing NFC might change or merge
(``_unstable_table``), no ``\\r`` when line breaks are rewritten, no control character,
non-character or stray byte-order mark when those are removed. Everything beyond the BMP
counts as changeable, as it did when RE2 made this check (``match_substring_regex`` with
a class of every such character, 120 MB/s a core); read byte by byte with the ASCII case
first, mostly-ASCII pages go at several times that.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.compile.warm_steps import warms
from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.utf8 import decode

NFC = 1  # the table's bits, per BMP code point; the options pick which ones count
CR = 2
UNWANTED = 4

# Hangul vowel and trailing jamo: they compose with the syllable before them by rule,
# not by a decomposition pair that ``unicodedata`` lists.
_HANGUL_SECOND = ((0x1161, 0x1175), (0x11A8, 0x11C2))


@functools.cache
def _unstable_table() -> np.ndarray:
    """Per BMP code point, its bits: ``NFC`` for those with a combining class, a
    decomposition that NFC does not undo, or that are the second of a canonical pair
    (UAX #15's quick check is "yes" for text with none of them), and the unassigned ones
    (Arrow's utf8proc may know a newer Unicode than ``unicodedata``); ``CR`` for ``\\r``;
    ``UNWANTED`` for what ``strip_controls`` removes (C0 controls but tab and newline,
    DEL, C1 controls, U+FDD0..U+FDEF, U+FEFF, U+FFFE, U+FFFF). Built once a process."""
    table = np.zeros(0x10000, np.uint8)
    for code in range(0x10000):
        char = chr(code)
        if unicodedata.combining(char) or unicodedata.category(char) in ("Cn", "Cs"):
            table[code] |= NFC
        elif unicodedata.normalize("NFC", char) != char:
            table[code] |= NFC
        parts = unicodedata.decomposition(char).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            table[int(parts[1], 16)] |= NFC
    for low, high in _HANGUL_SECOND:
        table[low : high + 1] |= NFC
    table[0x0D] |= CR
    for low, high in ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x9F), (0xFDD0, 0xFDEF), (0xFEFF, 0xFEFF)):
        table[low : high + 1] |= UNWANTED
    table[0xFFFE:] |= UNWANTED
    return table


@njit(_nrt=False)
def _stable_one(data, start, end, table, mask):
    visible = False
    i = start
    while i < end:
        b = data[i]
        if b < 0x80:
            if table[b] & mask:
                return False
            visible = visible or 0x21 <= b <= 0x7E
            i += 1
        elif b >= 0xF0:  # beyond the BMP
            return False
        else:
            c, n = decode(data, i)
            if table[c] & mask:
                return False
            i += n
    return visible


@njit(nogil=True)
def _stable_rows(data, offsets, table, mask):
    stable = np.zeros(len(offsets) - 1, np.bool_)
    for row in range(len(offsets) - 1):
        stable[row] = _stable_one(data, offsets[row], offsets[row + 1], table, mask)
    return stable


def stable(texts: pa.Array, newlines: bool, strip_controls: bool) -> np.ndarray:
    """Per document, whether NFC and the chosen steps leave it as it is and not blank."""
    mask = NFC | (CR if newlines else 0) | (UNWANTED if strip_controls else 0)
    data, offsets = string_buffers(texts)
    return _stable_rows(data, offsets, _unstable_table(), mask)


# ``seconds``: CPU-seconds on a cold cache (warm-up steps are ranked by it).
@warms("normalize", seconds=0.5)
def compile_scan() -> None:
    """A warm-up step: the scan's kernel, once per machine (every option value takes the
    same signature). Without it each worker compiled it during its first unit."""
    stable(pa.array(["Cafe\u0301\r\n"], pa.large_string()), True, True)
