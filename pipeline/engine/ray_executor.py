"""The Ray executor: the same tasks as the local executor, run as Ray tasks on a cluster.

Only ``prep run --executor ray`` imports this module, and only it imports ray (an extra:
``pip install -e ".[ray]"``). Tasks are the module-level (function, args) pairs the
runner builds, so stages never know which executor runs them; each unit's outputs are
committed by rename with a marker, so a task run again rewrites the same bytes. Input and
output paths must be visible to every node: a shared file system, or an object store
(``s3://``, see ``pipeline.engine.storage``).

A task whose worker or node is lost (killed, out of memory, the machine gone) is run
again by the driver, not by Ray's own ``max_retries``: Ray's retries are invisible to
the run, and the run's summary says what was retried (``retried``, by phase). Nothing
of a run lives only on one worker node: the progress actor sits on the driver's node,
and results are small values the driver holds, so losing any other node loses only
the tasks it was running.
"""

from __future__ import annotations

import contextlib
import signal
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pipeline.engine.executor import Task
from pipeline.engine.progress import ProgressBar
from pipeline.engine.retry import take_retries
from pipeline.util.extras import require

RETRIES = 3  # runs of a task after its first, when its worker or node is lost


def _run_task(fn, args, reporter):
    def progress(documents: int, nbytes: int, tokens: int = 0) -> None:
        reporter.add.remote(documents, nbytes, tokens)

    value = fn(*args, progress=progress)
    if retried := take_retries():  # in the actor before the result is: the driver's take sees them
        import ray  # loaded already: this runs in a Ray worker

        ray.get(reporter.add_store_retries.remote(retried))
    return value


def _init_keeping_sigterm(ray, options: dict[str, Any]) -> None:
    """``ray.init``, then prep's SIGTERM handler back: the driver's ``ray.init`` sets its
    own (``sys.exit(15)``), so a SIGTERM (``kill``, Slurm at a job's time limit) ended the
    run by exit code 15 with a C stack dump instead of prep's one line and 143. A SIGTERM
    during ``ray.init`` itself still meets Ray's; what was finished is kept either way."""
    previous = signal.getsignal(signal.SIGTERM)
    ray.init(**options)
    if callable(previous) and signal.getsignal(signal.SIGTERM) is not previous:
        signal.signal(signal.SIGTERM, _Raised.recording(previous))


class _Raised:
    """What prep's SIGTERM handler raised. One that comes while the driver waits in Ray's
    C++ code (``ray.wait``, ``ray.get``: nearly all of a run) leaves Ray as a plain
    ``KeyboardInterrupt``, and the SIGTERM read as a Ctrl-C (130, "interrupted")."""

    stop: BaseException | None = None

    @classmethod
    def recording(cls, handler):
        def record(signum, frame):
            try:
                handler(signum, frame)
            except BaseException as stop:
                cls.stop = stop
                raise

        return record

    @classmethod
    @contextlib.contextmanager
    def kept(cls):
        """Raises the handler's own exception in place of the ``KeyboardInterrupt`` Ray made of it."""
        try:
            yield
        except KeyboardInterrupt as stop:
            if type(stop) is KeyboardInterrupt and cls.stop is not None:
                raise cls.stop from None
            raise


