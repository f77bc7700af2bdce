"""The Ray executor: the same tasks as the local executor, run as Ray tasks on a cluster.

Only ``prep run --executor ray`` imports this module, and only it imports ray (an extra:
``pip install -e ".[ray]"``). Tasks are the module-level (function, args) pairs the
runner builds, so stages never know which executor runs them; each unit's outputs are
committed by rename with a marker, so a task retried after its worker died (Ray retries
tasks on system failures) rewrites the same bytes. Input and output paths must be
visible to every node: a shared file system, or an object store (``s3://``, see
``pipeline.engine.storage``).
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

RETRIES = 3


def _run_task(fn, args, reporter, *waited_for):
    """``waited_for``: results of the tasks this one waits for; Ray starts a task only
    when the tasks whose results it is given have finished."""

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
        try:
            import ray
        except ImportError:
            raise RuntimeError('--executor ray needs Ray: pip install -e ".[ray]"') from None
        self.ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
            if address:
                options["address"] = address
            elif workers:
                options["num_cpus"] = workers
            _init_keeping_sigterm(ray, options)
        self._remote = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_run_task)
        self._reporter_cls = ray.remote(num_cpus=0)(_Reporter)
        self._reporter = None  # one actor for the whole run: each one costs a worker process
        self.store_retries: Counter[str] = Counter()  # the tasks' (``retry``), by kind, as of the last ``run``

    def run(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None = None) -> list[Any]:
        """As ``LocalExecutor.run``; a task waits for the tasks in ``after`` by taking their results."""
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
        refs: list = []
        for i, (fn, args) in enumerate(tasks):
            refs.append(self._remote.remote(fn, args, reporter, *(refs[j] for j in (after[i] if after else ()))))
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                bar.update(*ray.get(reporter.take.remote()))
                for ref in done:
                    results[index[ref]] = ray.get(ref)  # re-raises the task's error
                    bar.unit_done()
        except BaseException as error:
            # A stop ends this process, and with its driver Ray ends the run's tasks; a
            # forced cancel racing a task's reply aborted the driver (Ray's "Tried to
            # complete task that was not pending") before prep's line.
            for ref in pending if not isinstance(error, KeyboardInterrupt) else ():
                ray.cancel(ref, force=True)
            cause = getattr(error, "cause", None)  # a task's own error, without Ray's wrapping
            if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, Exception):
                raise cause from None
            raise
        self.store_retries.update(ray.get(reporter.take_store_retries.remote()))
        return results

    def close(self) -> None:
        reporter, self._reporter = self._reporter, None
        if reporter is not None:
            self.ray.kill(reporter)


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
