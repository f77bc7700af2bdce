"""The comparison: which DATA wins on each eval set, and whether it is more than seed noise.

For each eval set, the DATA are ranked by their mean final loss over seeds; the best is
compared with each other. The seed spread of a DATA is the standard deviation of its final
loss across seeds; a difference is measured against the larger spread of the two:

- more than ``CLEAR`` times the spread: a real difference, act on it;
- more than the spread: suggestive, run more seeds;
- within the spread: no difference this ablation can see.

With one seed the spread is unknown, and the verdict says so.
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
    difference: float  # nats per token, loser minus winner (mean over seeds)
    spread: float | None  # the larger seed spread of the two; None with one seed
    seeds: int

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
        head = f"on {self.eval_set}: {self.winner} beats {self.loser} by {self.difference:.3f} nats/token"
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
            f"({self.difference:.3f} nats/token, {spread})"
        )


def final_losses(records: list[dict]) -> dict[str, dict[str, list[float]]]:
    """eval set -> DATA name -> final losses of its healthy trials (one per seed)."""
    table: dict[str, dict[str, list[float]]] = {}
    for record in records:
        if record["health"]["status"] != "ok":
            continue
        for eval_set, loss in record["final"].items():
            table.setdefault(eval_set, {}).setdefault(record["data"]["name"], []).append(loss)
    return table


def compare(records: list[dict]) -> list[Comparison]:
    comparisons = []
    for eval_set, by_data in sorted(final_losses(records).items()):
        if len(by_data) < 2:
            continue
        means = {name: statistics.fmean(losses) for name, losses in by_data.items()}
        ranked = sorted(means, key=means.get)
        best = ranked[0]
        for other in ranked[1:]:
            seeds = min(len(by_data[best]), len(by_data[other]))
            spread = None
            if seeds >= 2:
                spread = max(statistics.stdev(by_data[best]), statistics.stdev(by_data[other]))
            comparisons.append(Comparison(eval_set, best, other, means[other] - means[best], spread, seeds))
    return comparisons


def verdict_lines(records: list[dict]) -> list[str]:
    """The verdict in words, one line per comparison, then the table of mean losses."""
    comparisons = compare(records)
    if not comparisons:
        return ["no comparison: fewer than two DATA finished healthy trials"]
    lines = [comparison.sentence() for comparison in comparisons]
    lines.append("")
    for eval_set, by_data in sorted(final_losses(records).items()):
        cells = []
        for name, losses in sorted(by_data.items()):
            spread = f" ± {statistics.stdev(losses):.3f}" if len(losses) > 1 else ""
            cells.append(f"{name} {statistics.fmean(losses):.3f}{spread}")
        lines.append(f"{eval_set}: " + ", ".join(cells) + " (mean final loss, nats/token)")
    return lines
