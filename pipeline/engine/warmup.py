"""Compiling a run's numba kernels once per machine, before its first unit, with every
worker compiling a different part (``Stage.warmups`` says what and in which rounds).

Without it each worker compiles every kernel it meets on its own: on a cold cache, two
workers spent the same 40 CPU-seconds side by side, and a cluster's every process does.
Rounds run one after another; the steps of a round are tasks on the run's executor, so
they spread over the workers (locally, or on Ray's nodes, which share what they compiled
when ``NUMBA_CACHE_DIR`` points at a shared folder; see the README). With a warm cache a
step only loads its kernels: a fraction of a second.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

from pipeline.engine.config import Config
from pipeline.engine.plan import Unit
from pipeline.engine.progress import ProgressBar
from pipeline.engine.stage_registry import registry
from pipeline.readers.nesting import too_deep_lines

Step = Callable[[], object]


def reader_kernels() -> None:
    """The JSON readers' nesting scan (the only kernel a reader has)."""
    too_deep_lines(b'{"text": "a page", "meta": {"tags": ["x"]}}\n' * 2)


def warmup_rounds(config: Config, units: list[Unit]) -> list[list[Step]]:
    """Round by round, the distinct steps of every stage for every source it sees.

    Stages with fewer rounds than the deepest are aligned to end with it: their steps
    depend on nothing, and the deepest stage's last round (one big kernel that waited for
    its helpers) leaves workers idle that they can fill. Within a round the deeper
    stages' steps come first, as workers take steps in order and those are the longest."""
    chains: list[list[list[Step]]] = [[[reader_kernels]]]
    sources = sorted({unit.source for unit in units})
    for stage in config.stages:
        cls = registry()[stage.name]
        for source in filter(stage.applies_to, sources):
            options = cls.Options(**{**stage.options, **stage.per_source.get(source, {})})
            chains.append(cls.warmups(options, source))
    depth = max(map(len, chains))
    rounds: list[list[Step]] = [[] for _ in range(depth)]
    seen: set[bytes] = set()
    for chain in sorted(chains, key=len, reverse=True):
        for offset, steps in enumerate(chain, start=depth - len(chain)):
            for step in steps:
                key = pickle.dumps(step)
                if key not in seen:
                    seen.add(key)
                    rounds[offset].append(step)
    return [steps for steps in rounds if steps]


def warmup_task(step: Step, progress=None) -> None:
    step()


def warm_up(config: Config, units: list[Unit], executor, mode: str) -> None:
    rounds = warmup_rounds(config, units)
    bar = ProgressBar("compile kernels", 0, sum(map(len, rounds)), mode=mode, quiet_for=2.0)
    for steps in rounds:
        executor.run([(warmup_task, (step,)) for step in steps], bar)
    bar.close()
