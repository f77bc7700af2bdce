"""``prep show``: one document of a run and what happened to it; the command line over
``pipeline.commands.document_lookup``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pipeline.commands.document_lookup import Match, UnreadableRun, find_documents
from pipeline.util.printable import printable


def field_text(value, limit: int = 300) -> str:
    """A field value on one line, cut at ``limit`` characters, safe to print."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    elif isinstance(value, bytes):
        text = repr(value)
    else:
        text = str(value)
    text = text if len(text) <= limit else text[:limit] + f" ... ({len(text):,} chars)"
    return printable(text)


@click.command(short_help="Print one document, kept or dropped, with its signals and text.")
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("doc_id")
@click.option("--chars", type=int, default=2000, show_default=True, help="Show at most this much text (0: all).")
def show(run: Path, doc_id: str, chars: int) -> None:
    """Print document DOC_ID of RUN with its signals, and the stage and rule that dropped it.

    Every document with that id is shown, kept and rejected, each with the file it was
    found in."""
    try:
        matches = find_documents(run, doc_id)
    except UnreadableRun as error:  # a file or folder of the run that cannot be read
        raise click.ClickException(str(error)) from None
    if not matches:
        raise click.ClickException(
            f"no document '{printable(doc_id)}' in {printable(run)}/docs or {printable(run)}/rejects"
        )
    if len(matches) > 1:
        kept = sum(m.kind == "kept" for m in matches)
        click.echo(
            f"{len(matches)} documents have id '{printable(doc_id)}': {kept} kept, {len(matches) - kept} rejected"
        )
    for match in matches:
        if len(matches) > 1:
            click.echo()
        echo_match(doc_id, match, chars)


def echo_match(doc_id: str, match: Match, chars: int) -> None:
    """One document: kept or the stage and rule that dropped it, where it is, its fields and
    its text (cut at ``chars``)."""
    row = dict(match.row)
    text = row.pop("text", None)
    name = printable(doc_id)
    if match.kind == "kept":
        click.echo(f"{name}: kept ({printable(row.get('source'))})")
    else:
        where = f"{printable(row.get('file'))}:{row.get('line')}" if row.get("file") else "?"
        click.echo(
            f"{name}: DROPPED by stage '{printable(row['stage'])}', rule '{printable(row['reason'])}' "
            f"({printable(row.get('source'))}, {where})"
        )
    click.echo(f"  found in: {printable(match.path)}")
    if match.kind == "rejected" and row.get("detail"):
        click.echo(f"  detail: {field_text(row['detail'])}")
    for field, value in row.items():
        if field not in ("id", "stage", "reason", "detail") and value is not None:
            click.echo(f"  {printable(field)}: {field_text(value)}")
    if text is not None:
        shown = text if chars <= 0 else text[:chars]
        click.echo(
            f"--- text ({len(text):,} chars) ---\n{printable(shown, text=True)}"
            + ("\n[...]" if len(shown) < len(text) else "")
        )
