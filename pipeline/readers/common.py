"""What every reader shares: the chunk it yields, the options it takes, the checks
that turn a raw parsed table into documents plus quarantined rows, and how a file that
cannot be read at all is recorded."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import FILE, ID, LEDGER_SCHEMA, LINE, SOURCE, TEXT
from pipeline.kernels.buffers import is_string
from pipeline.kernels.hashing import file_sha256
from pipeline.util.printable import error_line, printable

READER_STAGE = "read"

# What opening or reading a damaged, truncated, vanished or forbidden file raises:
# pyarrow's errors (ArrowInvalid for "not a Parquet file", ...), the OS's (missing,
# permission denied, I/O error), and a schema whose names are not UTF-8.
READ_ERRORS = (pa.ArrowException, OSError, UnicodeDecodeError)


class StrictModeError(Exception):
    """Raised in ``--strict`` mode at the first bad input, naming file and line."""


class Span(NamedTuple):
    """A piece of a file read as a unit of its own (``splits``): bytes (JSON lines, plain
    or a run of whole zstd frames), row groups (Parquet) or record batches (Arrow)
    ``[start, end)``, and the location of its first record: 1-based line (JSON lines)
    or 0-based row (Parquet, Arrow). A run of frames (``zstd_frames``) also has the
    decompressed offset where it starts (``decoded``; -1 for anything else), the
    decompressed bytes of its frames that the piece before owns (``skip``), and those of
    the frames after it that it owns (``tail``)."""

    start: int
    end: int
    first_line: int
    decoded: int = -1
    skip: int = 0
    tail: int = 0

    @property
    def frames(self) -> bool:
        return self.decoded >= 0

    @property
    def line_offset(self) -> int:
        """Where its first line starts, in the file's decompressed offsets."""
        return self.decoded + self.skip if self.frames else self.start


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
    span: Span | None = None  # read only this piece of the file (None: all of it)
    # The columns the run's stages add (``Stage.added_columns``): an input field of one of
    # these names is kept as ``input_<name>``, like one named ``id``, ``text`` or ``source``.
    stage_columns: frozenset[str] = frozenset()
    minhash: float | None = None  # RedPajama-V2: the threshold whose shipped MinHash bands to read

    @property
    def reports_file(self) -> bool:
        """Whether reading starts at the file's start, so the file's own facts (size and
        sha256 of all of it) are reported here: by exactly one unit of each file."""
        return self.span is None or self.span.start == 0


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


def bad_rows(
    spec: InputSpec, entries: list[BadInput], ids: list[str | None] | None = None, files: list[str] | None = None
) -> pa.RecordBatch:
    """Ledger rows for unreadable input.

    Their id is the document's own when it could be read, else the location
    (``file:line``). ``files``: each entry's file, for entries of a pack's files read
    together (default: ``spec``'s file). In strict mode the first one raises instead.
    """
    n = len(entries)
    files = files or [spec.file_key] * n
    if spec.strict and entries:
        line, kind, detail, _ = entries[0]
        raise StrictModeError(f"{files[0]}:{line}: bad input ({kind}): {detail}")
    return pa.RecordBatch.from_arrays(
        [
            pa.array(
                [own or f"{file}:{e.line}" for e, own, file in zip(entries, ids or [None] * n, files)], pa.string()
            ),
            pa.array([spec.source] * n, pa.string()),
            pa.array([READER_STAGE] * n, pa.string()),
            pa.array([f"bad-input:{kind}" for _, kind, _, _ in entries], pa.string()),
            pa.array(files, pa.string()),
            pa.array([line for line, *_ in entries], pa.int64()),
            pa.array([detail for _, _, detail, _ in entries], pa.string()),
            pa.nulls(n, pa.large_string()),
            pa.array([raw for *_, raw in entries], pa.large_binary()),
        ],
        schema=LEDGER_SCHEMA,
    )


def unreadable(spec: InputSpec, location: int, error: BaseException) -> pa.RecordBatch:
    """The one ledger row for a file that cannot be read from ``location`` on (0 when it
    could not be opened at all); its detail is the error's message, on one line."""
    return bad_rows(spec, [BadInput(location, "unreadable-file", error_line(error), None)])


def file_facts(path: str | os.PathLike) -> dict:
    """Size and sha256 of the raw file, for the manifest; empty when it cannot be read."""
    try:
        return {"sha256": file_sha256(path), "bytes": os.path.getsize(path)}
    except OSError:
        return {}


