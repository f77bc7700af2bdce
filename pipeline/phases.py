"""A global stage's phases, declared: what each phase runs, and the work-folder files
(``pipeline.formats.work_files``) it reads and writes.

Why: a stage that needs the whole corpus before it decides (dedup) runs as map, shuffle
by key (partition), reduce, finalize rounds and filter. The phases are the stage's; what
happens between them is the engine's: where the work folder lives (``Layout``), which
files a task fetches from an object store (whole, or one partition's byte range), what
is removed between rounds and what stays once the run is done, how many partitions a
run of this size gets, and the numbering of documents every phase after the map shares
(``formats.unit_table``). The engine derives all of it from the declarations below, so a
new global stage is one package that returns its ``Phases`` from ``GlobalStage.phases``,
and no engine change.

The phases, in the order the engine runs them (``pipeline.engine.global_run``), each task
resumable, each writing atomically:

1. ``Map``: once per unit, over the documents that reached the stage, writing its
   ``writes`` (one file per unit each) through ``unit.atomic``.
2. ``Reduce`` (optional): once per partition ``0 <= p < partitions``, in any order.
3. ``Finalize``: rounds of independent tasks (``Round``), each round planned from what
   the rounds before returned; ``Finalize.once`` for a stage with one step.
4. ``Filter``: the stage's own ``open_unit`` / ``process`` over the unit's documents again,
   after ``bind``; it reads ``Filter.reads`` (of a per-unit family, only its unit's file).

A stage whose whole-run work reads no documents (decontaminate's index of its benchmark
files) declares no map (``map = None``): the engine then runs its finalize before the
first segment, once for each set of files its sources' filters read, and its filter runs
in the chain where the config puts it. It cuts no segment, so the chain's segments, and
the ledger files named after them, are those of a chain without it.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.formats.unit_table import UnitTable
from pipeline.formats.work_files import PerUnit, WorkFiles, family_folder

Counters = dict[str, int]


@dataclass(frozen=True)
class Map:
    """Per unit: ``run(batches, unit_context, work_dir)`` writes ``writes`` and returns counters."""

    run: Callable[[Iterable[Any], Any, Path], Counters]
    writes: tuple[PerUnit, ...]


@dataclass(frozen=True)
class Reduce:
    """Per partition: ``run(partition, work_dir)``. ``reads``: files every task reads whole;
    ``slices``: partitioned files (``formats.partfile``) of which task ``p`` reads partition ``p``."""

    run: Callable[[int, Path], Counters]
    partitions: int
    reads: tuple[WorkFiles, ...] = ()
    slices: tuple[WorkFiles, ...] = ()
    writes: tuple[WorkFiles, ...] = ()


@dataclass(frozen=True)
class Round:
    """One round of finalize: ``tasks`` independent tasks, run in any order, in parallel,
    on any worker; the next round starts when all have finished."""

    name: str  # for the progress bar
    tasks: int
    spec: Any = None  # picklable, handed to every task (which step, which input folder, ...)
    reads: tuple[WorkFiles, ...] = ()  # files every task reads whole
    # Partitioned files of which task ``t`` reads only partition ``t`` (or the partitions
    # ``slice_ranges[t]`` names, first and last).
    slices: tuple[WorkFiles, ...] = ()
    slice_ranges: tuple[tuple[int, int], ...] = ()
    drops: tuple[WorkFiles, ...] = ()  # files no round from this one on needs: removed first
    # Where tasks read different units' files: task ``t`` reads ``unit_reads`` of the
    # (source, unit) pairs ``task_units[t]``.
    unit_reads: PerUnit | None = None
    task_units: tuple[tuple[tuple[str, str], ...], ...] = ()

    def for_task(self, task: int) -> Round:
        """The round as task ``task`` is sent it: its own units only (a round of P tasks
        would otherwise ship P lists to each)."""
        if not self.task_units:
            return self
        return dataclasses.replace(self, task_units=(self.task_units[task],))

    def sliced(self, task: int) -> range:
        """The partitions of the ``slices`` files task ``task`` reads."""
        first, last = self.slice_ranges[task] if self.slice_ranges else (task, task)
        return range(first, last + 1)

    def whole_globs(self) -> tuple[str, ...]:
        """Globs (relative to the work folder) of the files a task (as ``for_task`` sent it) reads whole."""
        units = tuple(self.unit_reads.unit_glob(s, u) for task in self.task_units for s, u in task)
        return globs(self.reads) + units


@dataclass(frozen=True)
class Finalize:
    """``plan(done)``: the next round, or once there is none the stage's counters, from
    ``done[k][t]``, what task ``t`` of round ``k`` returned (it only plans: no file reads,
    the same answer for the same ``done``, as a resumed run replays it).
    ``run(round, task, work_dir)``: one task of a round, in any process."""

    plan: Callable[[list[list[Counters]]], Round | Counters]
    run: Callable[[Round, int, Path], Counters]

    @classmethod
    def once(cls, step: Callable[[Path], Counters], reads: tuple[WorkFiles, ...] = ()) -> Finalize:
        """One round of one task, ``step(work_dir)``, whose counters are the stage's."""
        return cls(lambda done: done[0][0] if done else Round("finalize", 1, reads=reads), lambda r, t, w: step(w))


