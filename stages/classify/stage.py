"""The ``classify`` global stage: score, find each source's keep_top thresholds, filter."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import ID, TEXT, set_column
from pipeline.formats.work_files import OneFile, PerUnit
from pipeline.kernels.hashing import id_hashes
from pipeline.phases import Filter, Finalize, Map, Phases
from pipeline.stage import GlobalStage, StageOutput, UnitContext, register
from pipeline.util.atomic import write_json_atomic
from stages.classify import topk
from stages.classify.models import ModelSpec, parse_models, score

HASH = "id_hash"
META = b"classify"  # schema metadata of a scores file: the keep_top of each model
# The work folder's files: each unit's scores (the map's), each source's cut (finalize's).
SCORES = PerUnit("scores", ".arrow")
THRESHOLDS = OneFile("thresholds.json")


@register
class Classify(GlobalStage):
    name = "classify"

    @dataclass
    class Options:
        # One table per fastText model: name, path, label, and min_score or keep_top
        # (see stages/classify/__init__.py).
        models: list[dict[str, Any]] = field(default_factory=list)
        # Documents of these sources pass unscored (null score columns) and undropped.
        skip_sources: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            self.specs: tuple[ModelSpec, ...] = parse_models(self.models)

    def __init__(self, options: Classify.Options):
        super().__init__(options)
        self.specs = options.specs
        self.work_dir: Path | None = None
        self._unit: dict | None = None

    @classmethod
    def added_columns(cls, options: Classify.Options) -> tuple[str, ...]:
        return tuple(spec.column for spec in options.specs)

    @classmethod
    def files(cls, options: Classify.Options) -> list[str]:
        return [spec.path for spec in options.specs]

    def phases(self) -> Phases:
        """Only a keep_top model needs the whole run; min_score alone scores in ``process``.
        No reduce: finalize reads the scores of every unit itself."""
        return Phases(
            map=Map(self.map_unit, writes=(SCORES,)),
            finalize=Finalize.once(self.finalize, reads=(SCORES,)),
            filter=Filter(reads=(THRESHOLDS, SCORES)),
            kept=(THRESHOLDS,),  # each source's cut, a few hundred bytes: the score files go
            whole_run=any(spec.keep_top is not None for spec in self.specs),
        )

    # -- map: score every document once ---------------------------------------------------

    def map_unit(self, batches: Iterable[pa.RecordBatch], unit: UnitContext, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        if unit.source in self.options.skip_sources:
            return {}
        meta = json.dumps({spec.name: spec.keep_top for spec in self.specs})
        schema = pa.schema(
            [pa.field(HASH, pa.uint64())] + [pa.field(_field(spec.name), pa.float32()) for spec in self.specs],
            metadata={META: meta.encode()},
        )
        final = SCORES.path(work_dir, unit.source, unit.unit)
        rows = 0
        with pa.OSFile(str(unit.atomic(final)), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                columns = [pa.array(id_hashes(batch.column(ID)), pa.uint64())]
                columns += [pa.array(score(spec, batch.column(TEXT)), pa.float32()) for spec in self.specs]
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
                rows += batch.num_rows
        return {"classify.scored": rows}

    # -- finalize: the keep_top threshold of each (source, model) -------------------------

    def finalize(self, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        thresholds: dict[str, dict[str, dict]] = {}
        counters: dict[str, int] = {}
        scored = SCORES.found(work_dir)
        for source in sorted({source for source, _ in scored}):
            units = [unit for s, unit in scored if s == source]
            files = [SCORES.path(work_dir, source, unit) for unit in units]
            keep_top = json.loads(_read(files[0]).schema.metadata[META])
            total = sum(_read(f).num_rows for f in files)
            for name, fraction in keep_top.items():
                if fraction is None or total == 0:
                    continue
                keep = math.ceil(Fraction(repr(fraction)) * total)  # the fraction as written, exactly
                found = topk.kth_best(_ranked(files, name), keep, total)
                thresholds.setdefault(source, {})[name] = {
                    "keep_top": fraction,
                    "documents": total,
                    "keep": keep,
                    "score": found.score,
                    "id_hash": found.id_hash,
                    "unit": units[found.unit],
                    "row": found.row,
                }
                for key, value in (("documents", total), ("kept", keep)):
                    counter = f"classify.{name}.keep_top_{key}"
                    counters[counter] = counters.get(counter, 0) + value
        write_json_atomic(THRESHOLDS.path(work_dir), thresholds)  # the same bytes if run again
        return counters

    # -- filter: the scores become columns, the thresholds drop reasons -------------------

    def open_unit(self, unit: UnitContext) -> None:
        self._unit = None
        work_dir = self.work_dir
        if unit.source in self.options.skip_sources or work_dir is None:  # skipped, or run per document
            return
        path = THRESHOLDS.path(work_dir)
        if not path.exists():
            raise RuntimeError(f"classify: finalize has not completed in {work_dir}")
        table = _read(SCORES.path(work_dir, unit.source, unit.unit))
        self._unit = {
            "name": unit.unit,
            "hashes": _column(table, HASH),
            "scores": [_column(table, _field(spec.name)) for spec in self.specs],
            "thresholds": json.loads(path.read_text()).get(unit.source, {}),  # a few lines: read per unit
            "cursor": 0,
        }

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        n = batch.num_rows
        if source in self.options.skip_sources:
            for spec in self.specs:
                batch = set_column(batch, spec.column, pa.nulls(n, pa.float32()))
            return StageOutput(batch=batch, drop_reason=pa.nulls(n, pa.string()))
        state, lo, hi = self._unit, 0, n
        if self.work_dir is None:  # per document (no keep_top model): score here
            scores = [score(spec, batch.column(TEXT)) for spec in self.specs]
        elif state is None:
            raise RuntimeError("classify: process called before open_unit")
        else:  # global: the scores map_unit stored for this unit
            lo, hi = state["cursor"], state["cursor"] + n
            if hi > len(state["hashes"]) or not np.array_equal(state["hashes"][lo:hi], id_hashes(batch.column(ID))):
                raise ValueError("classify: documents differ from those scored in map_unit (order or content)")
            state["cursor"] = hi
            scores = [stored[lo:hi] for stored in state["scores"]]
        reason = np.full(n, -1, np.int64)
        detail = np.full(n, None, object)
        for j, spec in enumerate(self.specs):
            batch = set_column(batch, spec.column, pa.array(scores[j], pa.float32()))
            dropped, threshold = self._dropped(spec, scores[j], state, lo, hi)
            for row in np.flatnonzero(dropped & (reason < 0)):
                reason[row] = j
                detail[row] = _detail(scores[j][row], threshold, spec.keep_top)
        drop = pc.take(pa.array([s.reason for s in self.specs], pa.string()), pa.array(reason, mask=reason < 0))
        return StageOutput(batch=batch, drop_reason=drop, detail=pa.array(detail, pa.string()))

    def _dropped(
        self, spec: ModelSpec, scores: np.ndarray, state: dict | None, lo: int, hi: int
    ) -> tuple[np.ndarray, float]:
        """Which rows ``spec`` drops, and the score threshold it held them to."""
        if spec.min_score is not None:
            return scores < np.float32(spec.min_score), spec.min_score
        if spec.keep_top is None:
            return np.zeros(len(scores), bool), 0.0
        if state is None:
            raise RuntimeError(f"classify: model {spec.name!r} has keep_top but the stage was never bound")
        t = state["thresholds"].get(spec.name)
        if t is None:
            raise RuntimeError(f"classify: no keep_top threshold for model {spec.name!r} (finalize incomplete?)")
        unit, threshold = state["name"], topk.Threshold(t["score"], t["id_hash"], -1, t["row"])
        unit_vs = (unit > t["unit"]) - (unit < t["unit"])
        kept = topk.within(topk.order_key(scores), state["hashes"][lo:hi], np.arange(lo, hi), threshold, unit_vs)
        return ~kept, t["score"]

    def close_unit(self, unit: UnitContext) -> dict[str, int]:
        state, self._unit = self._unit, None
        if state is not None and state["cursor"] != len(state["hashes"]):
            scored, seen = len(state["hashes"]), state["cursor"]
            raise ValueError(f"classify: unit {unit.unit} scored {scored} documents, filtered {seen}")
        return {}


def _detail(score: np.float32, threshold: float, keep_top: float | None) -> str:
    value = {"score": _short(score), "threshold": _short(threshold)}
    if keep_top is not None:
        value["keep_top"] = keep_top
    return json.dumps(value)


def _short(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.73, not 0.7300000190734863)."""
    return float(str(np.float32(value)))


def _ranked(files: list[Path], name: str) -> topk.Units:
    """The units of one source as ``kth_best`` reads them, one file at a time, any number of times."""

    def units():
        for path in files:
            table = _read(path)
            yield topk.order_key(_column(table, _field(name))), _column(table, HASH)

    return units


def _field(name: str) -> str:
    """A model's column in a scores file (apart from ``id_hash``, whatever the model's name)."""
    return f"score.{name}"


def _read(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _column(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name)
    if column.num_chunks == 0:
        return np.empty(0, column.type.to_pandas_dtype())
    return column.combine_chunks().to_numpy() if column.num_chunks > 1 else column.chunk(0).to_numpy()
