"""The loop shared by the readers of record-batch files (Parquet, Arrow IPC).

Such a file is a sequence of blocks that decode on their own (a Parquet row group, an
Arrow record batch), each saying how many rows it holds. A damaged block costs only its
own rows: from the first of its batches that cannot be decoded or validated on, each row
becomes one ``unreadable-row`` ledger row, at its row number, and reading goes on with the
next block. (Rows of the block already yielded stay documents; nothing is counted twice.)
The block's row count is the file's word for it, so input = output + rejected still
counts every row the file holds, and since each block's first row is fixed by the counts
before it, a file read in pieces (``splits``) comes out exactly as read whole. Only damage
that hides where the next block starts (a footer, an Arrow stream's framing) ends the file:
one ``unreadable-file`` row at the row where reading stopped, the documents before kept.

A file whose columns cannot become documents is unreadable as a whole (one
``unreadable-file`` row at row 0, whatever its size): two top-level columns of one name
(which of them is the text? the output could hold only one), a name that is not UTF-8,
or a column that Parquet, the output's format, cannot store (a union, an interval, ...).

Neither pyarrow reader promises valid UTF-8 in string columns (Parquet stores bytes;
an Arrow file is mapped as it is), and invalid bytes would later abort the run in a
stage, or be written into the output. So every batch is validated in full, one native
pass, and only a batch that fails is searched for its bad rows, which are quarantined as
``invalid-utf8`` by row number; the rest of the batch goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
from pipeline.util.printable import error_line

# Text bytes of a batch handed on at most: documents' text is ``string``, 2 GiB at most a batch.
TEXT_BYTES = 1 << 30

# How Arrow's full validation words a string that is not UTF-8 (the tests check it still does).
ARROW_UTF8_ERROR = "Invalid UTF8 sequence"


class Block(NamedTuple):
    """A piece of a file that decodes on its own: a Parquet row group, an Arrow record batch."""

    name: str  # how the ledger names it: "row group 2"
    rows: int  # how many rows the file says it holds
    nbytes: int  # the input bytes it stands for (for progress)
    batches: Iterator[pa.RecordBatch]  # decoded lazily, so damage surfaces while iterating

    def bytes_of(self, rows: int) -> int:
        """The input bytes its first ``rows`` rows stand for, pro rata."""
        return self.nbytes * min(rows, self.rows) // max(self.rows, 1)


# Opens a file: its schema and its blocks (with ``spec.span``, only the span's row groups
# or record batches). Damage that stops the file raises, on entering or from ``next``.
BatchFile = Callable[[Path, InputSpec], AbstractContextManager[tuple[pa.Schema, Iterator[Block]]]]


def read_batches(path: Path, spec: InputSpec, open_file: BatchFile) -> Iterator[Chunk]:
    with ExitStack() as stack:
        yield from _file_chunks(stack, path, spec, open_file)
    yield Chunk(extra=file_facts(path) if spec.reports_file else {})


def _file_chunks(stack: ExitStack, path: Path, spec: InputSpec, open_file: BatchFile) -> Iterator[Chunk]:
    row = 0 if spec.span is None else spec.span.first_line  # 0-based number of the next row
    try:
        schema, blocks = stack.enter_context(open_file(path, spec))
    except READ_ERRORS as error:
        yield Chunk(bad=unreadable(spec, row, error))
        return
    problem = schema_problem(schema)
    if problem is not None:
        if spec.reports_file:  # one rejected document for the file, however it is split
            yield Chunk(bad=bad_rows(spec, [BadInput(0, "unreadable-file", problem, None)]))
        return
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            return
        except READ_ERRORS as error:
            yield Chunk(bad=unreadable(spec, row, error))
            return
        yield from _block_chunks(block, row, spec)
        row += block.rows


def _block_chunks(block: Block, first_row: int, spec: InputSpec) -> Iterator[Chunk]:
    """The block's documents, and a ledger row for each of its rows from the first batch
    that cannot be decoded or trusted on (or that the block lacks)."""
    done, failure = 0, None  # rows of the block yielded; why the rest cannot be read
    pieces = (part for batch in block.batches for part in _text_sized(_text_as_string(batch, spec.text_field), spec))
    while True:
        try:
            batch = next(pieces)
            bad_utf8 = invalid_utf8_rows(batch)
        except StopIteration:
            break
        except READ_ERRORS as error:
            failure = error
            break
        nbytes = block.bytes_of(done + batch.num_rows) - block.bytes_of(done)
        yield from _chunks(batch, first_row + done, bad_utf8, nbytes, spec)
        done += batch.num_rows
    if done < block.rows:
        why = f"unreadable: {error_line(failure)}" if failure else f"holds {done} of the {block.rows} rows it claims"
        yield from _lost_rows(spec, first_row + done, first_row + block.rows, f"{block.name} {why}")
    if block.nbytes > block.bytes_of(done):  # for the lost rows, or a block of none
        yield Chunk(bytes_read=block.nbytes - block.bytes_of(done))


def _text_as_string(batch: pa.RecordBatch, text_field: str) -> pa.RecordBatch:
    """``batch`` with a binary text column relabelled as strings (the same buffers, no
    copy). Parquet stores strings as byte arrays, and writers that leave out the UTF-8
    annotation (Hive, older Spark and Impala, hand-made files) give a binary column:
    its text is text all the same, and the UTF-8 check that follows quarantines each
    value that is not (``invalid-utf8``, raw bytes kept) instead of every row of the file."""
    if text_field not in batch.schema.names:
        return batch
    i = batch.schema.get_field_index(text_field)
    type_ = batch.schema.field(i).type
    if not (pa.types.is_binary(type_) or pa.types.is_large_binary(type_)):
        return batch
    text = batch.column(i).view(pa.string() if pa.types.is_binary(type_) else pa.large_string())
    return batch.set_column(i, batch.schema.field(i).with_type(text.type), text)


def _text_sized(batch: pa.RecordBatch, spec: InputSpec) -> Iterator[pa.RecordBatch]:
    """``batch``, in slices of at most ``TEXT_BYTES`` of text each, where its text is a
    large string over a buffer of more (a ``datasets`` batch of a thousand books, or a
    slice of one): documents carry their text as ``string``, whose offsets stop at 2 GiB,
    and the cast of such a batch raised, ending the run."""
    if spec.text_field not in batch.schema.names:
        return iter([batch])
    text = batch.column(spec.text_field)
    if not pa.types.is_large_string(text.type) or not len(text):
        return iter([batch])
    if text.buffers()[2] is None or text.buffers()[2].size <= TEXT_BYTES:  # what the cast measures
        return iter([batch])
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    cuts = [0]
    while cuts[-1] < len(text):  # each slice at least one row: a longer one is quarantined as oversized
        end = int(np.searchsorted(offsets, offsets[cuts[-1]] + TEXT_BYTES, side="right")) - 1
        cuts.append(min(max(end, cuts[-1] + 1), len(text)))
    column = batch.schema.get_field_index(spec.text_field)
    return (_text_slice(batch, column, offsets, start, end) for start, end in zip(cuts, cuts[1:]))


def _text_slice(batch: pa.RecordBatch, column: int, offsets: np.ndarray, start: int, end: int) -> pa.RecordBatch:
    """Rows ``[start, end)`` of ``batch``, the text column's values cut to theirs (no copy):
    Arrow's cast to ``string`` measures a slice by the whole buffer it views."""
    text = batch.column(column).slice(start, end - start)
    values = text.buffers()[2].slice(int(offsets[start]), int(offsets[end] - offsets[start]))
    rebased = pa.py_buffer(offsets[start : end + 1] - offsets[start])
    validity = pc.is_valid(text).buffers()[1] if text.null_count else None
    cut = pa.Array.from_buffers(pa.large_string(), len(text), [validity, rebased, values])
    return batch.slice(start, end - start).set_column(column, batch.schema.field(column), cut)