def _reasons(table: pa.Table, text_field: str, max_doc_bytes: int) -> pa.Array | None:
    """Per row: null for a usable document, else the bad-input kind. (JSON lines never
    reach here over ``max_doc_bytes``; Parquet and Arrow rows can.)"""
    n = table.num_rows
    if text_field not in table.column_names:
        return pa.repeat(pa.scalar("missing-text"), n)
    text = table.column(text_field)
    if pa.types.is_null(text.type):
        return pa.repeat(pa.scalar("missing-text"), n)
    if not is_string(text.type):
        return pc.if_else(pc.is_null(text), pa.scalar("missing-text"), pa.scalar("non-string-text"))
    none = pa.scalar(None, pa.string())
    reason = pc.if_else(pc.is_null(text), pa.scalar("missing-text"), none)
    filled = pc.fill_null(text, "") if text.null_count else text
    if _holds_nul(filled):
        reason = pc.if_else(pc.match_substring(filled, "\x00"), pa.scalar("nul-byte"), reason)
    # utf8_is_space is a predicate (no copy of the text), false for "".
    blank = pc.or_(pc.equal(pc.binary_length(filled), 0), pc.utf8_is_space(filled))
    blank = pc.and_(pc.is_valid(text), blank)
    reason = pc.if_else(blank, pa.scalar("empty-text"), reason)
    reason = pc.if_else(pc.greater(pc.binary_length(filled), max_doc_bytes), pa.scalar("oversized"), reason)
    if pc.all(pc.is_null(reason)).as_py():
        return None
    return reason


def _reason_detail(table: pa.Table, text_field: str, kind: str) -> str:
    """A rejected row's detail: what the text field is where that is the whole story (a
    file whose text is under another name, or of another type, costs every row, and the
    row should say how to fix it)."""
    if kind == "missing-text" and text_field not in table.column_names:
        names = ", ".join(map(printable, table.column_names[:12])) + (", ..." if table.num_columns > 12 else "")
        return f"no {text_field!r} field (fields: {names}); set the source's text_field to the one with the text"
    if kind == "non-string-text":
        return f"{text_field!r} field is {table.schema.field(text_field).type}, not a string"
    return f"{text_field!r} field: {kind}"


def _holds_nul(text: pa.ChunkedArray) -> bool:
    """Whether any value of a string column holds a NUL byte: one native pass over its
    character bytes (over 10 GB/s), so that Arrow's substring search, ten times slower,
    runs only on the rare column that has one."""
    for chunk in text.chunks:
        _, offsets, values = chunk.buffers()
        if values is None or not len(chunk):
            continue
        wide = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        start, end = np.frombuffer(offsets, dtype=wide)[[chunk.offset, chunk.offset + len(chunk)]]
        if end > start and np.frombuffer(values, dtype=np.uint8)[start:end].min() == 0:
            return True
    return False


def to_documents(
    table: pa.Table, lines: pa.Array, spec: InputSpec, files: pa.Array | None = None
) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
    """Split a parsed table into (documents, quarantined ledger rows).

    ``lines`` gives each row's location (1-based line or 0-based row), ``files`` each
    row's file where the rows come from several files of a pack read together (default:
    ``spec``'s file). Documents get ``id`` (the input's own id when it has a usable one,
    else ``file:line``), ``text``, ``source``, the input's other fields, and the
    internal ``_line``.
    """
    table = _plain_text(table.combine_chunks(), spec.text_field)
    ids, own_ids = _ids(table, lines, spec, files)
    reasons = _reasons(table, spec.text_field, spec.max_doc_bytes)
    bad = None
    if reasons is not None:
        rejected = pc.is_valid(reasons)
        bad_table = table.filter(rejected)
        kinds = reasons.filter(rejected).to_pylist()
        details = {kind: _reason_detail(table, spec.text_field, kind) for kind in set(kinds)}
        entries = [
            BadInput(line, kind, details[kind], None if kind == "oversized" else raw or None)
            for line, kind, raw in zip(
                lines.filter(rejected).to_pylist(), kinds, text_bytes(bad_table, spec.text_field)
            )
        ]
        bad_files = None if files is None else files.filter(rejected).to_pylist()
        bad = bad_rows(spec, entries, ids.filter(rejected).to_pylist(), bad_files)
        keep = pc.invert(rejected)
        table, lines, ids = table.filter(keep), lines.filter(keep), ids.filter(keep)
        files = None if files is None else files.filter(keep)
    if table.num_rows == 0:
        return None, bad
    n = table.num_rows
    text = table.column(spec.text_field)
    if pa.types.is_large_string(text.type):
        text = pc.cast(text, pa.string())
    names = [ID, TEXT, SOURCE]
    arrays = [_flat(ids), _flat(text), pa.repeat(pa.scalar(spec.source), n)]
    taken = set(table.column_names)
    for name in table.column_names:
        if name == spec.text_field or (name == spec.id_field and own_ids):
            continue
        names.append(_input_name(name, taken, spec.stage_columns))
        arrays.append(_flat(table.column(name)))
    names.append(LINE)
    arrays.append(_flat(lines.cast(pa.int64())))
    if files is not None:
        names.append(FILE)
        arrays.append(_flat(files))
    return pa.RecordBatch.from_arrays(arrays, names=names), bad


