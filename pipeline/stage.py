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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.util.atomic import temp_path

if TYPE_CHECKING:
    from pipeline.phases import Phases


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


class GlobalStage(Stage):
    """A stage that needs the whole corpus before it can decide (dedup).

    It declares its phases (``pipeline.phases``: map, reduce, finalize rounds, filter, with
    the work-folder files each reads and writes) in ``phases``; the engine runs them and
    derives the rest from the declarations. The filter is the stage's own ``open_unit`` and
    ``process`` over the unit's documents again, after ``bind``. A stage whose phases read
    no documents (decontaminate's index of its benchmarks) declares no map, and filters in
    the chain without a segment of its own.
    """

    # A ``partitions`` option of 0 leaves the count to the run (``phases.sized``); a stage
    # built outside a run (a benchmark, a test) with it unsized gets the count of earlier versions.
    UNSIZED_PARTITIONS: ClassVar[int] = 32

    def phases(self) -> Phases:
        """The phases, as these options declare them (``Phases.whole_run``: whether they
        need them at all)."""
        raise NotImplementedError

    def bind(self, work_dir: Path) -> None:
        """Tell a fresh instance where the earlier phases left their files."""
        self.work_dir = Path(work_dir)

    def partitions(self) -> int:
        """The ``partitions`` option as the run sized it; 1 without one."""
        return int(getattr(self.options, "partitions", 1)) or self.UNSIZED_PARTITIONS


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
