"""Compiling a run's numba kernels once per machine, before its first unit, with every
worker compiling a different part (``Stage.warmups`` says what, and which part waits for
which).

Without it each worker compiles every kernel it meets on its own: on a cold cache, two
workers spent the same 40 CPU-seconds side by side, and a cluster's every process does.
The steps are tasks on the run's executor, so they spread over the workers (locally, or
on Ray's nodes, which share what they compiled when ``NUMBA_CACHE_DIR`` points at a shared
folder; see the README). With a warm cache a step only loads its kernels: a fraction of a
second.

A stage gives its steps as rounds, and a step waits only for the rounds before it in its
own stage and source, not for a barrier across all of them: a worker that finishes early
takes the next step that is ready, so no core idles while another compiles a long step.
Which is next is decided by how long the longest chain of steps still waiting behind it
is (list scheduling by critical path), so the chain that ends the warm-up starts first.
A step may carry ``compile_seconds``, the CPU-seconds it took on a cold cache (measured,
``DEFAULT_SECONDS`` if not), for that ranking. Besides the stages' kernels and the
engine's own (``engine_kernels``), one step writes the bytecode of prep's own modules
(``bytecode.py``).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable

import pyarrow as pa

from pipeline.engine.bytecode import compile_bytecode, sources_stamp
from pipeline.engine.config import Config
from pipeline.engine.plan import Unit
from pipeline.engine.progress import ProgressBar
from pipeline.engine.stage_registry import registry
from pipeline.kernels.hashing import id_hashes
from pipeline.kernels.warm_marks import all_marked, mark, mark_names
from pipeline.readers.nesting import too_deep_lines

Step = Callable[[], object]
DEFAULT_SECONDS = 1.0


def engine_kernels() -> None:
    """The kernels every unit runs whatever its stages: the JSON readers' nesting scan,
    and the hash of the ids a unit reads (for the duplicate-id check). Without the
    latter here, each worker compiled it during its first unit, on the run's path."""
    too_deep_lines(b'{"text": "a page", "meta": {"tags": ["x"]}}\n' * 2)
    id_hashes(pa.array(["an id"]))


engine_kernels.compile_seconds = 1.0


def compile_seconds(step: Step) -> float:
    return getattr(getattr(step, "func", step), "compile_seconds", DEFAULT_SECONDS)


def warmup_plan(
    config: Config, units: list[Unit], sizes: dict[tuple[str, str], float] | None = None
) -> tuple[list[Step], list[list[int]]]:
    """The distinct steps of every stage for every source it sees, in the order free
    workers take them, and for each the indices of the steps it waits for (all earlier
    in the list, so the list order is also a valid order for one worker). ``sizes``: the
    bytes each (source, unit) holds, when known.

    Steps are ranked by their critical path: their own seconds plus the longest chain of
    rounds after them. A step two chains share (the same picklable step) runs once and
    gates the rounds after it in both."""
    chains: list[list[list[Step]]] = [[[engine_kernels]], [[functools.partial(compile_bytecode, sources_stamp())]]]
    sources = sorted({unit.source for unit in units})
    source_bytes = {source: 0.0 for source in sources}
    for (source, _), size in (sizes or {}).items():
        source_bytes[source] = source_bytes.get(source, 0.0) + size
    for stage in config.stages:
        cls = registry()[stage.name]
        for source in filter(stage.applies_to, sources):
            options = cls.Options(**{**stage.options, **stage.per_source.get(source, {})})
            chains.append(cls.warmups(options, source, source_bytes[source]))
    steps: list[Step] = []
    waits: list[set[int]] = []
    known: dict[bytes, int] = {}
    for chain in chains:
        indices = [[_add(step, steps, waits, known) for step in round_] for round_ in chain]
        for before, after in zip(indices, indices[1:], strict=False):
            for i in after:
                waits[i].update(before)
    rank = _critical_paths(steps, waits)
    order = sorted(range(len(steps)), key=lambda i: -rank[i])  # stable: ties keep the order added
    position = {i: k for k, i in enumerate(order)}
    return [steps[i] for i in order], [sorted(position[j] for j in waits[i]) for i in order]


def _add(step: Step, steps: list[Step], waits: list[set[int]], known: dict[bytes, int]) -> int:
    """Index of ``step`` among ``steps``, added if new."""
    key = pickle.dumps(step)
    if key not in known:
        known[key] = len(steps)
        steps.append(step)
        waits.append(set())
    return known[key]


def _critical_paths(steps: list[Step], waits: list[set[int]]) -> list[float]:
    """For each step, its seconds plus those of the longest chain of steps waiting on it.
    A step's path is longer than any of its waiters' (seconds are positive), so ordering
    by it never puts a step before one it waits for."""
    waiters: list[list[int]] = [[] for _ in steps]
    for i, before in enumerate(waits):
        for j in before:
            waiters[j].append(i)
    paths: dict[int, float] = {}
    open_: set[int] = set()

    def path(i: int) -> float:
        if i not in paths:
            if i in open_:
                raise ValueError(f"warm-up steps wait for each other in a circle: {steps[i]!r}")
            open_.add(i)
            after = max((path(j) for j in waiters[i]), default=0.0)
            paths[i] = max(compile_seconds(steps[i]), 1e-3) + after
        return paths[i]

    return [path(i) for i in range(len(steps))]


def warmup_task(step: Step, progress=None) -> None:
    step()


def warm_up(config: Config, units: list[Unit], executor, mode: str, sizes: dict[tuple[str, str], float]) -> None:
    """Runs the steps, unless the workers share this machine's numba cache and every step
    has left its mark there (``warm_marks``): then the kernels only need loading, which
    each worker does when it first needs one."""
    steps, after = warmup_plan(config, units, sizes)
    marks = mark_names(steps) if executor.same_machine else []
    if marks and all_marked(marks):
        return
    bar = ProgressBar("compile kernels", 0, len(steps), mode=mode, quiet_for=2.0, eta=False)
    executor.run([(warmup_task, (step,)) for step in steps], bar, after=after)
    bar.close()
    mark(marks)
