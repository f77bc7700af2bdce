"""What every reader shares: the chunk it yields, the options it takes, and the checks
that turn a raw parsed table into documents plus quarantined rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.documents import ID, LEDGER_SCHEMA, LINE, SOURCE, TEXT

READER_STAGE = "read"


class StrictModeError(Exception):
    """Raised in ``--strict`` mode at the first bad input, naming file and line."""


@dataclass
class InputSpec:
    source: str  # the mixture group (web, code, math, ...)
    file_key: str  # how ledger rows and generated ids name the file
    text_field: str = "text"
    id_field: str = "id"
    block_bytes: int = 4 << 20  # decompressed bytes parsed at a time (JSON lines)
    batch_rows: int = 8192  # rows per batch (Parquet, Arrow)
    max_doc_bytes: int = 32 << 20  # a longer document is quarantined, never held in memory
    strict: bool = False


@dataclass
class Chunk:
    docs: pa.RecordBatch | None = None  # id, text, source, other input fields, _line
    bad: pa.RecordBatch | None = None  # ledger rows (LEDGER_SCHEMA) for unreadable input
    bytes_read: int = 0  # input bytes consumed since the previous chunk (for progress)
    extra: dict = field(default_factory=dict)


class BadInput(NamedTuple):
    """One piece of unreadable input: where, what kind, why, and its bytes if kept."""

    line: int
    kind: str
    detail: str
    raw: bytes | None


def bad_rows(spec: InputSpec, entries: list[BadInput], ids: list[str | None] | None = None) -> pa.RecordBatch:
    """Ledger rows for unreadable input.

    Their id is the document's own when it could be read, else the location
    (``file:line``). In strict mode the first one raises instead.
    """
    if spec.strict and entries:
        line, kind, detail, _ = entries[0]
        raise StrictModeError(f"{spec.file_key}:{line}: bad input ({kind}): {detail}")
    n = len(entries)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(
                [own or f"{spec.file_key}:{e.line}" for e, own in zip(entries, ids or [None] * n)], pa.string()
            ),
            pa.array([spec.source] * n, pa.string()),
            pa.array([READER_STAGE] * n, pa.string()),
            pa.array([f"bad-input:{kind}" for _, kind, _, _ in entries], pa.string()),
            pa.array([spec.file_key] * n, pa.string()),
            pa.array([line for line, *_ in entries], pa.int64()),
            pa.array([detail for _, _, detail, _ in entries], pa.string()),
            pa.nulls(n, pa.large_string()),
            pa.array([raw for *_, raw in entries], pa.large_binary()),
        ],
        schema=LEDGER_SCHEMA,
    )


def _reasons(table: pa.Table, text_field: str, may_have_nul: bool) -> pa.Array | None:
    """Per row: null for a usable document, else the bad-input kind."""
    n = table.num_rows
    if text_field not in table.column_names:
        return pa.repeat(pa.scalar("missing-text"), n)
    text = table.column(text_field)
    if pa.types.is_null(text.type):
        return pa.repeat(pa.scalar("missing-text"), n)
    if not _is_string(text.type):
        return pc.if_else(pc.is_null(text), pa.scalar("missing-text"), pa.scalar("non-string-text"))
    none = pa.scalar(None, pa.string())
    reason = pc.if_else(pc.is_null(text), pa.scalar("missing-text"), none)
    filled = pc.fill_null(text, "") if text.null_count else text
    if may_have_nul:
        reason = pc.if_else(pc.match_substring(filled, "\x00"), pa.scalar("nul-byte"), reason)
    # utf8_is_space is a predicate (no copy of the text), false for "".
    blank = pc.or_(pc.equal(pc.binary_length(filled), 0), pc.utf8_is_space(filled))
    blank = pc.and_(pc.is_valid(text), blank)
    reason = pc.if_else(blank, pa.scalar("empty-text"), reason)
    if pc.all(pc.is_null(reason)).as_py():
        return None
    return reason


def to_documents(
    table: pa.Table, lines: pa.Array, spec: InputSpec, may_have_nul: bool = True
) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
    """Split a parsed table into (documents, quarantined ledger rows).

    ``lines`` gives each row's location (1-based line or 0-based row). Documents get
    ``id`` (the input's own id when it has a usable one, else ``file:line``), ``text``,
    ``source``, the input's other fields, and the internal ``_line``. A reader that knows
    no text can hold a NUL (JSON without a ``\u0000`` escape) skips that scan.
    """
    table = table.combine_chunks()
    ids, own_ids = _ids(table, lines, spec)
    reasons = _reasons(table, spec.text_field, may_have_nul)
    bad = None
    if reasons is not None:
        rejected = pc.is_valid(reasons)
        bad_table = table.filter(rejected)
        kinds = reasons.filter(rejected).to_pylist()
        texts = (
            bad_table.column(spec.text_field).to_pylist()
            if spec.text_field in bad_table.column_names and _is_string(bad_table.schema.field(spec.text_field).type)
            else [None] * len(kinds)
        )
        entries = [
            BadInput(line, kind, f"{spec.text_field!r} field: {kind}", t.encode("utf-8") if t else None)
            for line, kind, t in zip(lines.filter(rejected).to_pylist(), kinds, texts)
        ]
        bad = bad_rows(spec, entries, ids.filter(rejected).to_pylist())
        keep = pc.invert(rejected)
        table, lines, ids = table.filter(keep), lines.filter(keep), ids.filter(keep)
    if table.num_rows == 0:
        return None, bad
    n = table.num_rows
    text = table.column(spec.text_field)
    if pa.types.is_large_string(text.type):
        text = pc.cast(text, pa.string())
    names = [ID, TEXT, SOURCE]
    arrays = [_flat(ids), _flat(text), pa.repeat(pa.scalar(spec.source), n)]
    for name in table.column_names:
        if name in (spec.text_field, LINE) or (name == spec.id_field and own_ids):
            continue
        # A field named like one of ours keeps its value under an ``input_`` prefix.
        out = f"input_{name}" if name in (ID, TEXT, SOURCE) else name
        names.append(out)
        arrays.append(_flat(table.column(name)))
    names.append(LINE)
    arrays.append(_flat(lines.cast(pa.int64())))
    return pa.RecordBatch.from_arrays(arrays, names=names), bad


def _ids(table: pa.Table, lines: pa.Array, spec: InputSpec) -> tuple[pa.Array, bool]:
    """The input's own id where it has a usable one, else ``file:line``; and whether
    the input's id field was used (a non-scalar id field is kept as a field instead)."""
    n = table.num_rows
    location_ids = pc.binary_join_element_wise(
        pa.repeat(pa.scalar(spec.file_key + ":"), n), pc.cast(lines, pa.string()), ""
    )
    if spec.id_field in table.column_names:
        try:
            return _flat(pc.coalesce(pc.cast(table.column(spec.id_field), pa.string()), location_ids)), True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # an id that is not a scalar: the field stays as it was, the location names the row
    return _flat(location_ids), False


def _is_string(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)


def _flat(column) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column
