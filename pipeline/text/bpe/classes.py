"""Each code point's class as tiktoken's split patterns see it (``_gen_classes.py`` says
how the table is made and why some code points are "unknown").

The generated table keeps the classes o200k's pattern tells apart: upper-case letters
(``\\p{Lu}``, ``\\p{Lt}``), lower-case (``\\p{Ll}``), letters of neither case (``\\p{Lm}``,
``\\p{Lo}``) and marks (``\\p{M}``). The older patterns see only letters, numbers, white
space and the rest, so each pattern's scanner reads a view of the table
(``code_point_classes(view)``) with the classes it does not tell apart merged: one table
to generate, one uint8 read per code point whatever the pattern.
"""

from __future__ import annotations

import base64
import functools
import zlib

import numpy as np

# The coarse classes every view shares; LETTER only in the views that merge the letters.
OTHER, LETTER, NUMBER, SPACE, UNKNOWN = 0, 1, 2, 3, 4
# The fine classes of the generated table (FINE view): LETTER split by case, and marks.
UPPER, LOWER, CASELESS, MARK = 5, 6, 7, 8
# A letter whose case class changed after the table's Unicode version (U+0295 went from
# Ll to Lo): a letter to the views that merge letters, unknown to FINE.
RECASED = 9

FINE = 0  # o200k: every class apart
LETTERS = 1  # gpt2, cl100k, Qwen2: letters one class (\p{L}), marks are OTHER
LETTERS_AND_MARKS = 2  # Qwen3.5: letters and marks one class ([\p{L}\p{M}])

_MERGED = {
    FINE: {RECASED: UNKNOWN},
    LETTERS: {UPPER: LETTER, LOWER: LETTER, CASELESS: LETTER, RECASED: LETTER, MARK: OTHER},
    LETTERS_AND_MARKS: {UPPER: LETTER, LOWER: LETTER, CASELESS: LETTER, RECASED: LETTER, MARK: LETTER},
}


@functools.cache
def code_point_classes(view: int = LETTERS) -> np.ndarray:
    """uint8 per code point (0x110000 of them), the classes of ``view`` (FINE, LETTERS or
    LETTERS_AND_MARKS)."""
    mapping = np.arange(RECASED + 1, dtype=np.uint8)
    for fine, coarse in _MERGED[view].items():
        mapping[fine] = coarse
    return mapping[_generated()]


@functools.cache
def _generated() -> np.ndarray:
    from pipeline.text.bpe.classes_data import RUNS  # generated from this module's classes

    runs = np.frombuffer(zlib.decompress(base64.b64decode("".join(RUNS))), [("start", "<u4"), ("cls", "u1")])
    lengths = np.diff(runs["start"].astype(np.int64), append=0x110000)
    return np.repeat(runs["cls"], lengths)
