"""Compilation modes for the quality kernels.

``leaf`` compiles helpers that never allocate without numba's reference counting
(``_nrt=False``). Passing arrays (or the tables tuple) to an ordinary njit function
costs an atomic incref/decref per array per call, about 0.5 µs with the tables tuple,
which made word splitting 100x slower than the work itself; inlining everything
instead made compilation take minutes. Leaves take their arrays as borrowed pointers.
``kernel`` is for the per-batch / per-document drivers that allocate scratch.

Both cache what they compile (``cache=True``), and numba checks a cached function only
against its own source file, while the compiled code carries everything it calls and
every global it read (the signal indices of ``signals.py``). So after editing one
module here, the kernels of the others that call it or read its constants run the old
code silently: delete ``stages/quality/__pycache__`` (and ``pipeline/kernels/__pycache__``
after editing those helpers).
"""

from __future__ import annotations

import numba


def leaf(fn):
    return numba.njit(cache=True, _nrt=False)(fn)


def kernel(fn):
    return numba.njit(cache=True)(fn)
