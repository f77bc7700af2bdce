"""Each code point's class as tiktoken's split patterns see it (``_gen_classes.py`` says
how the table is made and why some code points are "unknown")."""

from __future__ import annotations

import base64
import functools
import zlib

import numpy as np

OTHER, LETTER, NUMBER, SPACE, UNKNOWN = 0, 1, 2, 3, 4


@functools.cache
def code_point_classes() -> np.ndarray:
    """uint8 per code point (0x110000 of them): OTHER, LETTER, NUMBER, SPACE or UNKNOWN."""
    from pipeline.text.bpe.classes_data import RUNS  # generated from this module's classes

    runs = np.frombuffer(zlib.decompress(base64.b64decode("".join(RUNS))), [("start", "<u4"), ("cls", "u1")])
    lengths = np.diff(runs["start"].astype(np.int64), append=0x110000)
    return np.repeat(runs["cls"], lengths)
