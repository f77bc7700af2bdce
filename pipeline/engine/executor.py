"""The local executor: a pool of worker processes on one machine, no service to start.

Tasks are (function, args) pairs of module-level functions, so the same task list could
be handed to another executor. One pool serves every phase of a run (``close`` ends
it): a worker keeps its imports, numba kernels and built stages from phase to phase.

The pool is a few plain processes and two queues rather than ``concurrent.futures``:
stopping it part-way (Ctrl-C, a failed task) must end at once and quietly. Its
management thread raced with terminated workers (``InvalidStateError`` tracebacks after
a clean Ctrl-C) and its queue threads could hang the exit. Here the main process owns
every step: it kills the workers, tells its queues not to wait for data nobody will
read, and raises one exception. A worker that dies (killed, out of memory, a crash in
native code) is noticed within a fraction of a second and named with its task.

Workers are forked from a server process that imported prep once (``worker_imports.py``), which
a run starts as soon as it has read its config, so it imports while the run plans: a worker
is ready in milliseconds instead of about 1.3 CPU-seconds of imports and set-up per
worker per run. Where a platform has no fork server, each worker is a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.engine.progress import ProgressBar
from pipeline.engine.retry import take_retries
from pipeline.util.processes import start_uninterrupted
from pipeline.util.pyarrow_no_pandas import answer_without_pandas

Task = tuple[Callable[..., Any], tuple]

POLL_SECONDS = 0.2
CLOSE_GRACE_SECONDS = 5.0
FEEDER_GRACE_SECONDS = 1.0
PRELOAD = "pipeline.engine.worker_imports"
HAS_FORK_SERVER = "forkserver" in multiprocessing.get_all_start_methods()


class WorkerDied(RuntimeError):
    """A worker process ended without reporting (a signal, or the kernel's OOM killer)."""


class _Reporter:
    """Batches progress updates so a worker sends a few messages a second, not one per batch."""

    def __init__(self, results):
        self.results, self.documents, self.bytes, self.tokens, self.last = results, 0, 0, 0, time.monotonic()

    def __call__(self, documents: int, nbytes: int, tokens: int = 0) -> None:
        self.documents += documents
        self.bytes += nbytes
        self.tokens += tokens
        if time.monotonic() - self.last > 0.25:
            self.flush()

    def flush(self) -> None:
        if self.documents or self.bytes or self.tokens:
            self.results.put(("progress", self.documents, self.bytes, self.tokens))
        self.documents = self.bytes = self.tokens = 0
        self.last = time.monotonic()


def _worker(tasks, results, environment: dict[str, str], doing) -> None:
    """Run tasks until told to stop, then leave without Python's shutdown: tearing down
    the modules and numba's compiled code took a worker about a second, which the run
    waited for at its end. What the worker sent is flushed first; it holds nothing else.
    ``environment`` is the main process's when the pool started (credentials, scratch
    folders), which a worker forked from an older server would not have. It starts with
    SIGINT ignored and blocked (``start_uninterrupted``): ignored it stays, the main process
    stops the workers; the block is lifted, so that what a task starts inherits no block.
    ``doing`` is shared memory holding the index of the task this worker runs (-1 when
    idle): written at once, it outlives a kill, where a queued "started" message could
    still sit unsent in the queue's feeder thread and die with the worker."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.environ.clear()
    os.environ.update(environment)
    while (item := tasks.get()) is not None:
        index, fn, args = item
        doing.value = index
        reporter = _Reporter(results)
        try:
            value = fn(*args, progress=reporter)
        except BaseException as error:  # handed to the main process, raised there
            reporter.flush()
            results.put(("failed", index, _portable(error), traceback.format_exc()))
        else:
            reporter.flush()
            results.put(("done", index, value, take_retries()))  # the task's store retries, by kind
        doing.value = -1
    results.close()
    results.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _portable(error: BaseException) -> BaseException:
    """The error itself if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def start_fork_server(also_preload: Sequence[str] = ()):
    """The multiprocessing context workers start from, its fork server started now if the
    platform has one (it keeps running, idle, for the next run in this process). The
    server imports ``worker_imports.py`` and the modules ``also_preload`` names.

    The server's environment is the one of its start: a worker takes its run's own
    environment from the main process instead (``_worker``). What libraries read from the
    environment when imported (``NUMBA_*`` options) stays the server's."""
    if not HAS_FORK_SERVER:
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD, *also_preload])
    start_uninterrupted(forkserver.ensure_running)
    return context


