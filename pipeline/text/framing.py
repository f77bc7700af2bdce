"""Document framing: a BOS token before and an end-of-document token after each document
of a flat token array.

One owner because two places must frame alike: the ``tokenize`` stage writing shards and
``prep ablate`` making its eval windows, whose nats per token are comparable with the
training data's only when both see the same BOS and EOD tokens in the same places.
"""

from __future__ import annotations

import numpy as np


def frame_documents(
    flat: np.ndarray, lengths: np.ndarray, bos: int | None, eos: int | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Put ``bos`` before and ``eos`` after every document of a flat token array (vectorised)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    extra = (bos is not None) + (eos is not None)
    if extra == 0:
        return flat.astype(dtype, copy=False), lengths
    out_lengths = lengths + extra
    ends = np.cumsum(out_lengths)
    starts = ends - out_lengths
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=dtype)
    if bos is not None:
        out[starts] = bos
    if eos is not None:
        out[ends - 1] = eos
    # Token j of document d moves right by d * extra (+1 with a BOS).
    shift = np.repeat(np.arange(len(lengths), dtype=np.int64) * extra + (bos is not None), lengths)
    out[np.arange(len(flat), dtype=np.int64) + shift] = flat
    return out, out_lengths
