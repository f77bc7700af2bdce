"""Stable 64-bit hashes of document ids, straight from Arrow buffers; file checksums.

Used wherever a choice must not depend on worker count or file order: sampling a run
(``--sample``) and down-sampling a mixture both decide by the hash of a document's id.
"""

from __future__ import annotations

import hashlib
import os

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def hash_strings(strings: pa.Array) -> np.ndarray:
    """64-bit FNV-1a of each string's UTF-8 bytes (null hashes like "")."""
    strings = pc.cast(strings, pa.large_string())
    if strings.null_count:
        strings = pc.fill_null(strings, "")
    _, offsets_buffer, data_buffer = strings.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[strings.offset : strings.offset + len(strings) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return _fnv1a(data, offsets)


@numba.njit(cache=True)
def _fnv1a(data, offsets):
    out = np.empty(len(offsets) - 1, dtype=np.uint64)
    for i in range(len(offsets) - 1):
        h = np.uint64(14695981039346656037)
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * np.uint64(1099511628211)
        out[i] = h
    return out


def file_sha256(path: str | os.PathLike, block: int = 16 << 20) -> str:
    """sha256 of a whole file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(block):
            digest.update(data)
    return digest.hexdigest()


def splitmix64(values: np.ndarray) -> np.ndarray:
    """A strong 64-bit mix (the SplitMix64 finalizer), vectorised; FNV alone mixes poorly."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def in_sample(ids: pa.Array, fraction: float) -> np.ndarray:
    """Boolean mask: which documents a ``fraction`` sample keeps, by their ids alone."""
    if fraction >= 1.0:
        return np.ones(len(ids), dtype=bool)
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    return splitmix64(hash_strings(ids)) < threshold
