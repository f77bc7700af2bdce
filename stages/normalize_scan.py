"""Which of ``normalize``'s steps each document needs: one numba pass over the Arrow
text buffers, a table lookup per character.

Under NFC a step can change a document only if it holds one of its characters: NFC, one
it might change or merge (``_unstable_table``; everything beyond the BMP counts, as it
did when RE2 made this check); the line-break step, a ``\r``; the control step, a
control character, non-character or stray byte-order mark. A document without a visible
ASCII character may end up blank, so it is read again after the steps. One that needs
nothing keeps its buffers, and each step reads only the documents that need it: on web
pages most of the flagged ones need only their ``\r\n`` rewritten, and NFC, the dearest
step by far (utf8proc, 65 MB/s), reads a few percent of what it read before.

The pass goes at about 1.7 GB/s a core on mostly-ASCII text (the two RE2 scans it
replaced: 0.65 GB/s, plus 0.3 ms a call compiling the class of every NFC-unstable
character).
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
VISIBLE = 8  # visible ASCII (U+0021..U+007E): a document with one is never emptied
BLANK = 16  # no VISIBLE character (a document's bit, not a character's)

# What ``strip_controls`` removes, as (first, last) code points: C0 controls but tab and
# newline, DEL, C1 controls, the non-characters U+FDD0..U+FDEF and U+xFFFE/U+xFFFF of
# every plane, and U+FEFF (a byte-order mark inside text). ``normalize`` removes them with
# a regex built from these; the scan below flags the planes beyond the BMP by arithmetic.
UNWANTED_RANGES = ((0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x9F), (0xFDD0, 0xFDEF), (0xFEFF, 0xFEFF)) + tuple(
    (plane << 16 | 0xFFFE, plane << 16 | 0xFFFF) for plane in range(17)
)

# Hangul vowel and trailing jamo: they compose with the syllable before them by rule,
# not by a decomposition pair that ``unicodedata`` lists.
_HANGUL_SECOND = ((0x1161, 0x1175), (0x11A8, 0x11C2))


@functools.cache
def _unstable_table() -> np.ndarray:
    """Per BMP code point, its bits: ``NFC`` for those with a combining class, a
    decomposition that NFC does not undo, or that are the second of a canonical pair
    (UAX #15's quick check is "yes" for text with none of them), and the unassigned ones
    (Arrow's utf8proc may know a newer Unicode than ``unicodedata``); ``CR`` for ``\\r``;
    ``UNWANTED`` for what ``strip_controls`` removes (``UNWANTED_RANGES`` in the BMP).
    Built once a process."""
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
    for low, high in UNWANTED_RANGES:
        if high < 0x10000:
            table[low : high + 1] |= UNWANTED
    table[0x21:0x7F] |= VISIBLE
    return table


@njit(_nrt=False)
def _needs_one(data, start, end, table, mask):
    seen = np.int64(0)  # the table's bits of every character read
    i = start
    while i < end:
        b = data[i]
        if b < 0x80:
            seen |= table[b]
            i += 1
        elif b >= 0xF0:  # beyond the BMP: NFC, as RE2's check had it; U+xFFFE, U+xFFFF are unwanted
            c, n = decode(data, i)
            seen |= NFC
            if c & 0xFFFE == 0xFFFE:
                seen |= UNWANTED
            i += n
        else:
            c, n = decode(data, i)
            seen |= table[c]
            i += n
    return (seen & mask) | (0 if seen & VISIBLE else BLANK)


@njit(nogil=True)
def _needs_rows(data, offsets, table, mask):
    needs = np.zeros(len(offsets) - 1, np.uint8)
    for row in range(len(offsets) - 1):
        needs[row] = _needs_one(data, offsets[row], offsets[row + 1], table, mask)
    return needs


def needs(texts: pa.Array, newlines: bool, strip_controls: bool) -> np.ndarray:
    """Per document, the bits of the steps it needs, ``NFC``, ``CR`` (if ``newlines``),
    ``UNWANTED`` (if ``strip_controls``), and ``BLANK`` (no visible ASCII character: it
    may end up empty); 0: NFC and the chosen steps leave it as it is."""
    mask = NFC | (CR if newlines else 0) | (UNWANTED if strip_controls else 0)
    data, offsets = string_buffers(texts)
    return _needs_rows(data, offsets, _unstable_table(), mask)


# ``seconds``: CPU-seconds on a cold cache (warm-up steps are ranked by it).
@warms("normalize", seconds=0.5)
def compile_scan() -> None:
    """A warm-up step: the scan's kernel, once per machine (every option value takes the
    same signature). Without it each worker compiled it during its first unit."""
    needs(pa.array(["Cafe\u0301\r\n"], pa.large_string()), True, True)
