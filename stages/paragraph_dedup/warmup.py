"""Compiling paragraph_dedup's kernels before a run (a step declared with ``@warms``): the
cut, the short units' rule and the join, as the map and filter phases call them, and the
reduce's first-occurrence scan. Without it each worker compiled them during its first
task of the phase, side by side (the scan: 0.2 s on the run's path, after the warm-up). Every
``unit`` mode and ``min_chars`` takes the same signatures, so the step has no arguments.
The package imports this module, so the step is declared with the stage.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.compile.warm_steps import warms
from stages.paragraph_dedup.split import Units, removed_units
from stages.paragraph_dedup.work import first_document

TEXTS = ["A first paragraph of a page.\nIts second line.\n\nAnother paragraph.\n", "one line"]


# ``seconds``: CPU-seconds on a cold cache (warm-up steps are ranked by it).
@warms("paragraph_dedup", seconds=4.5)
def compile_kernels() -> None:
    units = Units(pa.array(TEXTS, pa.large_string()), "auto", 10)
    units.rebuild(removed_units(units, np.ones(len(units.doc), np.bool_)))
    first_document(np.ones(2, np.uint64), np.arange(2, dtype=np.int64))
