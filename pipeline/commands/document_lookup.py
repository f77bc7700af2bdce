"""Finding a document by id in a run folder, kept (``docs/``) or rejected (``rejects/``),
for ``prep show``, and listing the ledger's rejects, for ``prep rejects``.

Apart from the command so that the search (every match, read with a Parquet filter, and
a folder that cannot be listed never mistaken for an empty one) is library code that
raises an ordinary exception, ``UnreadableRun``, whose message is the line to print.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.layout import Layout
from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import error_line, printable


class UnreadableRun(OSError):
    """A file or folder of the run that cannot be read; the message names it and says why."""


@dataclass
class Match:
    """One document found under the id: kept (``docs/``) or rejected (``rejects/``), the
    Parquet file it is in, and its row."""

    kind: str
    path: Path
    row: dict


def find_documents(run: Path, doc_id: str) -> list[Match]:
    """Every document with ``doc_id``, kept ones first: an id can repeat (two inputs with the
    same ids, or a document kept once and dropped as a duplicate elsewhere), and showing only
    the first would hide the others. Each file skips the row groups whose statistics rule
    the id out (``read_rows``), so little of most files is read."""
    found = []
    layout = Layout(run)
    for kind, folder, columns in (("kept", layout.docs_folder, SHOWN), ("rejected", layout.rejects_folder, LISTED)):
        for path in _listed(folder, run):
            found += [Match(kind, path, row) for row in read_rows(path, doc_id, columns)]
    return found


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet files under ``folder``, sorted; none if it does not exist. A folder that
    cannot be listed raises (``Path.rglob`` would skip it, and ``show`` would then wrongly
    report that the document is not there)."""
    try:
        os.stat(folder)
    except FileNotFoundError:
        return []
    files = []
    for root, _dirs, names in os.walk(folder, onerror=_raise):
        files += [Path(root) / name for name in names if name.endswith(".parquet")]
    return sorted(files)


def _raise(error: OSError) -> None:
    raise error


def read_rows(path: Path, doc_id: str, columns: tuple[str, ...]) -> list[dict]:
    """The rows of ``path`` whose id is ``doc_id``; ``columns`` must be text columns of it.
    A file that cannot be read (permissions, a dangling link, a truncated or foreign file)
    is an ``UnreadableRun`` naming it."""
    try:
        # Checked first: a file of another kind, without a text ``id``, failed inside the
        # filter with Arrow's "No match for FieldRef.Name(id)" or "Function 'equal' has no
        # kernel", and a damaged one with its path repeated in Arrow's message.
        parquet = _checked_file(path, columns)
        rows = []
        for group in range(parquet.metadata.num_row_groups):
            if _may_hold(parquet, group, doc_id):
                for batch in parquet.iter_batches(batch_size=SHOW_BATCH_ROWS, row_groups=[group]):
                    rows += batch.filter(pc.equal(batch.column("id"), doc_id)).to_pylist()
        return rows
    except (OSError, pa.ArrowException) as error:
        raise UnreadableRun(f"cannot read {printable(path)}: {printable(error_line(error))}") from None


# Rows ``read_rows`` holds at a time: a whole row group (``pq.read_table`` with a filter
# reads one, then filters) of a million ledger rows with their text took a gigabyte.
SHOW_BATCH_ROWS = 4096


def _may_hold(parquet: pq.ParquetFile, group: int, doc_id: str) -> bool:
    """Whether row group ``group`` may hold ``doc_id``: False only when the ``id`` column's
    statistics rule it out, so most row groups of most files are never read."""
    meta = parquet.metadata.row_group(group)
    for index in range(meta.num_columns):
        if meta.column(index).path_in_schema == "id":
            stats = meta.column(index).statistics
            if stats is not None and stats.has_min_max and isinstance(stats.min, str):
                return stats.min <= doc_id <= stats.max
    return True


# What ``prep rejects`` shows of a rejected row (the text stays in the file).
LISTED = ("id", "stage", "reason", "detail")
# What ``prep show`` relies on in a kept document's row.
SHOWN = ("id", "text")


def rejected_rows(run: Path, *, stage: str | None, reason: str | None, limit: int) -> list[dict]:
    """The first ``limit`` rows of the run's ledger (files in sorted order) of ``stage``
    and ``reason`` (None: any), with the ``LISTED`` fields only. Read in batches and
    stopped at ``limit``: a ledger can hold millions of rows, a listing shows a few.
    A folder that is no run (neither ``manifest.json`` nor ``rejects/``) is an
    ``UnreadableRun`` that says so, not an empty listing."""
    layout = Layout(run)
    if not layout.manifest.exists() and not layout.rejects_folder.exists():
        raise UnreadableRun(f"{printable(run)} is not a prep run: it has no {Layout.MANIFEST} and no {Layout.REJECTS}/")
    rows: list[dict] = []
    for path in _listed(layout.rejects_folder, run):
        try:
            for batch in _checked_file(path, LISTED).iter_batches(columns=list(LISTED)):
                for column, wanted in (("stage", stage), ("reason", reason)):
                    if wanted is not None:
                        batch = batch.filter(pc.fill_null(pc.equal(batch.column(column), wanted), False))
                rows += batch.slice(0, limit - len(rows)).to_pylist()
                if len(rows) >= limit:
                    return rows
        except (OSError, pa.ArrowException) as error:
            raise UnreadableRun(f"cannot read {printable(path)}: {printable(error_line(error))}") from None
    return rows


def _checked_file(path: Path, columns: tuple[str, ...]) -> pq.ParquetFile:
    """A Parquet file of the run, opened and checked (``_check_columns``); raises what a
    damaged file raises, or ``ArrowInvalid``. A dangling link or a link loop raises the
    OS's error, whose reason is one line (Arrow's repeats the path)."""
    os.stat(path)
    refuse_special(path)  # a FIFO would block the read for good
    parquet = pq.ParquetFile(path)
    _check_columns(parquet.schema_arrow, columns)
    return parquet


def _check_columns(schema: pa.Schema, columns: tuple[str, ...]) -> None:
    """``ArrowInvalid`` unless each of ``columns`` is a text column: a Parquet file of
    another kind in ``docs/`` or ``rejects/`` (a user's, another tool's) ended ``prep
    rejects`` with ``KeyError: 'reason'`` (Arrow reads the columns a file has and drops
    the names it lacks) and ``prep show`` with a ``TypeError`` on a text that is a number."""
    for name in columns:
        kind = schema.field(name).type if name in schema.names else None
        if kind is None or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise pa.ArrowInvalid(f"not a file prep wrote: no text column {name!r}")


def ledger_counts(run: Path, column: str) -> dict[str, int]:
    """How many rejects of the run have each value of ``column`` (``stage``, ``reason``):
    what ``prep rejects`` offers when a filter matches nothing."""
    counts: dict[str, int] = {}
    for path in _listed(Layout(run).rejects_folder, run):
        try:  # batch by batch, as ``rejected_rows``: a ledger file can hold millions of rows
            for batch in _checked_file(path, LISTED).iter_batches(columns=[column]):
                for item in pc.value_counts(batch.column(column)).to_pylist():
                    counts[str(item["values"])] = counts.get(str(item["values"]), 0) + item["counts"]
        except (OSError, pa.ArrowException) as error:
            raise UnreadableRun(f"cannot read {printable(path)}: {printable(error_line(error))}") from None
    return counts


def _listed(folder: Path, run: Path) -> list[Path]:
    try:
        return parquet_files(folder)
    except OSError as error:  # a folder of the run that cannot be listed
        raise UnreadableRun(f"cannot read {printable(error.filename or run)}: {printable(error_line(error))}") from None
