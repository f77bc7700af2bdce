"""The models a ``classify`` stage names, and scoring documents with one of them.

A model's entry in the config is checked here, before any work starts: its keys, its
name (a column and a ledger reason are made of it), its thresholds, and its file (a
missing file or one without fastText's header is one line, ``file_labels``), and its
label, against the labels in the model's dictionary (read without loading the model).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.formats import fasttext_model
from pipeline.util.suggest import nearest_hint

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
REQUIRED_KEYS = ("name", "path", "label")
KEYS = (*REQUIRED_KEYS, "min_score", "keep_top")


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the column is ``<name>_score``, the drop reason ``classify:<name>``
    path: str  # absolute, resolved against the working directory
    label: str  # the label whose probability is the score (without ``__label__``)
    min_score: float | None = None  # drop below this score ...
    keep_top: float | None = None  # ... or keep this fraction of each source, best first

    @property
    def column(self) -> str:
        return f"{self.name}_score"

    @property
    def reason(self) -> str:
        return f"classify:{self.name}"


def parse_models(tables: list[dict[str, Any]]) -> tuple[ModelSpec, ...]:
    """The ``[[stages.models]]`` tables as specs; ValueError (one line) on any mistake."""
    if not tables:
        raise ValueError("classify needs at least one model: [[stages.models]] with name, path and label")
    specs = tuple(_parse(table, i) for i, table in enumerate(tables))
    names = [spec.name for spec in specs]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"two models are named {name!r} (each names a column: give them different names)")
    return specs


def _parse(table: dict[str, Any], index: int) -> ModelSpec:
    if not isinstance(table, dict):
        raise ValueError(f"models[{index}] must be a table with name, path and label")
    where = f"models[{index}]" + (f" ({table['name']!r})" if isinstance(table.get("name"), str) else "")
    for key in table:
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r} in {where}{nearest_hint(key, KEYS)} (valid: {', '.join(KEYS)})")
    for key in REQUIRED_KEYS:
        if not isinstance(table.get(key), str) or not table[key]:
            raise ValueError(f"{where}: {key} must be a non-empty string")
    name = table["name"]
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{where}: name must be a letter then letters, digits or '_' (it names a column)")
    label = table["label"].removeprefix(fasttext_model.LABEL_PREFIX)
    thresholds = {}
    for key in ("min_score", "keep_top"):
        value = table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}: {key} must be a number, not {value!r}")
        thresholds[key] = None if value is None else float(value)
    min_score, keep_top = thresholds["min_score"], thresholds["keep_top"]
    if min_score is not None and keep_top is not None:
        raise ValueError(f"{where}: set min_score or keep_top, not both")
    if min_score is not None and not 0.0 <= min_score <= 1.0:
        raise ValueError(f"{where}: min_score must lie in [0, 1]")
    if keep_top is not None and not 0.0 < keep_top <= 1.0:
        raise ValueError(f"{where}: keep_top must lie in (0, 1] (a fraction of each source's documents)")
    path = Path(table["path"]).resolve()
    try:
        known = fasttext_model.file_labels(path)
    except fasttext_model.ModelError as error:
        raise ValueError(f"{where}: {error}") from None
    if label not in known:
        raise ValueError(f"{where}: label: {_no_label(path, label, known)}")
    return ModelSpec(name=name, path=str(path), label=label, min_score=min_score, keep_top=keep_top)


@functools.lru_cache(maxsize=16)
def load(path: str, label: str):
    """The model at ``path`` (loaded once per process), checked to have ``label``."""
    model = fasttext_model.load(path)
    known = fasttext_model.labels(model)
    if label not in known:  # the file was replaced since the config was read
        raise fasttext_model.ModelError(_no_label(path, label, known))
    return model


def _no_label(path: str | Path, label: str, known: list[str] | tuple[str, ...]) -> str:
    shown = ", ".join(known[:12]) + (f", ... ({len(known)} labels)" if len(known) > 12 else "")
    return f"model {path} has no label {label!r}{nearest_hint(label, known)}; its labels: {shown}"


def score(spec: ModelSpec, texts: pa.Array) -> np.ndarray:
    """float32 probability of ``spec.label`` for each text, as fastText reports it, capped
    at 1 (fastText adds 1e-5). A label fastText leaves out of its answer scores 0, and so
    does a text left empty by the preprocessing: there is nothing to classify."""
    try:
        model = load(spec.path, spec.label)
    except fasttext_model.ModelError as error:
        raise fasttext_model.ModelError(f"classify model {spec.name!r}: {error}") from None
    lines = [fasttext_model.preprocess(text) for text in texts.to_pylist()]
    rows = [i for i, line in enumerate(lines) if line]
    scores = np.zeros(len(lines), np.float32)
    if not rows:
        return scores
    wanted = fasttext_model.LABEL_PREFIX + spec.label
    try:
        labels, probabilities = model.predict([lines[i] for i in rows], k=-1)
    except RuntimeError as error:  # fastText's "Encountered NaN.": weights that are not numbers
        raise fasttext_model.ModelError(
            f"classify model {spec.name!r}: {spec.path} is damaged: fastText cannot score with it ({error})"
        ) from None
    for row, found, probability in zip(rows, labels, probabilities):
        try:
            scores[row] = probability[found.index(wanted)]
        except ValueError:  # not among the labels fastText returned
            pass
    return np.minimum(scores, np.float32(1.0))
