"""The shape of documents and of the rejects ledger, shared by readers, stages and writers.

Documents travel as ``pyarrow.RecordBatch``es with at least ``id``, ``text`` and
``source`` (the mixture group named in the config). Readers keep the input's other
fields; stages add columns. A rejected document leaves the batch and becomes a row of
the ledger, carrying the stage and reason that rejected it and where it came from.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

ID, TEXT, SOURCE = "id", "text", "source"
REQUIRED_COLUMNS = (ID, TEXT, SOURCE)

# Internal columns, which never reach the kept documents: the reader adds the input line
# or row, so a rejected row can name it; a unit of several packed files adds the file.
LINE = "_line"
FILE = "_file"

# How docs/ and rejects/ Parquet files are written: zstd, and dictionaries and min/max
# statistics only on the short columns (on long text they cost time and get discarded).
COMPRESSION = "zstd"
LONG_COLUMNS = {TEXT, "raw"}

LEDGER_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("reason", pa.string()),
        # Where the document came from: input file (as matched by the config glob)
        # and 1-based line (JSON lines) or 0-based row (Parquet, Arrow).
        pa.field("file", pa.string()),
        pa.field("line", pa.int64()),
        # Free-form detail: a parser message, a byte range, a survivor id, ...
        pa.field("detail", pa.string()),
        # The document itself when it could be decoded, so nothing is lost.
        pa.field("text", pa.large_string()),
        # The raw input bytes when the document could not be decoded (bad input).
        pa.field("raw", pa.large_binary()),
    ]
)


def rule_name(stage: str, reason: str) -> str:
    """A rule as the manifest and the report name it: ``stage:reason``; bad input, and a
    reason that already starts with its stage's name (``classify:<model>``), as it is."""
    if reason.startswith(("bad-input:", f"{stage}:")):
        return reason
    return f"{stage}:{reason}"


def ledger_rows(
    batch: pa.RecordBatch,
    *,
    source: str,
    stage: str,
    reasons: pa.Array,
    file: str,
    detail: pa.Array | None = None,
) -> pa.RecordBatch:
    """Turn rejected rows of a document batch into ledger rows (one per row of ``batch``)."""
    n = batch.num_rows
    line = batch.column(LINE) if LINE in batch.schema.names else pa.nulls(n, pa.int64())
    files = batch.column(FILE) if FILE in batch.schema.names else pa.repeat(pa.scalar(file, pa.string()), n)
    columns = [
        batch.column(ID).cast(pa.string()),
        pa.repeat(pa.scalar(source, pa.string()), n),
        pa.repeat(pa.scalar(stage, pa.string()), n),
        reasons.cast(pa.string()),
        files.cast(pa.string()),
        line.cast(pa.int64()),
        detail.cast(pa.string()) if detail is not None else pa.nulls(n, pa.string()),
        batch.column(TEXT).cast(pa.large_string()),
        pa.nulls(n, pa.large_binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=LEDGER_SCHEMA)


def internal_columns(batch: pa.RecordBatch) -> list[str]:
    """The internal columns ``batch`` carries, which kept documents leave behind."""
    return [name for name in (LINE, FILE) if name in batch.schema.names]


def count_values(values: pa.Array) -> dict[str, int]:
    """How often each value occurs (Arrow's hash kernel, not a Python loop per row)."""
    return {str(item["values"]): item["counts"] for item in pc.value_counts(values).to_pylist()}


def split_by_reason(batch: pa.RecordBatch, reasons: pa.Array) -> tuple[pa.RecordBatch, pa.RecordBatch, pa.Array]:
    """Split ``batch`` into (kept rows, rejected rows, their reasons); a null reason keeps."""
    rejected_mask = pc.is_valid(reasons)
    kept = batch.filter(pc.invert(rejected_mask))
    rejected = batch.filter(rejected_mask)
    return kept, rejected, reasons.filter(rejected_mask)


def set_column(batch: pa.RecordBatch, name: str, values: pa.Array) -> pa.RecordBatch:
    """Replace column ``name`` if the batch has it, else append it (stages add signal columns)."""
    index = batch.schema.get_field_index(name)
    if index >= 0:
        return batch.set_column(index, name, values)
    return batch.append_column(name, values)
