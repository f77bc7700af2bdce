"""A fastText model's probabilities for documents, and its metrics on labeled files.

Training (on its held-out split) and ``prep classifier eval`` (on any labeled files) score
the same way, so their numbers agree: the one preprocessing
(``formats.fasttext_model.preprocess``), then every label's probability from
``predict(k=-1)``, a batch of lines at a time, as a matrix with a column per model label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from pipeline.classifier.inputs import ClassifierError, ReadLog, Source, read_documents, skipped_lines
from pipeline.classifier.metrics import classification_metrics, positive_label
from pipeline.formats import fasttext_model
from pipeline.formats.fasttext_model import LABEL_PREFIX, preprocess
from pipeline.util.printable import printable, printable_path

BATCH = 4096  # lines per predict call


def probabilities(model, lines: list[str], model_labels: list[str]) -> np.ndarray:
    """P(label | line) for each line (preprocessed) and model label, clipped to [0, 1]
    (fastText adds 1e-5 inside its log, so a sure prediction reads 1.00001)."""
    column = {LABEL_PREFIX + label: i for i, label in enumerate(model_labels)}
    out = np.zeros((len(lines), len(model_labels)), dtype=np.float64)
    if not lines:
        return out
    predicted_labels, predicted_probs = model.predict(lines, k=-1, threshold=0.0)
    for row, (names, probs) in enumerate(zip(predicted_labels, predicted_probs)):
        for name, prob in zip(names, probs):
            out[row, column[name]] = prob
    return np.clip(out, 0.0, 1.0)


def score_lines(model, items: Iterable[tuple[str, str]]) -> tuple[list[str], np.ndarray]:
    """(true labels, probability matrix) of ``(label, preprocessed line)`` pairs."""
    model_labels = fasttext_model.labels(model)
    truth: list[str] = []
    parts = [np.zeros((0, len(model_labels)))]
    for batch in _batches(items, BATCH):
        truth.extend(label for label, _ in batch)
        parts.append(probabilities(model, [line for _, line in batch], model_labels))
    return truth, np.concatenate(parts)


def evaluate(
    model_path: Path,
    sources: list[Source],
    wanted_positive: str | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict:
    """The metrics of the model at ``model_path`` on labeled ``sources``."""
    model = fasttext_model.load(str(model_path))
    model_labels = fasttext_model.labels(model)
    recorded = (fasttext_model.read_sidecar(model_path) or {}).get("positive_label")
    positive = positive_label(model_labels, wanted_positive, recorded)
    read_log = ReadLog()
    documents = (
        (label, preprocess(text))
        for batch in read_documents(sources, read_log)
        for label, text in zip(batch.labels, batch.texts)
    )
    try:
        truth, probs = score_lines(model, documents)
    except RuntimeError as error:  # fastText's "Encountered NaN.": weights that are not numbers
        raise ClassifierError(
            f"{printable_path(model_path)} is damaged: fastText cannot score with it ({error})"
        ) from None
    if not truth:
        raise ClassifierError("no documents in " + ", ".join(s.origin for s in sources))
    for line in skipped_lines(read_log):
        log(line)
    names = printable(", ".join(model_labels))
    log(f"scored {len(truth):,} documents with {printable_path(model_path)} (labels: {names})")
    return classification_metrics(truth, probs, model_labels, positive)


def _batches(items: Iterable, size: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
