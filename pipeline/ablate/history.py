"""``prep ablate --history``: the ledger as a table, one row per trial, oldest first."""

from __future__ import annotations

from pipeline.util.printable import printable

COLUMNS = ("date", "experiment", "data", "model", "seed", "tokens", "tok/s", "wait", "hours", "status", "final loss")


def _hours(record: dict) -> str:
    if "gpu_hours" in record:
        return f"{record['gpu_hours']:.3g} GPU-h"
    return f"{record.get('core_hours', 0):.3g} core-h"


def _row(record: dict) -> list[str]:
    model = record["model"]
    finals = ", ".join(f"{printable(name)} {loss:.3f}" for name, loss in sorted(record["final"].items()))
    rate = record["tokens_per_s"]
    return [
        record["date"][:19].replace("T", " "),
        record["experiment"],
        printable(record["data"]["name"]),
        f"{model['preset']} {model['params'] / 1e6:.1f}M",
        str(record["seed"]),
        f"{record['tokens']:,}",
        f"{rate:,.0f}" if rate else "-",
        f"{record['data_wait_share']:.1%}",
        _hours(record),
        record["health"]["status"],
        finals or printable(record["health"]["message"]),
    ]


def history_table(records: list[dict]) -> str:
    """Aligned columns; the last (the final losses) is left ragged."""
    rows = [list(COLUMNS), *(_row(record) for record in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)
