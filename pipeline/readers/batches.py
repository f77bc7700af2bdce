"""The loop shared by the readers of record-batch files (Parquet, Arrow IPC).

Neither pyarrow reader promises valid UTF-8 in string columns (Parquet stores bytes;
an Arrow file is mapped as it is), and invalid bytes would later abort the run in a
stage, or be written into the output. So every batch is validated in full, one native
pass, and only a batch that fails is searched for its bad rows, which are quarantined as
``invalid-utf8`` by row number; the rest of the batch goes on.

A file that cannot be opened, or stops being readable part-way (damaged footer, page or
message, truncated, gone), ends with one ``unreadable-file`` ledger row at the row where
reading stopped; the documents before it are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.readers.common import (
    READ_ERRORS,
    BadInput,
    Chunk,
    InputSpec,
    bad_rows,
    file_facts,
    text_bytes,
    to_documents,
    unreadable,
)

# How Arrow's full validation words a string that is not UTF-8 (the tests check it still does).
ARROW_UTF8_ERROR = "Invalid UTF8 sequence"

# A source of batches: opens the file lazily (errors surface at the first ``next``) and
# yields each batch with the input bytes it stands for (for progress); with
# ``spec.span``, only the batches of its row groups or record batches.
BatchSource = Callable[[Path, InputSpec], Iterator[tuple[pa.RecordBatch, int]]]


def read_batches(path: Path, spec: InputSpec, open_batches: BatchSource) -> Iterator[Chunk]:
    row = 0 if spec.span is None else spec.span.first_line  # 0-based number of the next row
    with closing(open_batches(path, spec)) as batches:
        while True:
            try:
                batch, nbytes = next(batches)
                bad_utf8 = invalid_utf8_rows(batch)
            except StopIteration:
                break
            except READ_ERRORS as error:
                yield Chunk(bad=unreadable(spec, row, error))
                break
            yield from _chunks(batch, row, bad_utf8, nbytes, spec)
            row += batch.num_rows
    yield Chunk(extra=file_facts(path) if spec.reports_file else {})


def _chunks(
    batch: pa.RecordBatch, first_row: int, bad_utf8: dict[int, str], nbytes: int, spec: InputSpec
) -> Iterator[Chunk]:
    """The batch's documents, after moving its rows with invalid UTF-8 to the ledger."""
    lines = pa.array(np.arange(first_row, first_row + batch.num_rows, dtype=np.int64))
    if bad_utf8:
        yield Chunk(bad=bad_rows(spec, _invalid_utf8_entries(batch, first_row, bad_utf8, spec)))
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[list(bad_utf8)] = False
        batch, lines = batch.filter(pa.array(keep)), lines.filter(pa.array(keep))
    docs, bad = to_documents(pa.Table.from_batches([batch]), lines, spec)
    yield Chunk(docs=docs, bad=bad, bytes_read=nbytes)


def _invalid_utf8_entries(
    batch: pa.RecordBatch, first_row: int, bad_utf8: dict[int, str], spec: InputSpec
) -> list[BadInput]:
    """Ledger entries for the rows with invalid UTF-8, keeping the text's raw bytes."""
    rows = sorted(bad_utf8)
    raws = text_bytes(pa.Table.from_batches([batch.take(pa.array(rows, pa.int64()))]), spec.text_field)
    return [BadInput(first_row + r, "invalid-utf8", bad_utf8[r], raw) for r, raw in zip(rows, raws)]


def invalid_utf8_rows(batch: pa.RecordBatch) -> dict[int, str]:
    """Rows (0-based in the batch) holding invalid UTF-8 in a string column, nested ones
    included, each with a detail naming the columns. Raises ``pa.ArrowInvalid`` for a
    batch damaged in some other way (offsets out of bounds, ...): it cannot be trusted."""
    try:
        batch.validate(full=True)
        return {}
    except pa.ArrowInvalid as error:
        failure = error
    columns: dict[int, list[str]] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        if _has_invalid_utf8(column):
            for row in _invalid_rows(column, 0, len(column)):
                columns.setdefault(row, []).append(name)
    if not columns:  # the batch as a whole is damaged, not one of its values
        raise failure
    return {row: "invalid UTF-8 in " + ", ".join(map(repr, names)) for row, names in columns.items()}


def _has_invalid_utf8(column: pa.Array) -> bool:
    """Whether full validation of ``column`` fails on UTF-8 (raised again when it fails on
    anything else: its structure is damaged, and no row of it can be taken safely)."""
    try:
        column.validate(full=True)
        return False
    except pa.ArrowInvalid as error:
        if ARROW_UTF8_ERROR not in str(error):
            raise
        return True


def _invalid_rows(column: pa.Array, start: int, length: int) -> list[int]:
    """The rows of ``column[start:start + length]`` that fail full validation, found by
    halving: a few bad rows among thousands cost a few dozen native validations."""
    try:
        _rows(column, start, length).validate(full=True)
        return []
    except pa.ArrowInvalid:
        if length == 1:
            return [start]
    half = length // 2
    return _invalid_rows(column, start, half) + _invalid_rows(column, start + half, length - half)


def _rows(column: pa.Array, start: int, length: int) -> pa.Array:
    """``column[start:start + length]`` as an array to validate on its own: a zero-copy
    slice for flat types; a copy of just those rows for nested ones, whose slices keep
    their children whole (and validation would check them whole)."""
    if pa.types.is_nested(column.type):
        return column.take(pa.array(np.arange(start, start + length, dtype=np.int64)))
    return column.slice(start, length)


def sliced(batch: pa.RecordBatch, rows: int, nbytes: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """``batch`` in pieces of at most ``rows`` rows (zero-copy), sharing its ``nbytes``."""
    n = batch.num_rows
    for start in range(0, max(n, 1), rows):
        end = min(start + rows, n)
        yield batch.slice(start, end - start), nbytes * end // max(n, 1) - nbytes * start // max(n, 1)