class LocalExecutor:
    # The workers compile into this machine's numba cache (see ``warm_marks``).
    same_machine = True

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._processes: list = []
        self._doing: list = []  # per worker, shared memory with the index of its task (``_worker``)
        self._tasks = self._results = None
        self.store_retries: Counter[str] = Counter()  # the workers' (``retry``), by kind
        self.retried: Counter[str] = Counter()  # never added to: a worker that dies ends the run (WorkerDied)

    def run(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None = None) -> list[Any]:
        """Run every task; return results in task order. The first failure stops the rest.

        ``after[i]``: the indices of the tasks task i waits for, all below i. Given, a task
        is handed out only when a worker is free, the first ready one in list order, so
        the list order is the priority order; without it every task is queued at once.

        A failed task's error is raised here as it was raised in the worker; its
        traceback there is kept on the error as ``worker_traceback`` (``PREP_DEBUG=1``
        prints it)."""
        if self.workers == 1 or (len(tasks) <= 1 and not self._processes):
            # No pool, or none started for one task; a started pool takes even one: it has
            # the kernels loaded, which here would cost numba's set-up (0.4 s) on first use.
            answer_without_pandas()  # as the pool's workers do
            results = []
            for fn, args in tasks:
                results.append(fn(*args, progress=bar.update))
                bar.unit_done()
            return results
        if any(p.exitcode is not None for p in self._processes):
            # A worker died between phases: it may have held a queue's lock, so start afresh.
            self.close(terminate=True)
        try:
            self._start(min(self.workers, len(tasks)))  # a Ctrl-C held while they started arrives at its end
            return self._collect(tasks, bar, after)
        except BaseException:
            self.close(terminate=True)
            raise

    def _collect(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None) -> list[Any]:
        waiting = [set(a) for a in after] if after is not None else [set() for _ in tasks]
        waiters: dict[int, list[int]] = {}  # task index -> the tasks waiting for it
        for index, before in enumerate(waiting):
            for j in before:
                waiters.setdefault(j, []).append(index)
        limit = len(self._processes) if after is not None else len(tasks)
        unsent = list(range(len(tasks)))
        results: list[Any] = [None] * len(tasks)
        left = len(tasks)
        checked = time.monotonic()
        while left:
            unsent = self._send_ready(tasks, unsent, waiting, limit - (left - len(unsent)))
            if time.monotonic() - checked > POLL_SECONDS:  # even while messages keep coming
                self._check_alive(tasks)
                checked = time.monotonic()
            try:
                message = self._results.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            kind, *rest = message
            if kind == "progress":
                bar.update(*rest)
            elif kind == "done":
                index, value, retried = rest
                results[index] = value
                self.store_retries.update(retried)
                left -= 1
                for waiter in waiters.pop(index, ()):
                    waiting[waiter].discard(index)
                bar.unit_done()
            else:  # failed
                index, error, worker_traceback = rest
                error.worker_traceback = worker_traceback
                raise error
        return results

    def _send_ready(self, tasks: Sequence[Task], unsent: list[int], waiting: list[set[int]], free: int) -> list[int]:
        """Queues up to ``free`` of the unsent tasks that wait for nothing, first ones first;
        returns those still unsent."""
        kept = []
        for index in unsent:
            if free > 0 and not waiting[index]:
                fn, args = tasks[index]
                self._tasks.put((index, fn, args))
                free -= 1
            else:
                kept.append(index)
        return kept

    def _check_alive(self, tasks: Sequence[Task]) -> None:
        for process, doing in zip(self._processes, self._doing):
            if process.exitcode is not None:
                code = process.exitcode
                how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                hint = " (SIGKILL is often the kernel's out-of-memory killer)" if code == -signal.SIGKILL else ""
                task = describe_task(tasks[doing.value]) if 0 <= doing.value < len(tasks) else "no task"
                raise WorkerDied(
                    f"a worker process died with {how}{hint} while running {task}; "
                    "finished units are kept: run the same command again to resume"
                )

    def _start(self, wanted: int) -> None:
        """Have ``wanted`` workers, starting the ones missing: a phase of 2 tasks starts 2,
        however many were asked for (64 idle processes cost seconds and gigabytes), and a
        later phase of more tasks adds to the pool it finds."""
        if len(self._processes) >= wanted:
            return
        context = start_fork_server()
        if self._tasks is None:
            self._tasks, self._results = context.Queue(), context.Queue()
        doing = [context.Value("q", -1, lock=False) for _ in range(len(self._processes), wanted)]
        new = [
            context.Process(
                target=_worker,
                args=(self._tasks, self._results, dict(os.environ), task),
                name=f"prep-worker-{len(self._processes) + i}",
                daemon=True,
            )
            for i, task in enumerate(doing)
        ]
        self._doing += doing
        self._processes += new  # before they start: a SIGTERM raised after the start finds them to stop
        start_uninterrupted(lambda: [process.start() for process in new])

    def close(self, terminate: bool = False) -> None:
        """End the pool: let workers finish and exit, or (``terminate``) kill them now."""
        processes, self._processes, self._doing = self._processes, [], []
        if not processes:
            return
        if not terminate:
            for _ in processes:
                self._tasks.put(None)
            deadline = time.monotonic() + CLOSE_GRACE_SECONDS
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:  # idle workers that did not exit (a dead one may hold a lock)
            if process.exitcode is None:
                process.kill()
            process.join()
        for q in (self._tasks, self._results):
            q.cancel_join_thread()  # never wait at exit to flush data no worker will read
            q.close()
            _let_feeder_finish(q)
        self._tasks = self._results = None


def _let_feeder_finish(q) -> None:
    """Wait a moment for a closed queue's feeder thread to end.

    The feeder holds the last references to the queue's named semaphores, so their
    clean-up (unlink the name, then tell multiprocessing's resource tracker) runs in that
    thread as it ends. A run that exits at once froze it between the two now and then, and
    the tracker printed "leaked semaphore objects" and "No such file" warnings under the
    run's one-line error. A feeder blocked on a pipe no worker reads (workers killed)
    never gets there; the main thread's exit handlers clean up its semaphores instead."""
    feeder = getattr(q, "_thread", None)  # started by the queue's first put, if any
    if feeder is not None:
        feeder.join(FEEDER_GRACE_SECONDS)


def describe_task(task: Task) -> str:
    """A task in words, for messages: the unit (source and file) or partition it works on."""
    fn, args = task
    for arg in args:
        if hasattr(arg, "files_label") and hasattr(arg, "source"):
            return f"{fn.__name__} of {arg.source}/{arg.files_label}"
    return f"{fn.__name__}{tuple(a for a in args if isinstance(a, int))}"
