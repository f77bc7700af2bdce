"""64-bit hash primitives: the SplitMix64 finaliser and FNV-1a, for kernels and numpy.

FNV-1a is cheap per byte but mixes poorly (nearby inputs give nearby hashes in the
low bits), so a hash that picks a partition, a sample or a table slot goes through
the SplitMix64 finaliser (``mix64``), a bijection of 64 bits with full avalanche.

``mix64`` is numba for kernels, and its plain Python body (``mix64.py_func``) is also the
vectorised numpy version behind ``splitmix64``. FNV-1a's loop runs over one string, so its
numpy version over many strings at once, ``fnv1a_nonzero_rows``, is written out beside
it (a test holds the two equal).
The ``_nonzero`` variants never return 0, so 0 can mark an empty slot of an
open-addressing table; they differ from the plain ones only there (0 becomes 1).
Every document id hash, dedup key and quality n-gram key is built on these: changing
one changes outputs.
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit

GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, odd: SplitMix64's increment
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(_nrt=False)
def mix64(x):
    """SplitMix64's finaliser: a bijective avalanche of 64 bits (uint64 in, uint64 out)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@njit(_nrt=False)
def mix64_nonzero(x):
    """``mix64``, but 1 where that is 0: a key for tables that mark empty slots with 0."""
    x = mix64(x)
    if x == 0:
        x = np.uint64(1)
    return x


def splitmix64(values: np.ndarray) -> np.ndarray:
    """One SplitMix64 step of each value (``mix64(value + GOLDEN_GAMMA)``), vectorised."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += GOLDEN_GAMMA
        return mix64.py_func(z)


@njit(_nrt=False)
def fnv1a(buf, start, end):
    """64-bit FNV-1a over buf[start:end], each element taken as one uint64 (bytes, or
    already-decoded code points)."""
    h = FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * FNV_PRIME
    return h


@njit(_nrt=False)
def fnv1a_nonzero(buf, start, end):
    """``fnv1a``, but 1 where that is 0: a key for tables that mark empty slots with 0."""
    h = fnv1a(buf, start, end)
    if h == 0:
        h = np.uint64(1)
    return h


def fnv1a_nonzero_rows(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``fnv1a_nonzero`` of each ``blob[offsets[i]:offsets[i + 1]]`` (uint8), in numpy, one
    step per byte position across all rows. For tables built in Python when a worker
    starts: calling the kernel there compiled it first, 0.2 s in every worker of a cold run."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = np.full(len(lengths), FNV_OFFSET, np.uint64)
    for k in range(int(lengths.max(initial=0))):
        live = np.flatnonzero(lengths > k)
        h[live] = (h[live] ^ blob[starts[live] + k].astype(np.uint64)) * FNV_PRIME  # arrays wrap, as the kernel does
    h[h == 0] = 1
    return h
