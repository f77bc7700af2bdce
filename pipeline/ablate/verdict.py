"""The comparison: which DATA wins on each eval set, and whether it is more than seed noise.

For each eval set, the DATA are ranked by their mean final loss over seeds; the best is
compared with each other. The seed spread of a DATA is the standard deviation of its final
loss across seeds; a difference is measured against the larger spread of the two:

- more than ``CLEAR`` times the spread: a real difference, act on it;
- more than the spread: suggestive, run more seeds;
- within the spread: no difference this ablation can see.

With one seed the spread is unknown, and the verdict says so.

Each multiple-choice set is compared on its right answers' nats per character, and the
DATA on the weighted objective: each trial's eval losses averaged with the sets' weights
(``--eval FILE:WEIGHT``), over the sets every trial was scored on.

The losses compared are nats per token when every DATA uses one tokenizer. When they do
not, a token is not the same unit from one DATA to another, and the verdict compares bits
per byte of the eval text instead (the same text for every tokenizer: ``evaltexts``), on
the sets made from text, and says so; nats per token are still shown per DATA.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

CLEAR = 2.0


@dataclass
class Comparison:
    eval_set: str
    winner: str
    loser: str
    difference: float  # in ``unit``, loser minus winner (mean over seeds)
    spread: float | None  # the larger seed spread of the two; None with one seed
    seeds: int
    unit: str = "nats/token"

    @property
    def ratio(self) -> float | None:
        if self.spread is None:
            return None
        return float("inf") if self.spread == 0 else self.difference / self.spread

    @property
    def level(self) -> str:
        """``clear``, ``suggestive``, ``noise`` or ``unknown`` (one seed)."""
        ratio = self.ratio
        if ratio is None:
            return "unknown"
        return "clear" if ratio > CLEAR else "suggestive" if ratio > 1 else "noise"

    def sentence(self) -> str:
        head = f"on {self.eval_set}: {self.winner} beats {self.loser} by {self.difference:.3f} {self.unit}"
        if self.level == "unknown":
            return f"{head}; one seed, so the noise is unknown: rerun with --seeds 3 before acting on it"
        times = "more than any" if self.ratio == float("inf") else f"{self.ratio:.1f}x the"
        spread = f"seed spread {self.spread:.3f} over {self.seeds} seeds"
        if self.level == "clear":
            return f"{head}, {times} seed spread ({spread}): a real difference"
        if self.level == "suggestive":
            return f"{head}, {times} seed spread ({spread}): suggestive, not conclusive; run more seeds"
        return (
            f"on {self.eval_set}: {self.winner} and {self.loser} do not differ beyond the noise "
            f"({self.difference:.3f} {self.unit}, {spread})"
        )


UNITS = {"final": "nats/token", "final_bpb": "bits/byte"}


def tokenizers(records: list[dict]) -> list[str]:
    """The tokenizers of the DATA (by vocabulary), in the records' order."""
    seen = {}
    for record in records:
        data = record["data"]
        seen.setdefault(data.get("vocab_sha256", data.get("tokenizer")), data.get("tokenizer"))
    return [str(name) for name in seen.values()]


def measure(records: list[dict]) -> str:
    """The record field the verdict compares: ``final`` (nats/token) or, when the DATA are
    tokenized differently, ``final_bpb`` (bits/byte)."""
    return "final_bpb" if len(tokenizers(records)) > 1 else "final"


def final_losses(records: list[dict], key: str = "final") -> dict[str, dict[str, list[float]]]:
    """eval set -> DATA name -> final losses (``key``) of its healthy trials (one per seed)."""
    table: dict[str, dict[str, list[float]]] = {}
    for record in records:
        if record["health"]["status"] != "ok":
            continue
        for eval_set, loss in record.get(key, {}).items():
            table.setdefault(eval_set, {}).setdefault(record["data"]["name"], []).append(loss)
    return table


def choice_losses(records: list[dict]) -> dict[str, dict[str, list[float]]]:
    """multiple-choice set -> DATA name -> the right answers' nats per character, per seed."""
    table: dict[str, dict[str, list[float]]] = {}
    for record in records:
        if record["health"]["status"] == "ok":
            for eval_set, scores in record.get("final_mc", {}).items():
                table.setdefault(eval_set, {}).setdefault(record["data"]["name"], []).append(
                    scores["answer_nats_per_char"]
                )
    return table


