"""Compiling a run's numba kernels once per machine, before its first unit, with every
worker compiling a different part: the steps the kernels' modules declare
(``pipeline/compile/warm_steps.py``) for each stage of the config and each source it sees,
in the order ``warm_steps.plan`` gives, as tasks on the run's executor.

Without it each worker compiles every kernel it meets on its own: on a cold cache, two
workers spent the same 40 CPU-seconds side by side, and a cluster's every process does.
As executor tasks the steps spread over the workers (locally, or on Ray's nodes, which
share what they compiled when ``NUMBA_CACHE_DIR`` points at a shared folder; see the
README). Besides the stages' steps every run takes the engine's own kernels
(``engine_kernels``) and the bytecode of prep's own modules (``compile/bytecode.py``).
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.compile import bytecode  # noqa: F401  (declares its step: every run writes prep's bytecode)
from pipeline.compile.warm_marks import all_marked, mark, mark_names
from pipeline.compile.warm_steps import EVERY_RUN, Step, plan, steps_for, warms
from pipeline.engine.config import Config
from pipeline.engine.plan import Unit
from pipeline.engine.progress import ProgressBar
from pipeline.engine.stage_registry import registry
from pipeline.kernels.hashing import id_hashes
from pipeline.readers.nesting import too_deep_lines


@warms(EVERY_RUN, seconds=1.0)
def engine_kernels() -> None:
    """The kernels every unit runs whatever its stages: the JSON readers' nesting scan,
    and the hash of the ids a unit reads (for the duplicate-id check). Without the
    latter here, each worker compiled it during its first unit, on the run's path."""
    too_deep_lines(b'{"text": "a page", "meta": {"tags": ["x"]}}\n' * 2)
    id_hashes(pa.array(["an id"]))


def warmup_plan(
    config: Config, units: list[Unit], sizes: dict[tuple[str, str], float] | None = None
) -> tuple[list[Step], list[list[int]]]:
    """The steps of every stage for every source it sees, ordered (``warm_steps.plan``).
    ``sizes``: the bytes each (source, unit) holds, when known. A stage's steps are
    declared once the registry has imported its modules; a config without stages imports
    none of them."""
    sources = sorted({unit.source for unit in units})
    source_bytes = {source: 0.0 for source in sources}
    for (source, _), size in (sizes or {}).items():
        source_bytes[source] = source_bytes.get(source, 0.0) + size
    uses = [steps_for(EVERY_RUN, None, "", 0.0)]
    for stage in config.stages:
        cls = registry()[stage.name]
        for source in filter(stage.applies_to, sources):
            options = cls.Options(**{**stage.options, **stage.per_source.get(source, {})})
            uses.append(steps_for(stage.name, options, source, source_bytes[source]))
    return plan(uses)


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
