"""``prep rejects``: the run's ledger of dropped documents, one line each (id, stage,
reason and the detail that says why), without reading Parquet by hand; the command line
over ``pipeline.commands.document_lookup``."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.commands.document_lookup import UnreadableRun, ledger_counts, rejected_rows
from pipeline.commands.show import field_text
from pipeline.util.printable import printable

# The most characters of an id, stage or reason the listing shows (`prep show ID` shows it whole).
CELL_CHARS = 100


@click.command(short_help="List the documents a run dropped: stage, reason and why.")
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--stage", help="Only the drops of this stage (length, langid, quality, dedup, read, ...).")
@click.option("--reason", help="Only the drops for this reason (too-short, lang:low-score, ...).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="List at most this many.")
def rejects(run: Path, stage: str | None, reason: str | None, limit: int) -> None:
    """List the documents RUN dropped: id, stage, reason and detail (the value and the
    threshold that decided, for a rule on a threshold), one line each.

    `prep show RUN ID` prints one of them whole, with its text."""
    try:
        rows = rejected_rows(run, stage=stage, reason=reason, limit=limit + 1)  # one more: are there more?
        if not rows:
            raise click.ClickException(_nothing_matches(run, stage, reason))
    except UnreadableRun as error:  # no run, or a file of it that cannot be read
        raise click.ClickException(str(error)) from None
    more, rows = len(rows) > limit, rows[:limit]
    # Cut as a detail is: one id of a megabyte padded every line of the listing to its width.
    cells = [[field_text(row[name] or "", CELL_CHARS) for name in ("id", "stage", "reason")] for row in rows]
    widths = [max(len(cell[k]) for cell in [["id", "stage", "reason"], *cells]) for k in range(3)]
    click.echo("  ".join(name.ljust(width) for name, width in zip(("id", "stage", "reason"), widths)) + "  detail")
    for cell, row in zip(cells, rows):
        detail = field_text(row["detail"]) if row["detail"] else "-"
        click.echo("  ".join(text.ljust(width) for text, width in zip(cell, widths)) + f"  {detail}")
    if more:
        click.echo(f"(the first {limit:,}; there are more: --limit lists more)")


def _nothing_matches(run: Path, stage: str | None, reason: str | None) -> str:
    """Why the listing is empty, and what the ledger does hold (its reasons when a reason
    was asked for, else its stages)."""
    if stage is None and reason is None:
        return f"{printable(run)} dropped no document (its ledger is empty)"
    asked = [f"{name} '{printable(value)}'" for name, value in (("stage", stage), ("reason", reason)) if value]
    column = "reason" if reason else "stage"
    held = ", ".join(f"{printable(value)} ({count:,})" for value, count in sorted(ledger_counts(run, column).items()))
    return f"no reject of {printable(run)} has {' and '.join(asked)}; its ledger's {column}s: {held or 'none'}"
