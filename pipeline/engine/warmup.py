"""Compiling a run's numba kernels once per machine, before its first unit, with every
worker compiling a different part (``Stage.warmups`` says what and in which rounds).

Without it each worker compiles every kernel it meets on its own: on a cold cache, two
workers spent the same 40 CPU-seconds side by side, and a cluster's every process does.
Rounds run one after another; the steps of a round are tasks on the run's executor, so
they spread over the workers (locally, or on Ray's nodes, which share what they compiled
when ``NUMBA_CACHE_DIR`` points at a shared folder; see the README). With a warm cache a
step only loads its kernels: a fraction of a second.

A step may carry ``compile_seconds``, the CPU-seconds it took on a cold cache (measured,
``DEFAULT_SECONDS`` if not): rounds are balanced with it, and a round's workers take its
longest steps first.
"""

from __future__ import annotations

import heapq
import pickle
from collections.abc import Callable

from pipeline.engine.config import Config
from pipeline.engine.plan import Unit
from pipeline.engine.progress import ProgressBar
from pipeline.engine.stage_registry import registry
from pipeline.readers.nesting import too_deep_lines

Step = Callable[[], object]
DEFAULT_SECONDS = 1.0


def reader_kernels() -> None:
    """The JSON readers' nesting scan (the only kernel a reader has)."""
    too_deep_lines(b'{"text": "a page", "meta": {"tags": ["x"]}}\n' * 2)


reader_kernels.compile_seconds = 0.9


def compile_seconds(step: Step) -> float:
    return getattr(getattr(step, "func", step), "compile_seconds", DEFAULT_SECONDS)


def round_seconds(steps: list[Step], workers: int) -> float:
    """How long a round takes when ``workers`` (0: as many as it has steps) take its
    steps longest first, each the next step as soon as it is free."""
    seconds = sorted(map(compile_seconds, steps), reverse=True)
    if not workers or workers >= len(seconds):
        return max(seconds, default=0.0)
    free = [0.0] * workers
    for s in seconds:
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def warmup_rounds(config: Config, units: list[Unit], workers: int = 0) -> list[list[Step]]:
    """Round by round, the distinct steps of every stage for every source it sees.

    The deepest stage's rounds fix how many there are (each waits for the helpers the
    one before compiled). A shorter stage's steps depend on nothing before them, so its
    chain goes where the rounds' estimated total (``round_seconds`` on ``workers``) grows
    least, the latest place on a tie: the deepest stage's last round is one big kernel
    that leaves workers idle to fill. Longest chains are placed first."""
    chains: list[list[list[Step]]] = [[[reader_kernels]]]
    sources = sorted({unit.source for unit in units})
    for stage in config.stages:
        cls = registry()[stage.name]
        for source in filter(stage.applies_to, sources):
            options = cls.Options(**{**stage.options, **stage.per_source.get(source, {})})
            chains.append(cls.warmups(options, source))
    seen: set[bytes] = set()
    distinct = []
    for chain in chains:
        distinct.append([[step for step in steps if _first_time(step, seen)] for steps in chain])
    depth = max(map(len, distinct))
    rounds: list[list[Step]] = [[] for _ in range(depth)]
    for chain in sorted(distinct, key=lambda c: (len(c), sum(map(compile_seconds, _steps(c)))), reverse=True):
        offsets = range(depth - len(chain), -1, -1)
        best = min(offsets, key=lambda o: sum(round_seconds(steps, workers) for steps in _placed(rounds, chain, o)))
        rounds = _placed(rounds, chain, best)
    return [sorted(steps, key=compile_seconds, reverse=True) for steps in rounds if steps]


def _first_time(step: Step, seen: set[bytes]) -> bool:
    key = pickle.dumps(step)
    if key in seen:
        return False
    seen.add(key)
    return True


def _steps(chain: list[list[Step]]) -> list[Step]:
    return [step for steps in chain for step in steps]


def _placed(rounds: list[list[Step]], chain: list[list[Step]], offset: int) -> list[list[Step]]:
    """``rounds`` with ``chain``'s rounds added from round ``offset`` on."""
    return [steps + (chain[r - offset] if 0 <= r - offset < len(chain) else []) for r, steps in enumerate(rounds)]


def warmup_task(step: Step, progress=None) -> None:
    step()


def warm_up(config: Config, units: list[Unit], executor, mode: str) -> None:
    rounds = warmup_rounds(config, units, getattr(executor, "workers", 0))
    bar = ProgressBar("compile kernels", 0, sum(map(len, rounds)), mode=mode, quiet_for=2.0)
    for steps in rounds:
        executor.run([(warmup_task, (step,)) for step in steps], bar)
    bar.close()