class RayExecutor:
    # Workers on other nodes may have other numba caches than the driver's.
    same_machine = False

    def __init__(self, address: str | None, workers: int | None):
        require("--executor ray", "ray", "ray")
        import ray

        self.ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
            if address:
                options["address"] = address
            elif workers:
                options["num_cpus"] = workers
            _init_keeping_sigterm(ray, options)
        self._remote = ray.remote(max_retries=0)(_run_task)  # run again here, counted (``_Phase``)
        # On the driver's node: placed anywhere, the actor died with its node and every
        # phase after that failed on its first progress call.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self._reporter_cls = ray.remote(num_cpus=0, scheduling_strategy=here)(_Reporter)
        self._reporter = None  # one actor for the whole run: each one costs a worker process
        self.retried: Counter[str] = Counter()  # tasks run again, by phase (the progress bar's label)
        self.store_retries: Counter[str] = Counter()  # the tasks' (``retry``), by kind, as of the last ``run``

    def run(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None = None) -> list[Any]:
        """As ``LocalExecutor.run``: results in task order; task i starts after the tasks ``after[i]``."""
        with _Raised.kept():
            return self._run(tasks, bar, after)

    def _run(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None) -> list[Any]:
        ray = self.ray
        if not tasks:
            return []
        if self._reporter is None:
            self._reporter = self._reporter_cls.remote()
        reporter = self._reporter
        ray.get(reporter.take.remote())  # what a failed earlier phase left
        phase = _Phase(ray, self._remote, tasks, after, reporter)
        try:
            while phase.pending:
                done, phase.pending = ray.wait(phase.pending, num_returns=1, timeout=0.5)
                bar.update(*ray.get(reporter.take.remote()))
                for ref in done:
                    if phase.collect(ref):
                        bar.unit_done()
                    else:
                        self.retried[bar.label] += 1
        except BaseException as error:
            # A stop ends this process, and with its driver Ray ends the run's tasks; a
            # forced cancel racing a task's reply aborted the driver (Ray's "Tried to
            # complete task that was not pending") before prep's line.
            for ref in phase.pending if not isinstance(error, KeyboardInterrupt) else ():
                ray.cancel(ref, force=True)
            cause = getattr(error, "cause", None)  # a task's own error, without Ray's wrapping
            if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, Exception):
                raise cause from None
            raise
        self.store_retries.update(ray.get(reporter.take_store_retries.remote()))
        return phase.results

    def close(self) -> None:
        reporter, self._reporter = self._reporter, None
        if reporter is not None:
            self.ray.kill(reporter)


def _lost_errors(ray) -> tuple[type[Exception], ...]:
    """How a task that never answered shows in the driver: its worker died (killed, or by
    Ray's out-of-memory killer), its node died, or its result was lost with a node."""
    e = ray.exceptions
    return (e.WorkerCrashedError, e.NodeDiedError, e.OutOfMemoryError, e.ObjectLostError)


class _Phase:
    """One ``run``'s tasks: submits each once the tasks it waits for (``after``) have
    finished, takes their results, and submits a lost task again (at most ``RETRIES``
    times). Holding a task back here, rather than handing Ray the refs of the tasks it
    waits for, keeps a loss to one task: a lost task's ref fails every task given it."""

    def __init__(self, ray, remote, tasks: Sequence[Task], after: Sequence[Sequence[int]] | None, reporter):
        self.ray, self.remote, self.tasks, self.reporter = ray, remote, tasks, reporter
        self.lost = _lost_errors(ray)
        self.after = after or [()] * len(tasks)
        self.results: list[Any] = [None] * len(tasks)
        self.finished = [False] * len(tasks)
        self.runs = [0] * len(tasks)
        self.index: dict = {}  # a submitted ref -> its task
        self.pending: list = []
        self.waiting = [i for i in range(len(tasks)) if self.after[i]]  # in task order
        for i in range(len(tasks)):
            if not self.after[i]:
                self.submit(i)

    def submit(self, i: int) -> None:
        fn, args = self.tasks[i]
        ref = self.remote.remote(fn, args, self.reporter)
        self.index[ref] = i
        self.runs[i] += 1
        self.pending.append(ref)

    def collect(self, ref) -> bool:
        """Take a finished task's result (True), or submit it again if it was lost (False).
        A task's own error, or one lost more than ``RETRIES`` times, is raised."""
        i = self.index.pop(ref)
        try:
            self.results[i] = self.ray.get(ref)  # re-raises the task's error
        except self.lost:
            if self.runs[i] > RETRIES:
                raise
            self.submit(i)
            return False
        self.finished[i] = True
        if self.waiting:
            self._submit_ready()
        return True

    def _submit_ready(self) -> None:
        still = []
        for i in self.waiting:
            if all(self.finished[j] for j in self.after[i]):
                self.submit(i)
            else:
                still.append(i)
        self.waiting = still


class _Reporter:
    """A tiny actor that adds up progress from tasks; the driver takes it in turns."""

    def __init__(self) -> None:
        self.documents = self.bytes = self.tokens = 0
        self.store_retries: dict[str, int] = {}

    def add(self, documents: int, nbytes: int, tokens: int) -> None:
        self.documents += documents
        self.bytes += nbytes
        self.tokens += tokens

    def take(self) -> tuple[int, int, int]:
        taken = (self.documents, self.bytes, self.tokens)
        self.documents = self.bytes = self.tokens = 0
        return taken

    def add_store_retries(self, retried: dict[str, int]) -> None:
        for kind, n in retried.items():
            self.store_retries[kind] = self.store_retries.get(kind, 0) + n

    def take_store_retries(self) -> dict[str, int]:
        taken, self.store_retries = self.store_retries, {}
        return taken
