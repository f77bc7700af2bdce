"""Stable 64-bit hashes of document ids, straight from Arrow buffers; file checksums.

Used wherever a choice must not depend on worker count or file order: sampling a run
(``--sample``) and down-sampling a mixture both decide by the hash of a document's id.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.kernels.buffers import string_buffers
from pipeline.kernels.mixing import fnv1a, splitmix64


def hash_strings(strings: pa.Array) -> np.ndarray:
    """64-bit FNV-1a of each string's UTF-8 bytes (null hashes like "").

    Another type is hashed by its text form (its cast to ``large_string``)."""
    data, offsets = string_buffers(strings)
    return _fnv1a_rows(data, offsets)


@njit
def _fnv1a_rows(data, offsets):
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    for i in range(len(offsets) - 1):
        out[i] = fnv1a(data, offsets[i], offsets[i + 1])
    return out


def file_sha256(path: str | os.PathLike, block: int = 16 << 20) -> str:
    """sha256 of a whole file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(block):
            digest.update(data)
    return digest.hexdigest()


def id_hashes(ids: pa.Array) -> np.ndarray:
    """The project's id hash: FNV-1a of the id, then a SplitMix64 step (FNV alone mixes poorly)."""
    return splitmix64(hash_strings(ids))


def in_sample(ids: pa.Array, fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask: which documents a ``fraction`` sample keeps, by their ids alone;
    another ``seed`` draws another sample (seed 0 is the id hash itself, as before seeds)."""
    if fraction >= 1.0:
        return np.ones(len(ids), dtype=bool)
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    hashes = id_hashes(ids)
    if seed:
        hashes = splitmix64(hashes ^ splitmix64(np.array([seed], np.uint64))[0])
    return hashes < threshold