def _lost_rows(spec: InputSpec, start: int, end: int, detail: str) -> Iterator[Chunk]:
    """One ``unreadable-row`` ledger row for each of rows ``[start, end)``, a batch at a time."""
    for first in range(start, end, spec.batch_rows):
        rows = range(first, min(first + spec.batch_rows, end))
        yield Chunk(bad=bad_rows(spec, [BadInput(r, "unreadable-row", detail, None) for r in rows]))


def schema_problem(schema: pa.Schema) -> str | None:
    """Why no document can be made of a file with ``schema``, or None when they can."""
    try:
        names = schema.names
    except UnicodeDecodeError:
        return "a column name is not valid UTF-8"
    repeated = [f"{count} columns named {name!r}" for name, count in Counter(names).items() if count > 1]
    if repeated:
        return ", ".join(repeated)
    for field in schema:
        if (problem := _field_problem(field)) is not None:
            return f"column {field.name!r}: {problem}"
    if (problem := _parquet_problem(schema)) is not None:
        # Found for the file as a whole (one check for the common case, a file that has
        # none), then named by column.
        column = next((f.name for f in schema if _parquet_problem(pa.schema([f])) is not None), None)
        return f"column {column!r} cannot be written as Parquet: {problem}"
    return None


def _parquet_problem(schema: pa.Schema) -> str | None:
    """Why Parquet, the output's format, cannot store columns of ``schema`` or read them
    back (a union, an interval, nesting too deep, ...): an empty file written, and read."""
    try:
        sink = pa.BufferOutputStream()
        pq.ParquetWriter(sink, schema).close()
        pq.read_table(pa.BufferReader(sink.getvalue()))
    except (pa.ArrowException, OSError) as error:
        return error_line(error)
    return None


