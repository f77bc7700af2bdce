"""Classifier scores per model and source, kept against dropped, with the threshold.

The classify stage adds a float32 column ``<name>_score`` to the documents it keeps and
drops the others with reason ``classify:<name>`` and ledger detail
``{"score": 0.31, "threshold": 0.5}``. Scores lie in [0, 1], so the bins are fixed in
advance (``BINS`` equal ones) and counts are added up batch by batch: kept scores from
the score columns of ``docs/`` (nothing else is read), dropped ones from the ``reason``
and ``detail`` columns of the ledger, parsed in Arrow, not row by row in Python. Memory
holds one batch and the counts, whatever the run's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.layout import Layout
from pipeline.formats.unreadable import reading
from pipeline.report.ledger import present_columns

STAGE = "classify"
REASON_PREFIX = "classify:"
COLUMN_SUFFIX = "_score"
BINS = 50
EDGES = np.linspace(0.0, 1.0, BINS + 1)
BATCH_ROWS = 65_536
MAX_THRESHOLDS = 8  # distinct thresholds kept per chart (one per source is the rule)
# A JSON number after a key of the ledger detail (RE2 syntax, as Arrow runs it).
_NUMBER = r'"{key}":\s*(?P<value>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)'


@dataclass
class Scores:
    """One model's scores in one source: documents per bin of EDGES, and the thresholds."""

    kept: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    thresholds: set[float] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.kept.any() or self.dropped.any())


def column(name: str) -> str:
    return name + COLUMN_SUFFIX


def classifiers(manifest: dict) -> dict[str, dict[str, float | None]]:
    """Each model of the run's classify stages (in config order, then any other a drop
    reason names), with its ``min_score`` per source (None: keep_top or no threshold).
    A source's ``[stages.per_source.<source>]`` models list replaces the stage's."""
    sources = list(manifest["sources"])
    models: dict[str, dict[str, float | None]] = {}
    for stage in (manifest.get("config") or {}).get("stages", []):
        if not isinstance(stage, dict) or stage.get("name") != STAGE:
            continue
        per_source = stage.get("per_source") or {}
        for source in sources:
            tables = (per_source.get(source) or {}).get("models", stage.get("models", []))
            for table in tables if isinstance(tables, list) else []:
                if isinstance(table, dict) and isinstance(table.get("name"), str):
                    models.setdefault(table["name"], {})[source] = table.get("min_score")
    for stage in manifest["stages"].values():
        for reason in stage["rejected"]:
            if reason.startswith(REASON_PREFIX):
                models.setdefault(reason[len(REASON_PREFIX) :], {})
    return models


def bin_counts(values: np.ndarray) -> np.ndarray:
    """Documents per bin of EDGES (NaN skipped; the top bin holds 1.0)."""
    values = np.asarray(values, dtype=np.float64)
    values = np.clip(values[np.isfinite(values)], 0.0, 1.0)
    index = np.minimum((values * BINS).astype(np.int64), BINS - 1)
    return np.bincount(index, minlength=BINS)


def kept_scores(files: list[Path], names: list[str], into: dict[str, Scores]) -> None:
    """Add the score columns of kept-document files (null scores, a skipped source's, left out)."""
    for path in files:
        with reading(path):
            parquet = pq.ParquetFile(path)
            scored = present_columns(parquet.schema_arrow, [column(n) for n in names], numbers=True)
            present = [n for n in names if column(n) in scored]
            if not present:
                continue
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[column(n) for n in present]):
                for name in present:
                    values = batch.column(column(name)).drop_null()
                    into.setdefault(name, Scores()).kept += bin_counts(values.to_numpy(zero_copy_only=False))


def dropped_scores(files: list[Path], into: dict[str, Scores]) -> None:
    """Add the scores and thresholds of ledger rows dropped by a classifier."""
    for path in files:
        with reading(path):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=["reason", "detail"]):
                mask = pc.fill_null(pc.starts_with(batch.column("reason"), REASON_PREFIX), False)
                if not pc.any(mask).as_py():
                    continue
                reasons = pc.filter(batch.column("reason"), mask)
                details = pc.filter(batch.column("detail"), mask)
                scores, thresholds = _number(details, "score"), _number(details, "threshold")
                for reason in pc.unique(reasons).to_pylist():
                    rows = pc.equal(reasons, reason)
                    found = into.setdefault(reason[len(REASON_PREFIX) :], Scores())
                    found.dropped += bin_counts(pc.filter(scores, rows).to_numpy(zero_copy_only=False))
                    for value in pc.unique(pc.filter(thresholds, rows).drop_null()).to_pylist():
                        if len(found.thresholds) < MAX_THRESHOLDS:
                            found.thresholds.add(float(value))


def _number(details: pa.Array, key: str) -> pa.Array:
    """The number under ``key`` of each JSON detail, as float64 (null where it has none)."""
    matched = pc.extract_regex(details, _NUMBER.format(key=key))
    return pc.cast(pc.struct_field(matched, "value"), pa.float64())


def score_histograms(layout: Layout, manifest: dict) -> dict[tuple[str, str], Scores]:
    """(model, source) -> its scores, for every pair with a scored document, kept or
    dropped; models in config order, sources in the manifest's. A model with a min_score
    that dropped nothing in a source still has its threshold marked."""
    models = classifiers(manifest)
    if not models:
        return {}
    found: dict[tuple[str, str], Scores] = {}
    for source in manifest["sources"]:
        per_model: dict[str, Scores] = {}
        kept_scores(layout.doc_files(source), list(models), per_model)
        dropped_scores(layout.reject_files(source), per_model)
        for name in list(models) + sorted(set(per_model) - set(models)):
            scores = per_model.get(name)
            if scores is None or scores.empty:
                continue
            min_score = models.get(name, {}).get(source)
            if not scores.thresholds and isinstance(min_score, (int, float)):
                scores.thresholds.add(float(min_score))
            found[(name, source)] = scores
    order = {name: i for i, name in enumerate(list(models) + sorted({n for n, _ in found} - set(models)))}
    return dict(sorted(found.items(), key=lambda item: order[item[0][0]]))
