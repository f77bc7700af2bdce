"""How good a classifier is on labeled documents: accuracy, per-label precision, recall and
F1, AUC, and a calibration table, from the true labels and the model's probabilities.

Plain numpy, no scikit-learn: the numbers land in the sidecar that ships with a model,
and ``prep classifier eval`` must give the same numbers on the same documents, so every
value is rounded to 6 decimals once, here. An undefined value (precision of a label
never predicted, AUC with one class present) is None, never NaN (JSON has no NaN).

AUC is rank-based (Mann-Whitney U): the chance that a random positive document scores
above a random negative one, ties counting one half, computed with average ranks. For a
model with two labels it is of the positive label's probability; with more, there is
no single score and AUC is None. The calibration table bins that same probability (with
more labels: the top label's probability, against whether the top label was right)
into 10 equal bins: count, mean predicted, and the observed share.
"""

from __future__ import annotations

import numpy as np

from pipeline.formats.fasttext_model import LABEL_PREFIX

BINS = 10
DIGITS = 6


def positive_label(labels: list[str], wanted: str | None = None, recorded: str | None = None) -> str:
    """The label whose probability AUC and calibration are about: ``wanted`` (which must be
    one of ``labels``; a ``__label__`` prefix is dropped, as from the data's labels), else
    the one a sidecar recorded, else ``positive``, else the first in sorted order."""
    if wanted is not None:
        wanted = wanted.removeprefix(LABEL_PREFIX)
        if wanted not in labels:
            raise ValueError(f"--positive-label {wanted!r} is not a label of the model ({', '.join(sorted(labels))})")
        return wanted
    for candidate in (recorded, "positive"):
        if candidate in labels:
            return candidate
    return sorted(labels)[0]


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if n else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], n]
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for the ``positive`` mask; None when either
    class is absent."""
    positive = np.asarray(positive, dtype=bool)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = average_ranks(scores)[positive].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def calibration(predicted: np.ndarray, observed: np.ndarray, bins: int = BINS) -> list[dict]:
    """Per probability bin ``[k/bins, (k+1)/bins)`` (the last one includes 1): how many
    documents, their mean predicted probability, and the share for which it came true."""
    predicted = np.clip(np.asarray(predicted, dtype=np.float64), 0.0, 1.0)
    observed = np.asarray(observed, dtype=bool)
    which = np.minimum((predicted * bins).astype(np.int64), bins - 1)
    table = []
    for k in range(bins):
        mine = which == k
        count = int(mine.sum())
        table.append(
            {
                "low": _round(k / bins),
                "high": _round((k + 1) / bins),
                "count": count,
                "mean_predicted": _round(predicted[mine].mean()) if count else None,
                "observed": _round(observed[mine].mean()) if count else None,
            }
        )
    return table


def classification_metrics(truth: list[str], probabilities: np.ndarray, model_labels: list[str], positive: str) -> dict:
    """Every metric of one evaluation. ``probabilities`` has a column per model label,
    in ``model_labels`` order; the prediction is the most probable label (the first on a tie).
    Labels in ``truth`` the model does not know are counted, and never predicted."""
    truth_array = np.asarray(truth, dtype=object)
    n = len(truth_array)
    if n == 0:
        raise ValueError("no documents to evaluate")
    predicted = np.asarray(model_labels, dtype=object)[np.argmax(probabilities, axis=1)]
    names = sorted(set(model_labels) | set(truth), key=lambda name: (name != positive, name))
    per_label = {name: _label_scores(truth_array == name, predicted == name) for name in names}
    if len(model_labels) == 2 and positive in model_labels:
        score = probabilities[:, model_labels.index(positive)]
        came_true = truth_array == positive
        roc_auc, of = auc(score, came_true), f"P({positive})"
    else:
        score = probabilities.max(axis=1)
        came_true = truth_array == predicted
        roc_auc, of = None, "P(top label)"
    return {
        "documents": n,
        "accuracy": _round(np.mean(truth_array == predicted)),
        "positive_label": positive,
        "auc": _round(roc_auc),
        "labels": per_label,
        "calibration": {"of": of, "bins": calibration(score, came_true)},
    }


def _label_scores(true: np.ndarray, predicted: np.ndarray) -> dict:
    hits = int(np.count_nonzero(true & predicted))
    count, times_predicted = int(true.sum()), int(predicted.sum())
    precision = hits / times_predicted if times_predicted else None
    recall = hits / count if count else None
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "count": count,
        "predicted": times_predicted,
        "precision": _round(precision),
        "recall": _round(recall),
        "f1": _round(f1),
    }


def _round(value) -> float | None:
    return None if value is None else round(float(value), DIGITS)