def _field_problem(field: pa.Field) -> str | None:
    """What makes a field unfit for the output that an empty Parquet file would not show:
    a nested name that is not UTF-8, a dictionary of nested values (Parquet refuses its
    first value, not its type)."""
    try:
        field.name  # noqa: B018 (decoding it is the test)
    except UnicodeDecodeError:
        return "a nested field name is not valid UTF-8"
    type_ = field.type
    if pa.types.is_dictionary(type_) and pa.types.is_nested(type_.value_type):
        return f"a dictionary of {type_.value_type}, which Parquet cannot store"
    children = [type_.field(i) for i in range(type_.num_fields)]
    if isinstance(type_, pa.ExtensionType):
        children.append(pa.field("storage", type_.storage_type))
    return next((p for child in children if (p := _field_problem(child)) is not None), None)


def _chunks(
    batch: pa.RecordBatch, first_row: int, bad_utf8: dict[int, str], nbytes: int, spec: InputSpec
) -> Iterator[Chunk]:
    """The batch's documents, after moving its rows with invalid UTF-8 to the ledger."""
    batch = _without_views(batch)
    lines = pa.array(np.arange(first_row, first_row + batch.num_rows, dtype=np.int64))
    if bad_utf8:
        yield Chunk(bad=bad_rows(spec, _invalid_utf8_entries(batch, first_row, bad_utf8, spec)))
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[list(bad_utf8)] = False
        batch, lines = batch.filter(pa.array(keep)), lines.filter(pa.array(keep))
    docs, bad = to_documents(pa.Table.from_batches([batch]), lines, spec)
    yield Chunk(docs=docs, bad=bad, bytes_read=nbytes)


def _without_views(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its string and binary views, top-level or nested, as large strings
    and binaries (the same values): Arrow has no take or filter for views (pyarrow 26),
    and every stage that drops a document filters. (A validated batch: the cast trusts
    the views' offsets.)"""
    schema = pa.schema([field.with_type(_view_free(field.type)) for field in batch.schema])
    if schema.equals(batch.schema):
        return batch
    return pa.RecordBatch.from_arrays([pc.cast(c, f.type) for c, f in zip(batch.columns, schema)], schema=schema)


def _view_free(type_: pa.DataType) -> pa.DataType:
    if _is_view(type_, "string"):
        return pa.large_string()
    if _is_view(type_, "binary"):
        return pa.large_binary()
    if pa.types.is_struct(type_):
        return pa.struct([field.with_type(_view_free(field.type)) for field in type_])
    if pa.types.is_map(type_):
        key, item = type_.key_field, type_.item_field
        return pa.map_(key.with_type(_view_free(key.type)), item.with_type(_view_free(item.type)), type_.keys_sorted)
    if pa.types.is_dictionary(type_):
        return pa.dictionary(type_.index_type, _view_free(type_.value_type), type_.ordered)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        item = type_.value_field.with_type(_view_free(type_.value_type))
        if pa.types.is_fixed_size_list(type_):
            return pa.list_(item, type_.list_size)
        return (pa.list_ if pa.types.is_list(type_) else pa.large_list)(item)
    return type_


def _is_view(type_: pa.DataType, kind: str) -> bool:
    return getattr(pa.types, f"is_{kind}_view", lambda _: False)(type_)  # views: pyarrow >= 16


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
