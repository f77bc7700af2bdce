"""Compiling dedup's kernels before a run (see ``Stage.warmups``): every phase once, on a
few sample pages in a temporary folder, with the run's options (``verify`` adds kernels).

Map (signatures, band keys), reduce and finalize all run on the workers; a
rehearsal on one worker leaves all of them in numba's cache for the others to load.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from pipeline.formats.documents import ID, SOURCE, TEXT
from pipeline.stage import UnitContext

PAGE = (
    "The committee met on Tuesday to review the plan for the new library and agreed that "
    "the reading rooms should stay open until nine in the evening on weekdays."
)
# An exact copy, a near-duplicate (one word changed) and an unrelated page.
PAGES = [PAGE, PAGE, PAGE.replace("Tuesday", "Monday"), "Rain is expected over the hills tonight, then sun."]


def rehearse(stage_class, options) -> None:
    # Computed signatures: the same kernels as shipped ones (which the sample pages lack).
    stage = stage_class(replace(options, index_from="", partitions=2, signatures=""))
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


rehearse.compile_seconds = 2.5  # CPU-seconds on a cold cache (the engine ranks warm-up steps with it)