@dataclass(frozen=True)
class Filter:
    """What the filter (the stage's ``open_unit``) reads: a per-unit family's file of its
    own unit only, other families whole."""

    reads: tuple[WorkFiles, ...]

    def globs(self, source: str, unit: str) -> tuple[str, ...]:
        return tuple(f.unit_glob(source, unit) if isinstance(f, PerUnit) else f.glob() for f in self.reads)


@dataclass(frozen=True)
class Numbering:
    """The global numbering of documents (``formats.unit_table``): ``counted``, a
    partitioned map output whose ``count`` is a unit's documents; ``attributes``, the map
    output of one row per document. ``imports``: a work folder whose numbering comes first
    (locked documents), built with the same ``config``, whose partition count this run takes."""

    owner: str
    counted: PerUnit
    attributes: PerUnit
    config: dict
    imports: str = ""

    def table(self, work_dir: Path) -> UnitTable:
        """The numbering of the documents the map committed under ``work_dir``."""
        return UnitTable.scan(work_dir, self.counted, self.attributes, self.config, self.owner, self.imports)

    def saved(self, work_dir: Path) -> UnitTable:
        """The numbering a finalize step saved (``UNITS``), which the filter reads."""
        return UnitTable.load(work_dir, self.owner)


@dataclass(frozen=True)
class Phases:
    map: Map | None  # None: the phases read no documents (see the module's docstring)
    finalize: Finalize
    filter: Filter
    reduce: Reduce | None = None
    numbering: Numbering | None = None
    kept: tuple[WorkFiles, ...] = ()  # what a later run may import (an index): all --keep-work keeps of it
    # False: these options need no whole-run phase (``classify`` without ``keep_top``); the
    # stage then runs per document, never bound, unless another source's options need them.
    whole_run: bool = True


def globs(files: tuple[WorkFiles, ...]) -> tuple[str, ...]:
    return tuple(f.glob() for f in files)


def finalize_here(finalize: Finalize, work_dir: Path) -> Counters:
    """Every round of a finalize in this process, one task after another: what the engine
    spreads over its workers, for a stage driven by hand (tests, benchmarks, rehearsals)."""
    done: list[list[Counters]] = []
    while isinstance(step := finalize.plan(done), Round):
        for files in step.drops:
            path = family_folder(work_dir, files)
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        done.append([finalize.run(step, t, work_dir) for t in range(step.tasks)])
    return step


# -- sizing -----------------------------------------------------------------------------------

PARTITION_BYTES = 1 << 30  # input text per partition when the run chooses
MAX_PARTITIONS = 8192  # the most the run chooses
MAX_SET_PARTITIONS = 1 << 16  # the most a config may set: each unit's files carry an offset per partition


def check_partitions(stage: str, partitions: int) -> None:
    """Refuse a ``partitions`` option outside 0 (the run chooses) .. MAX_SET_PARTITIONS:
    10**11 made every partitioned file's header 800 GB, and the run never came back."""
    if not 0 <= int(partitions) <= MAX_SET_PARTITIONS:
        raise ValueError(
            f"{stage}: partitions must be 1 to {MAX_SET_PARTITIONS:,} (or 0: chosen from the input's size)"
        )


def partitions_for(input_bytes: float) -> int:
    """Partitions for a run over ``input_bytes`` of text when its config leaves the count
    to the run: a power of two, one per GiB (a reduce task then holds the records of about
    a GiB of text, tens of MB), at least 2 and at most 8,192. A fixed 32 before: a small
    run's finalize spent most of its time opening 32 x 32 nearly empty partition files,
    and a terabyte needed the option set by hand."""
    partitions = 2
    while partitions < MAX_PARTITIONS and partitions * PARTITION_BYTES < input_bytes:
        partitions *= 2
    return partitions


def check_import(stage: Any) -> None:
    """The numbering ``stage`` imports (``index_from``) can be read: a new run asks before
    any work, since its reduce would otherwise say so only after the stages before and
    the map had run over the whole input. Raises the ``WorkStateError`` that says why."""
    phases = stage.phases()
    if phases.whole_run and phases.numbering is not None and phases.numbering.imports:
        UnitTable.load(Path(phases.numbering.imports), phases.numbering.owner)


def sized(stage: Any, input_bytes: float) -> dict[str, Any]:
    """Options the size of a run decides, as {name: value}: a ``partitions`` option left
    at 0 gets the imported numbering's count (which this run's must equal), else
    ``partitions_for(input_bytes)``. The engine asks once, when a run starts, and keeps
    the answer for its resumes (an input that grows before a resume changes nothing).
    ``stage``: a ``GlobalStage`` built with the config's options."""
    phases, options = stage.phases(), stage.options
    if not phases.whole_run or getattr(options, "partitions", None) != 0:
        return {}
    numbering = phases.numbering
    if numbering is not None and numbering.imports:
        try:
            partitions = int(UnitTable.load(Path(numbering.imports), numbering.owner).config["partitions"])
        except (OSError, ValueError, KeyError, TypeError):
            partitions = 0  # unreadable: the map phase reports the import
        if partitions > 0:
            return {"partitions": partitions}
    return {"partitions": partitions_for(input_bytes)}
