"""A process made ready, once, to run prep's kernels: what a server the workers are forked
from (multiprocessing's "forkserver", see ``engine/executor.py``) does before it forks.

A worker started from scratch spent about 1.3 CPU-seconds before its first task, on every
run, warm cache or not: importing numpy, pyarrow, numba and prep's stages, running the
``prep`` script again as multiprocessing does for a spawned child (the command line adds
its own module to the server's list), pyarrow's first conversion (``pyarrow_no_pandas``), and
numba's first use of its CPU target and runtime. Done once in the server, a forked worker
starts with all of it in place, shared copy-on-write. What to import is the caller's (the
engine's task modules and stages: ``engine/worker_imports.py``); how is here.

Then the garbage collector. What is imported here lives as long as the worker, yet each
full collection walked its 150,000 objects again (and wrote to their pages, unsharing
them): ``gc.freeze`` sets them aside. The imports themselves run with the collector off:
at Python's default it ran 270 times during them, a fifth of the server's start (0.1 of
0.55 s, on every run's critical path), to find 940 objects of garbage (0.4 MB, frozen
with the rest). And numba's compiler makes short-lived objects by the million: at
Python's default, a collection every 700 new ones, the workers spent 1.8 CPU-seconds of
a cold warm-up collecting; 0.4 with one every 10,000 (a run's own work, in kernels and
Arrow, makes few Python objects).
"""

from __future__ import annotations

import gc
from collections.abc import Callable


def preload(imports: Callable[[], object]) -> None:
    """Runs ``imports`` (what the workers run) with the collector off, readies numba's
    runtime, sets all of it aside from the collector and collects less often from now on.
    Call it first thing in the module the server imports: numba itself is imported here."""
    gc.disable()
    try:
        from pipeline.compile.numba_setup import ready_runtime
        from pipeline.util.pyarrow_no_pandas import answer_without_pandas

        answer_without_pandas()  # first: a stage module may make an Arrow scalar as it loads
        imports()
        ready_runtime()
        gc.freeze()
    finally:
        gc.set_threshold(10_000, 50, 100)
        gc.enable()
