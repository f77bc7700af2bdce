"""What ``prep mix search`` prints: the trials, the fits' errors, the proposal, the command."""

from __future__ import annotations

from pipeline.mixsearch.search import SearchResult


def result_lines(result: SearchResult) -> list[str]:
    sources, chosen = result.sources, result.chosen
    width = max(8, *(len(name) for name in sources))
    healthy = [i for i, r in enumerate(result.records) if r["health"]["status"] == "ok"]
    head = "".join(f" {name:>{width}}" for name in sources)
    lines = [f"{'trial':<16}{head} {'measured':>9} " + " ".join(f"{fit.name:>16}" for fit in result.fits)]
    for row, (index, record) in enumerate((i, result.records[i]) for i in healthy):
        cells = "".join(f" {share:>{width}.3f}" for share in result.shares[index])
        loo = " ".join(f"{fit.loo_objective[row]:>16.4f}" for fit in result.fits)
        lines.append(f"{record['data']['name']:<16}{cells} {result.objective[row]:>9.4f} {loo}")
    lines.append("(measured: the weighted eval loss in nats/token; the fits' columns: leave-one-out predictions)")
    for fit in result.fits:
        per_set = ", ".join(f"{name} {error:.4f}" for name, error in fit.errors.items())
        lines.append(f"{fit.name}: cross-validated error {fit.error:.4f} on the objective ({per_set})")
    lines.append(f"chosen fit: {chosen.name} (the smaller cross-validated error)")
    for label, row in (("proposal", result.proposal), ("natural", result.natural)):
        cells = ", ".join(f"{name} {share:.3f}" for name, share in zip(sources, row, strict=True))
        lines.append(f"{label}: {cells}; predicted {result.predicted[label]:.4f}")
    lines += result.notes
    if result.verdict is not None:
        lines.append("validation:")
        lines += [f"  {line}" if line else "" for line in result.verdict]
    lines.append(result.command)
    return lines
