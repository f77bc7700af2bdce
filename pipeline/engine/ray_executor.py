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
            ray.init(**options)
        self._remote = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_run_task)
        self._reporter_cls = ray.remote(num_cpus=0)(_Reporter)
        self._reporter = None  # one actor for the whole run: each one costs a worker process
        self.store_retries: Counter[str] = Counter()  # the tasks' (``retry``), by kind, as of the last ``run``

    def run(self, tasks: Sequence[Task], bar: ProgressBar, after: Sequence[Sequence[int]] | None = None) -> list[Any]:
        """As ``LocalExecutor.run``; a task waits for the tasks in ``after`` by taking their results."""
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
            for ref in pending:
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
