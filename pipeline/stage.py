"""The stage contract and the registry that finds stages by the name used in configs.

A per-document stage is a pure function of a batch: ``process`` returns the batch
(possibly with columns added or text rewritten) and, aligned with its rows, a string
array of drop reasons where null means "keep". The runner splits kept from rejected and
writes the rejected rows to the ledger with the stage's name, so a stage never handles
bookkeeping. Stages that write files of their own (tokenize) also implement
``open_unit`` / ``close_unit``; every file they create goes through ``UnitContext.atomic``
so a killed run never leaves a half-written file under its final name.

Options are declared as a dataclass on the stage class (``Options``); the config loader
checks every key against it, so a typo is an error naming the nearest valid key.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.util.atomic import temp_path


@dataclass
class StageOutput:
    batch: pa.RecordBatch
    # One entry per row of ``batch``: null keeps the row, a string drops it for that reason.
    drop_reason: pa.Array | None = None
    # How many kept documents the stage changed (text rewritten, lines removed, ...).
    changed: int = 0
    # Extra counters to add up in the manifest (e.g. {"pii.email": 3}).
    counters: dict[str, int] = field(default_factory=dict)
    # Optional, aligned with rows: detail for the ledger of dropped rows (a survivor id, ...).
    detail: pa.Array | None = None


def threshold_detail(value: pa.Array, threshold: pa.Array, label: pa.Array | None = None) -> pa.Array:
    """The ledger ``detail`` of a threshold rule, aligned with the rows: JSON text
    ``{"value": 12, "threshold": 50}`` (the signal a row had and the bound it failed)
    where ``threshold`` is set, null where it is null (a kept row), with ``"label"`` where
    ``label`` is set (langid's unwanted language). Built by Arrow's string kernels over
    the whole batch, so a stage pays no Python step per document for it.
    The numbers are written as Arrow writes them (the shortest decimal that reads back,
    so a float32 0.73 stays 0.73); a non-finite one (no rule fires on NaN, but a user's
    threshold may be inf) as JSON null, so the text always parses."""
    value_text, threshold_text = (_json_number(array) for array in (value, threshold))
    numbers = pc.binary_join_element_wise('{"value": ', value_text, ', "threshold": ', threshold_text, "")
    plain = pc.binary_join_element_wise(numbers, "}", "")
    if label is None:
        return plain
    # A label is any token of a user's model: json quotes it (the rows that have one only).
    quoted = pa.array([None if text is None else json.dumps(text) for text in label.to_pylist()], pa.string())
    labelled = pc.binary_join_element_wise(numbers, ', "label": ', quoted, "}", "")
    return pc.if_else(pc.is_valid(quoted), labelled, plain)


def _json_number(array: pa.Array) -> pa.Array:
    text = pc.cast(array, pa.string())
    if not pa.types.is_floating(array.type):
        return text
    return pc.if_else(pc.or_kleene(pc.is_finite(array), pc.is_null(array)), text, pa.scalar("null"))


@dataclass
class UnitContext:
    """What a stage may know about the unit of work (one input file of one source)."""

    out_dir: Path
    source: str
    unit: str  # stable name of the unit, unique within the source, safe as a file name
    # Registered by ``atomic``: temporary path -> final path, renamed when the unit commits.
    pending: dict[Path, Path] = field(default_factory=dict)

    def atomic(self, final_path: Path) -> Path:
        """Return a temporary path to write ``final_path`` to; it is renamed at commit."""
        final_path = Path(final_path)
        final_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_path(final_path)
        self.pending[tmp] = final_path
        return tmp


class Stage:
    """Base class of every stage. Subclasses set ``name`` and ``Options`` and implement ``process``."""

    name: ClassVar[str] = ""
    # A terminal stage writes the run's final artefacts (token shards): it must come last,
    # or a later stage could drop documents it has already written.
    terminal: ClassVar[bool] = False
    # Raised when the stage's output for the same input and options changes (a fixed
    # table, a new rule): from 2 up it is part of a run's fingerprint, so a run made before
    # is not resumed with units made after (``engine/run.py``'s ``_fingerprint``).
    version: ClassVar[int] = 1

    @dataclass
    class Options:
        pass

    def __init__(self, options: Any):
        self.options = options

    @classmethod
    def files(cls, options: Any) -> list[str]:
        """Files the stage reads besides the documents (models): their contents are part of
        what makes a run this run, so a model replaced before a resume is never mixed in."""
        return []

    @classmethod
    def added_columns(cls, options: Any) -> tuple[str, ...]:
        """Names of the columns ``process`` adds to the documents under these options
        (``n_chars``, ``lang``, ``<model>_score``, ...). The readers keep an input field of
        one of these names as ``input_<name>``, as they keep an input ``source``, so the
        stage's value never overwrites the input's, nor the input's aborts or fools the
        stage's readers (a string ``n_tokens`` summed). Default: none.
        ``tests/test_input_columns.py`` checks every registered stage's answer against
        what its ``process`` adds."""
        return ()

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        raise NotImplementedError

    def open_unit(self, unit: UnitContext) -> None:
        """Called before the first batch of a unit (only stages that write files need it)."""

    def close_unit(self, unit: UnitContext) -> dict[str, int]:
        """Called after the last batch of a unit; returns counters for the manifest."""
        return {}


@dataclass(frozen=True)
class FinalizeRound:
    """One round of a global stage's finalize: ``tasks`` independent tasks, run in any
    order, in parallel, on any worker; the next round starts when all have finished."""

    name: str  # for the progress bar
    tasks: int
    spec: Any = None  # picklable, handed to every task (which step, which input folder, ...)
    # Globs (relative to the work folder) of the files a task reads; None: all of it.
    reads: tuple[str, ...] | None = None
    # Globs of partitioned record files (``pipeline.formats.partfile``) of which task ``t``
    # reads only partition ``t`` (or the partitions ``slice_ranges[t]`` names, first and
    # last): on an object store it fetches just those byte ranges.
    slices: tuple[str, ...] = ()
    slice_ranges: tuple[tuple[int, int], ...] = ()
    # Work-folder paths no round from this one on needs: removed before it runs.
    drops: tuple[str, ...] = ()
    # Per task, globs of more files it reads whole (task ``t``: ``task_reads[t]``), where
    # tasks read different files (a range's units); empty: every task reads ``reads``.
    task_reads: tuple[tuple[str, ...], ...] = ()

    def for_task(self, task: int) -> FinalizeRound:
        """The round as task ``task`` is sent it: its own files in ``reads``, the other
        tasks' left out (a round of P tasks would otherwise ship P lists to each)."""
        if not self.task_reads:
            return self
        reads = None if self.reads is None else self.reads + self.task_reads[task]
        return dataclasses.replace(self, reads=reads, task_reads=())

    def sliced(self, task: int) -> range:
        """The partitions of the ``slices`` files task ``task`` reads."""
        first, last = self.slice_ranges[task] if self.slice_ranges else (task, task)
        return range(first, last + 1)


def finalize_here(stage: GlobalStage, work_dir: Path) -> dict[str, int]:
    """Every round of ``stage``'s finalize in this process, one task after another: what
    the engine spreads over its workers, for a stage driven by hand (tests, benchmarks,
    kernel rehearsals)."""
    done: list[list[dict[str, int]]] = []
    while isinstance(step := stage.finalize_plan(done), FinalizeRound):
        for rel in step.drops:
            path = Path(work_dir) / rel
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        done.append([stage.finalize_task(step, t, work_dir) for t in range(step.tasks)])
    return step


class GlobalStage(Stage):
    """A stage that needs the whole corpus before it can decide (dedup).

    The runner drives it in phases, each resumable and each unit of work independent:

    1. ``map_unit``: once per unit, over the documents that reached this stage, writing
       whatever it needs (signatures, band keys) under ``work_dir`` through ``unit.atomic``.
    2. ``reduce_partition``: once per partition ``0 <= p < partitions()``, in any order or in
       parallel, writing its results atomically under ``work_dir``.
    3. finalize, after every partition: rounds of independent tasks (``finalize_plan``
       names the next round from what the rounds before returned, ``finalize_task`` is
       one task of it), so no step needs one machine to hold the whole corpus. Every
       task writes atomically and is safe to run again. Default: one round of one task,
       ``finalize`` (merging partition results, for example).
    4. ``bind`` (in whichever process runs the unit), then ``open_unit`` and ``process``
       over the unit's documents again, returning drop reasons (and ``detail``) like any
       per-document stage.
    """

    # A ``partitions`` option of 0 leaves the count to the run (``sized``); a stage built
    # outside a run (a benchmark, a test) with it unsized gets the count of earlier versions.
    UNSIZED_PARTITIONS: ClassVar[int] = 32

    @classmethod
    def sized(cls, options: Any, input_bytes: float) -> dict[str, Any]:
        """Options the size of a run decides, as {name: value}, where the config leaves
        them to the stage. ``input_bytes``: about how much text the sources the stage sees
        hold. The engine asks once, when a run starts, keeps the answer in the run's state
        for its resumes (so an input that grows before a resume changes nothing), and every
        task of the run sees it. Default: a ``partitions`` option left at 0 gets
        ``partitions_for(input_bytes)``."""
        if getattr(options, "partitions", None) == 0:
            return {"partitions": partitions_for(input_bytes)}
        return {}

    @classmethod
    def runs_globally(cls, options: Any) -> bool:
        """Whether these options need the whole-corpus phases. A stage whose options do not
        (``classify`` without ``keep_top``) runs as a per-document stage: never bound, its
        ``process`` does the work alone, and the run saves a pass over the documents."""
        return True

    def bind(self, work_dir: Path) -> None:
        """Tell a fresh instance where the earlier phases left their files."""
        self.work_dir = Path(work_dir)

    def map_unit(self, batches: Iterable[pa.RecordBatch], unit: UnitContext, work_dir: Path) -> dict[str, int]:
        raise NotImplementedError

    def partitions(self) -> int:
        """The ``partitions`` option as the run sized it (see ``sized``); 1 without one."""
        return int(getattr(self.options, "partitions", 1)) or self.UNSIZED_PARTITIONS

    def reduce_partition(self, partition: int, work_dir: Path) -> dict[str, int]:
        raise NotImplementedError

    def finalize(self, work_dir: Path) -> dict[str, int]:
        return {}

    def finalize_plan(self, done: list[list[dict[str, int]]]) -> FinalizeRound | dict[str, int]:
        """The next round of finalize, or, once there is none, the stage's counters.

        ``done[k][t]`` is what task ``t`` of round ``k`` returned. The driver calls this
        between rounds, so it must only plan: decide from ``done`` (no file reads),
        and give the same answer for the same ``done`` (a resumed run replays it)."""
        if not done:
            return FinalizeRound("finalize", 1, reads=self.reads("finalize"))
        return done[0][0]

    def finalize_task(self, round: FinalizeRound, task: int, work_dir: Path) -> dict[str, int]:
        """Task ``task`` of ``round``, in any process; returns what ``finalize_plan`` reads."""
        return self.finalize(work_dir)

    def reads(self, step: str, source: str = "", unit: str = "") -> tuple[str, ...] | None:
        """Globs (relative to the work folder) of the files that ``step`` ("reduce",
        "finalize", or "filter" of the unit ``source``/``unit``) reads. When the work
        folder lives on an object store, a task fetches just these; None: all of it."""
        return None

    def kept(self) -> tuple[str, ...]:
        """Globs (relative to the work folder) of the files worth keeping once the run is
        finished: what a later run may read (an index it imports) or a user looks up (the
        cut the stage chose). The engine removes the rest of the work folder once the
        segment this stage opens is done (``engine.work_disk``). Default: none, the whole
        folder goes."""
        return ()

    def slices(self, step: str) -> tuple[str, ...]:
        """Globs of partitioned record files (``pipeline.formats.partfile``) of which a task
        of ``step`` ("reduce") reads only its own partition: on an object store it fetches
        the header and that partition's byte range rather than the whole file."""
        return ()


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
    to the run (``GlobalStage.sized``): a power of two, one per GiB (a reduce task then
    holds the records of about a GiB of text, tens of MB), at least 2 and at most 8,192.
    A fixed 32 before: a small run's finalize spent most of its time opening 32 x 32
    nearly empty partition files, and a terabyte needed the option set by hand."""
    partitions = 2
    while partitions < MAX_PARTITIONS and partitions * PARTITION_BYTES < input_bytes:
        partitions *= 2
    return partitions


_REGISTRY: dict[str, type[Stage]] = {}


def register(cls: type[Stage]) -> type[Stage]:
    """Class decorator: make a stage available to configs under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two stages are named {cls.name!r}")
    if not dataclasses.is_dataclass(cls.Options):
        raise TypeError(f"{cls.__qualname__}.Options must be a dataclass")
    _REGISTRY[cls.name] = cls
    return cls


def registered() -> dict[str, type[Stage]]:
    """The stages registered so far, by name. The contract knows no stage itself:
    ``pipeline.engine.stage_registry`` loads them (built-in and plug-in) and asks here."""
    return dict(_REGISTRY)
