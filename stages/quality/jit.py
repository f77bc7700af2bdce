"""Compilation modes for the quality kernels.

``leaf`` compiles helpers that never allocate without numba's reference counting
(``_nrt=False``). Passing arrays (or the tables tuple) to an ordinary njit function
costs an atomic incref/decref per array per call, about 0.5 µs with the tables tuple,
which made word splitting 100x slower than the work itself; inlining everything
instead made compilation take minutes. Leaves take their arrays as borrowed pointers.
``kernel`` is for the per-batch / per-document drivers that allocate scratch.

Both cache what they compile (``pipeline/compile/jit.py``); ``pipeline/compile/numba_cache.py``
deletes those caches when any source of prep changed, because numba checks a cached kernel
only against its own file while it carries everything it calls.
"""

from __future__ import annotations

from pipeline.compile.jit import njit


def leaf(fn):
    return njit(_nrt=False)(fn)


def kernel(fn):
    return njit(fn)