def _input_name(name: str, taken: set[str], stage_columns: frozenset[str]) -> str:
    """The output name of an input field: a field named like one of ours (the readers'
    ``id``, ``text``, ``source``, ``_line``, ``_file``, or a column a stage of the run adds) keeps its
    value under an ``input_`` prefix, so no stage overwrites it and no reader of ours
    mistakes it for our column. The prefix repeats while the name is still taken, by an
    input field or by one of ours (two columns of one name would make the output unreadable)."""
    ours = {ID, TEXT, SOURCE, LINE, FILE} | stage_columns
    if name not in ours:
        return name
    out = f"input_{name}"
    while out in taken or out in ours:
        out = f"input_{out}"
    taken.add(out)
    return out


def _ids(table: pa.Table, lines: pa.Array, spec: InputSpec, files: pa.Array | None) -> tuple[pa.Array, bool]:
    """The input's own id where it has a usable one, else ``file:line``; and whether
    the input's id field was used (a non-scalar id field is kept as a field instead)."""
    n = table.num_rows
    where = pa.repeat(pa.scalar(spec.file_key), n) if files is None else files
    location_ids = pc.binary_join_element_wise(where, pc.cast(lines, pa.string()), ":")
    if spec.id_field in table.column_names:
        try:
            return _flat(pc.coalesce(pc.cast(table.column(spec.id_field), pa.string()), location_ids)), True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # an id that is not a scalar: the field stays as it was, the location names the row
    return _flat(location_ids), False


def text_bytes(table: pa.Table, text_field: str) -> list[bytes | None]:
    """Each row's text as bytes, for the ledger's ``raw``; None where it is not a string.

    A cast to binary only relabels the buffers: no decode and re-encode, which would
    fail on text that is not valid UTF-8."""
    if text_field not in table.column_names or not is_string(table.schema.field(text_field).type):
        return [None] * table.num_rows
    return pc.cast(table.column(text_field), pa.large_binary()).to_pylist()


def _plain_text(table: pa.Table, text_field: str) -> pa.Table:
    """The table with a dictionary-encoded or view text column (as Parquet and Arrow
    files may store it) decoded to plain strings, so it is read as text, not rejected."""
    if text_field not in table.column_names:
        return table
    type_ = table.schema.field(text_field).type
    if pa.types.is_dictionary(type_) and is_string(type_.value_type):
        target = type_.value_type
    elif getattr(pa.types, "is_string_view", lambda _: False)(type_):  # pyarrow >= 16
        target = pa.string()
    else:
        return table
    i = table.column_names.index(text_field)
    return table.set_column(i, text_field, pc.cast(table.column(i), target))


def _flat(column) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def without_empty_structs(table: pa.Table, text_field: str) -> pa.Table:
    """The table with each object of no fields (``"meta": {}`` where no line of the block
    gives it one) as null: Arrow reads it as a struct of no fields, which Parquet cannot
    store, and one such field once aborted the whole run when its documents were written.
    (The text field is left as it is: an object there is a rejected row, never written.)"""
    for i, name in enumerate(table.column_names):
        if name != text_field and _holds_empty_struct(table.schema.field(i).type):
            table = table.set_column(i, name, _empty_structs_as_nulls(_flat(table.column(i))))
    return table


def _holds_empty_struct(type_: pa.DataType) -> bool:
    """Whether ``type_`` is, or holds, a struct of no fields (JSON gives only structs and lists)."""
    if pa.types.is_struct(type_):
        return type_.num_fields == 0 or any(_holds_empty_struct(child.type) for child in type_)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _holds_empty_struct(type_.value_type)
    return False


def _empty_structs_as_nulls(array: pa.Array) -> pa.Array:
    type_ = array.type
    if not _holds_empty_struct(type_):
        return array
    if pa.types.is_struct(type_):
        if type_.num_fields == 0:
            return pa.nulls(len(array))
        children = [_empty_structs_as_nulls(array.field(i)) for i in range(type_.num_fields)]
        fields = [old.with_type(child.type) for old, child in zip(type_, children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    lists = pa.ListArray if pa.types.is_list(type_) else pa.LargeListArray
    offsets = pc.subtract(array.offsets, array.offsets[0])  # from 0, over flatten()'s values: a slice too
    return lists.from_arrays(offsets, _empty_structs_as_nulls(array.flatten()), mask=array.is_null())