def objective(records: list[dict], weights: dict[str, float]) -> tuple[dict[str, list[float]], list[str]]:
    """DATA name -> the weighted mean of each healthy trial's eval losses (the verdict's unit
    for text sets, nats/char for multiple choice), over the sets of positive weight that
    every trial has; and those sets."""
    key = measure(records)
    healthy = [r for r in records if r["health"]["status"] == "ok"]
    losses = [
        {**r.get(key, {}), **{n: s["answer_nats_per_char"] for n, s in r.get("final_mc", {}).items()}} for r in healthy
    ]
    common = set.intersection(*(set(found) for found in losses)) if losses else set()
    sets = sorted(name for name in common if weights.get(name, 0) > 0)
    total = sum(weights[name] for name in sets)
    table: dict[str, list[float]] = {}
    for record, found in zip(healthy, losses, strict=True):
        if total:
            value = sum(weights[name] * found[name] for name in sets) / total
            table.setdefault(record["data"]["name"], []).append(value)
    return table, sets


def compare(records: list[dict], weights: dict[str, float] | None = None) -> list[Comparison]:
    """Every comparison: per text set, per multiple-choice set, and of the weighted objective."""
    key = measure(records)
    tables = [(name, by_data, UNITS[key]) for name, by_data in sorted(final_losses(records, key).items())]
    tables += [(name, by_data, "nats/char") for name, by_data in sorted(choice_losses(records).items())]
    if weights is not None:
        tables.append(("the weighted objective", objective(records, weights)[0], "(weighted loss)"))
    return [c for name, by_data, unit in tables for c in compare_sets(name, by_data, unit)]


def compare_sets(eval_set: str, by_data: dict[str, list[float]], unit: str) -> list[Comparison]:
    comparisons = []
    if len(by_data) < 2:
        return comparisons
    means = {name: statistics.fmean(losses) for name, losses in by_data.items()}
    ranked = sorted(means, key=means.get)
    best = ranked[0]
    for other in ranked[1:]:
        seeds = min(len(by_data[best]), len(by_data[other]))
        spread = None
        if seeds >= 2:
            spread = max(statistics.stdev(by_data[best]), statistics.stdev(by_data[other]))
        comparisons.append(Comparison(eval_set, best, other, means[other] - means[best], spread, seeds, unit))
    return comparisons


def _cells(by_data: dict[str, list[float]]) -> str:
    cells = []
    for name, losses in sorted(by_data.items()):
        spread = f" ± {statistics.stdev(losses):.3f}" if len(losses) > 1 else ""
        cells.append(f"{name} {statistics.fmean(losses):.3f}{spread}")
    return ", ".join(cells)


def verdict_lines(records: list[dict], weights: dict[str, float] | None = None) -> list[str]:
    """The verdict in words, one line per comparison, then the tables of mean losses."""
    comparisons = compare(records, weights)
    lines = []
    if measure(records) == "final_bpb":
        lines.append(
            f"the DATA are tokenized differently ({', '.join(tokenizers(records))}): compared on bits per byte "
            "of the same eval text, not nats/token"
        )
    if not comparisons:
        return [*lines, "no comparison: fewer than two DATA finished healthy trials"]
    lines += [comparison.sentence() for comparison in comparisons]
    lines.append("")
    for key, unit in UNITS.items():
        for eval_set, by_data in sorted(final_losses(records, key).items()):
            lines.append(f"{eval_set}: {_cells(by_data)} (mean final loss, {unit})")
    for eval_set, by_data in sorted(choice_losses(records).items()):
        accuracy = {}
        for record in records:
            scores = record.get("final_mc", {}).get(eval_set)
            if scores is not None and record["health"]["status"] == "ok":
                accuracy.setdefault(record["data"]["name"], []).append(scores["accuracy"])
        lines.append(f"{eval_set}: {_cells(by_data)} (the right answer's nats/char); accuracy {_cells(accuracy)}")
    if weights is not None:
        table, sets = objective(records, weights)
        if table:
            terms = " + ".join(f"{weights[name]:g} x {name}" for name in sets)
            lines.append(f"objective: {_cells(table)} (weighted mean of {terms})")
    return lines
