"""The local executor: a pool of worker processes on one machine, no service to start.

Tasks are (function, args) pairs of module-level functions, so the same task list could
be handed to another executor. Workers report progress through a queue that the main
process drains while it waits; Ctrl-C stops the workers and leaves completed units in
place for the next run to skip. One pool serves every phase of a run (``close`` ends
it): a worker keeps its imports, numba kernels and built stages from phase to phase.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence

from pipeline.progress import ProgressBar

Task = tuple[Callable[..., Any], tuple]

_progress_queue = None


def _init_worker(progress_queue) -> None:
    global _progress_queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    _progress_queue = progress_queue


class _QueueReporter:
    """Batches progress updates so a worker sends a few messages a second, not one per batch."""

    def __init__(self, q):
        self.q, self.documents, self.bytes, self.tokens, self.last = q, 0, 0, 0, time.monotonic()

    def __call__(self, documents: int, nbytes: int, tokens: int = 0) -> None:
        self.documents += documents
        self.bytes += nbytes
        self.tokens += tokens
        if time.monotonic() - self.last > 0.25:
            self.flush()

    def flush(self) -> None:
        if self.documents or self.bytes or self.tokens:
            self.q.put((self.documents, self.bytes, self.tokens))
        self.documents = self.bytes = self.tokens = 0
        self.last = time.monotonic()


def _call(fn: Callable, args: tuple):
    reporter = _QueueReporter(_progress_queue)
    try:
        return fn(*args, progress=reporter)
    finally:
        reporter.flush()


class LocalExecutor:
    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        self._progress_queue = None

    def run(self, tasks: Sequence[Task], bar: ProgressBar) -> list[Any]:
        """Run every task; return results in task order. The first failure stops the rest."""
        if self.workers == 1 or len(tasks) <= 1:
            results = []
            for fn, args in tasks:
                results.append(fn(*args, progress=bar.update))
                bar.unit_done()
            return results
        pool = self._started()
        futures = {}
        try:
            futures = {pool.submit(_call, fn, args): i for i, (fn, args) in enumerate(tasks)}
            results: list[Any] = [None] * len(tasks)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(self._progress_queue, bar)
                for future in done:
                    results[futures[future]] = future.result()  # re-raises a worker's error
                    bar.unit_done()
            _drain(self._progress_queue, bar)
            return results
        except BaseException:
            for future in futures:
                future.cancel()
            self.close(terminate=True)
            raise

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._progress_queue = context.Queue()
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=_init_worker,
                initargs=(self._progress_queue,),
            )
        return self._pool

    def close(self, terminate: bool = False) -> None:
        """End the pool (at once, stopping running tasks, with ``terminate``)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if terminate:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown(wait=True)


def _drain(progress_queue, bar: ProgressBar) -> None:
    while True:
        try:
            update = progress_queue.get_nowait()
        except queue.Empty:
            return
        bar.update(*update)
