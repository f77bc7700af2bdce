"""Metrics as the lines a person reads: a summary, a per-label table, a calibration table.

Kept apart from ``metrics.py`` so that the numbers (what the sidecar and ``--json`` hold)
and their layout change independently; labels come from user data and are escaped.
"""

from __future__ import annotations

from pipeline.util.printable import printable


def metrics_lines(metrics: dict, title: str) -> list[str]:
    """``metrics`` (``metrics.classification_metrics``) as text lines under ``title``."""
    auc = metrics["auc"]
    lines = [
        f"{title}: {metrics['documents']:,} documents, accuracy {_num(metrics['accuracy'])}, "
        + (f"AUC {_num(auc)} of {printable(metrics['calibration']['of'])}" if auc is not None else "AUC n/a")
    ]
    names = [printable(name) for name in metrics["labels"]]
    width = max(8, *(len(name) for name in names))
    lines.append(f"  {'label':<{width}}  precision  recall     f1  count  predicted")
    for name, scores in zip(names, metrics["labels"].values()):
        lines.append(
            f"  {name:<{width}}  {_num(scores['precision']):>9}  {_num(scores['recall']):>6}  "
            f"{_num(scores['f1']):>5}  {scores['count']:>5,}  {scores['predicted']:>9,}"
        )
    calibration = metrics["calibration"]
    lines.append(f"  calibration of {printable(calibration['of'])}:")
    lines.append("  bin        count  mean predicted  observed")
    for row in calibration["bins"]:
        span = f"{row['low']:.1f}-{row['high']:.1f}"
        lines.append(f"  {span:<9}  {row['count']:>5,}  {_num(row['mean_predicted']):>14}  {_num(row['observed']):>8}")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
