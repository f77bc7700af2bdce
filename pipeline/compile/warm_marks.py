"""Marks of the warm-up steps whose kernels numba's cache already holds on this machine, so
that a run finding every step marked skips the warm-up.

Why: with a warm cache a warm-up step only loads kernels, in one worker, and the run's
first units wait for all steps to end: about 0.2 s of every warm run's critical path,
for loading that the workers do anyway when they first need a kernel.

A mark is an empty file whose name hashes the step (pickled), the kernel sources'
paths, sizes and modification times (numba's cache keys a kernel on its file's time and
size), the CPU and numba version it compiles for and the ``NUMBA_`` settings: any of them
changing gives another name, and the step runs again. Marks live beside the caches
(``numba_cache.marks_folder``), emptied when ``clear_stale_caches`` empties those; a mark whose kernels were deleted
costs speed only (each worker compiles what it needs itself), never a wrong result.
Where marks cannot be written (a read-only install) the warm-up simply always runs.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

from pipeline.compile.numba_cache import kernel_sources, marks_folder


def _machine() -> bytes:
    """What numba's compiled code depends on besides the sources."""
    import llvmlite.binding as ll
    import numba

    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("NUMBA_") and k != "NUMBA_CACHE_DIR")
    return repr((ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten(), numba.__version__, settings)).encode()


def files_key(paths: list[Path]) -> bytes:
    """The files' paths, modification times and sizes: what an edit of any of them changes."""
    stats = [(str(path), path.stat().st_mtime_ns, path.stat().st_size) for path in paths]
    return repr(stats).encode()


def mark_names(steps: list) -> list[str]:
    """The mark of each step (file names in ``marks_folder``)."""
    common = hashlib.sha256(_machine() + b"\0" + files_key(kernel_sources())).digest()
    return [hashlib.sha256(common + pickle.dumps(step)).hexdigest() for step in steps]


def all_marked(names: list[str]) -> bool:
    folder = marks_folder()
    return all((folder / name).is_file() for name in names)


def mark(names: list[str]) -> None:
    """Records these steps as done; silently nothing where the folder is not writable."""
    folder = marks_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / name).touch()
    except OSError:
        pass
