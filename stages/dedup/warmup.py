"""Compiling dedup's kernels before a run (a step declared with ``@warms``): every phase
once, on a few sample pages in a temporary folder, with the run's options (``verify``
adds kernels). The package imports this module, so the step is declared with the stage.

Map (signatures, band keys), reduce and finalize all run on the workers; a
rehearsal on one worker leaves all of them in numba's cache for the others to load.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from pipeline.compile.warm_steps import warms
from pipeline.formats.documents import ID, SOURCE, TEXT
from pipeline.stage import UnitContext
from stages.dedup.stage import Dedup

PAGE = (
    "The committee met on Tuesday to review the plan for the new library and agreed that "
    "the reading rooms should stay open until nine in the evening on weekdays."
)
# An exact copy, a near-duplicate (one word changed) and an unrelated page.
PAGES = [PAGE, PAGE, PAGE.replace("Tuesday", "Monday"), "Rain is expected over the hills tonight, then sun."]


# ``seconds``: CPU-seconds on a cold cache (the engine ranks warm-up steps with it).
@warms(Dedup.name, seconds=2.5, uses=lambda options, source, input_bytes: (options,))
def rehearse(options: Dedup.Options) -> None:
    # Computed signatures: the same kernels as shipped ones (which the sample pages lack).
    stage = Dedup(replace(options, index_from="", partitions=2, signatures=""))
    batch = pa.RecordBatch.from_pydict(
        {ID: [f"warmup-{i}" for i in range(len(PAGES))], TEXT: PAGES, SOURCE: ["warmup"] * len(PAGES)}
    )
    with tempfile.TemporaryDirectory(prefix="prep-warmup-") as folder:
        work = Path(folder)
        unit = UnitContext(out_dir=work / "out", source="warmup", unit="warmup")
        stage.map_unit([batch], unit, work)
        for temporary, final in unit.pending.items():
            os.replace(temporary, final)
        for partition in range(stage.partitions()):
            stage.reduce_partition(partition, work)
        stage.finalize(work)
        stage.open_unit(unit)
        stage.process(batch, "warmup")
        stage.close_unit(unit)
