"""RedPajama-V2 (``format = "redpajama-v2"``): a documents file joined, row by row, with
what ships beside it (``formats/rpv2_layout.py``): its quality signals, the ids of its duplicates
and its MinHash signatures, so a recipe filters on them without recomputing any.

One unit reads one documents file, whole (``splits`` never cuts one: the joins go by
row). Per document:

* ``text`` is ``raw_content``; ``id`` is RedPajama's own,
  ``<snapshot>/<shard>/<lang>_<bucket>.json.gz/<row>`` (row: the 0-based line);
  ``url``, ``date_download``, ``digest``, ``language``, ``perplexity``, ``bucket`` and
  ``source_domain`` are kept (the other CCNet fields are in the ``ccnet_*`` signals);
* the signals as ``rpv2_signals`` makes them (float64 columns, ``rps_lines_spans``);
* ``is_duplicate``: whether the duplicates file lists the document (RedPajama lists every
  copy but the first one its bloom filter saw, so dropping the listed ids keeps one);
* with the source's ``minhash = 0.7 | 0.8 | 0.9 | 1.0``: ``minhash_sim<t>``, list<binary>,
  the bands of ``signature_sim<t>`` exactly as shipped (big-endian uint32 rows).

``tail`` files ship without signals, duplicates or MinHash: their documents are read with
those columns null, and no warning. A head or middle component that was never produced
(RedPajama lists such files in ``urls/missing-*.txt``) gives nulls too, and one warning
naming the file, in the run's warnings. A component that is unreadable, holds another
number of rows than the documents file, or other ids, is not joined: every document of
the file is quarantined (``bad-input:<component>-mismatch`` / ``-unreadable``, at its
line, the detail naming the component file and what is wrong), since filtering on
another file's signals would be silently wrong. So is every document after a zstd frame
that could not be read (``jsonl``: its row in the file is unknown), at its location there
(``bad-input:row-unknown``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.documents import FILE, ID, LINE, SOURCE, TEXT
from pipeline.formats.rpv2_layout import ID_SEPARATOR, bucket, component_path, document_tag, id_prefix
from pipeline.readers.codecs import open_stream
from pipeline.readers.common import READ_ERRORS, BadInput, Chunk, InputSpec, bad_rows, file_facts, unreadable
from pipeline.readers.jsonl import read_jsonl
from pipeline.readers.rpv2_signals import SignalsError, empty_columns, read_signals
from pipeline.util.printable import error_line

TEXT_FIELD = "raw_content"
KEPT = {
    "url": pa.string(),
    "date_download": pa.string(),
    "digest": pa.string(),
    "language": pa.string(),
    "perplexity": pa.float64(),
    "bucket": pa.string(),
    "source_domain": pa.string(),
}
DUPLICATE = "is_duplicate"
THRESHOLDS = (0.7, 0.8, 0.9, 1.0)
BANDS_TYPE = pa.list_(pa.binary())
COUNT_BLOCK = 4 << 20
CCNET_TIME = "%Y-%m-%dT%H:%M:%SZ"


def minhash_column(threshold: float) -> str:
    """The output column of the bands at ``threshold``: ``minhash_sim0.8``."""
    return f"minhash_sim{threshold:.1f}"


class _Mismatch(Exception):
    """A component that cannot be joined: its bad-input kind and why."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


@dataclasses.dataclass
class _Joined:
    """One documents file's components, each a table of one row per document."""

    prefix: str  # the file's part of every id
    signals: pa.Table
    duplicate: pa.Array  # bool, null where no duplicates file applies
    bands: pa.Array | None  # list<binary>, when the source asks for them
    rows: int  # rows every component holds
    warnings: list[str]
    mismatch: _Mismatch | None = None


def read_redpajama_v2(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    tag = document_tag(path)
    if tag is None:
        error = ValueError("not at documents/<snapshot>/<shard>/<lang>_<bucket>.json.gz in a RedPajama-V2 tree")
        yield Chunk(bad=unreadable(spec, 0, error), extra=file_facts(path))
        return
    joined = _join(Path(path), tag, spec)
    inner = dataclasses.replace(spec, text_field=TEXT_FIELD)
    for chunk in read_jsonl(path, inner):
        if chunk.docs is not None and chunk.docs.num_rows:
            docs, bad = _attach(chunk.docs, joined, spec)
            chunk = dataclasses.replace(chunk, docs=docs, bad=_concat(chunk.bad, bad))
        if chunk.extra and joined.warnings:
            chunk = dataclasses.replace(chunk, extra={**chunk.extra, "warnings": joined.warnings})
        yield chunk


def _join(path: Path, tag: str, spec: InputSpec) -> _Joined:
    prefix = id_prefix(tag)
    rows = _count_rows(path)
    tail = bucket(tag) == "tail"
    joined = _Joined(prefix, empty_columns(0), pa.nulls(0, pa.bool_()), None, rows or 0, [])
    try:
        found = _component(path, "signals", tail, joined, read_signals)
        joined.rows = rows if rows is not None else (len(found[0]) if found is not None else 0)
        joined.signals = empty_columns(joined.rows) if found is None else _checked(found, "signals", joined)
        found = _component(path, "duplicates", tail, joined, _read_duplicates)
        joined.duplicate = pa.nulls(joined.rows, pa.bool_()) if found is None else _duplicates(found, joined)
        if spec.minhash is not None:
            found = _component(path, "minhash", tail, joined, lambda p: _read_minhash(p, spec.minhash))
            joined.bands = pa.nulls(joined.rows, BANDS_TYPE) if found is None else _checked(found, "minhash", joined)
    except _Mismatch as mismatch:
        joined.mismatch = mismatch
    return joined


def _component(path: Path, component: str, tail: bool, joined: _Joined, read):
    """``read`` of the component file, or None where it was never produced (a warning
    for head and middle files); a file that cannot be read raises ``_Mismatch``."""
    where = component_path(path, component)
    if not where.exists():
        if not tail:
            joined.warnings.append(f"RedPajama-V2 {component} file never produced, columns left null: {where}")
        return None
    try:
        return read(where)
    except (*READ_ERRORS, SignalsError, KeyError) as error:
        raise _Mismatch(f"{component}-unreadable", f"{where}: {error_line(error)}") from None


def _read_duplicates(where: Path) -> pa.Array:
    return pc.cast(pq.read_table(where, columns=["doc_id"]).column("doc_id"), pa.string()).combine_chunks()


def _read_minhash(where: Path, threshold: float) -> tuple[pa.Array, pa.Array]:
    """The file's ids and its bands at ``threshold``."""
    name = f"signature_sim{threshold:.1f}"
    table = pq.read_table(where, columns=["id", name])
    bands = pc.cast(table.column(name), BANDS_TYPE).combine_chunks()
    return pc.cast(table.column("id"), pa.string()).combine_chunks(), bands


def _checked(found: tuple, component: str, joined: _Joined):
    """A component's values (a table or an array), once its ids (``found``: ids, values)
    are the documents' own, row by row."""
    ids, values = found
    where = f"{component} of {joined.prefix}"
    if len(ids) != joined.rows:
        raise _Mismatch(f"{component}-mismatch", f"{where}: {len(ids)} rows for {joined.rows} documents")
    expected = _ids(joined.prefix, np.arange(joined.rows))
    differ = pc.invert(pc.fill_null(pc.equal(ids, expected), False))
    if pc.any(differ).as_py():
        row = int(pc.index(differ, True).as_py())
        raise _Mismatch(f"{component}-mismatch", f"{where}: row {row} has id {ids[row].as_py()!r}, not {expected[row]}")
    return values


def _duplicates(doc_ids: pa.Array, joined: _Joined) -> pa.Array:
    """Per row whether the duplicates file lists it; a listed id of another file, or of
    a row the file lacks, is a mismatch."""
    head = joined.prefix + ID_SEPARATOR
    starts = pc.starts_with(doc_ids, head)
    if len(doc_ids) and not pc.all(pc.fill_null(starts, False)).as_py():
        raise _Mismatch("duplicates-mismatch", f"duplicates of {joined.prefix}: ids of another file")
    try:
        rows = pc.cast(pc.utf8_slice_codeunits(doc_ids, len(head)), pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, ValueError):
        raise _Mismatch("duplicates-mismatch", f"duplicates of {joined.prefix}: an id without a row number") from None
    if len(rows) and (rows.min() < 0 or rows.max() >= joined.rows):
        raise _Mismatch("duplicates-mismatch", f"duplicates of {joined.prefix}: a row the documents file lacks")
    flags = np.zeros(joined.rows, dtype=bool)
    flags[rows] = True
    return pa.array(flags)


def _attach(docs: pa.RecordBatch, joined: _Joined, spec: InputSpec) -> tuple[pa.RecordBatch | None, pa.RecordBatch]:
    if FILE in docs.schema.names:  # after a skipped zstd frame: lines numbered from where reading resumed
        detail = "after a zstd frame that could not be read, its row is unknown: no id or signals can be joined"
        entries = [BadInput(line, "row-unknown", detail, None) for line in docs.column(LINE).to_pylist()]
        return None, bad_rows(spec, entries, files=docs.column(FILE).to_pylist())
    rows = pc.subtract(docs.column(LINE), 1).to_numpy(zero_copy_only=False)
    ids = _ids(joined.prefix, rows)
    if joined.mismatch is not None:
        kind, detail = joined.mismatch.kind, joined.mismatch.detail
        entries = [BadInput(line, kind, detail, None) for line in docs.column(LINE).to_pylist()]
        return None, bad_rows(spec, entries, ids.to_pylist())
    beyond = rows >= joined.rows
    bad = None
    if beyond.any():  # a documents file longer than its components (counting it failed)
        detail = f"components of {joined.prefix} hold {joined.rows} rows"
        entries = [BadInput(int(row) + 1, "signals-mismatch", detail, None) for row in rows[beyond]]
        bad = bad_rows(spec, entries, ids.filter(pa.array(beyond)).to_pylist())
        keep = pa.array(~beyond)
        docs, ids, rows = docs.filter(keep), ids.filter(keep), rows[~beyond]
        if not docs.num_rows:
            return None, bad
    take = pa.array(rows)
    names = [ID, TEXT, SOURCE]
    arrays = [ids, docs.column(TEXT), docs.column(SOURCE)]
    for name, type_ in KEPT.items():
        names.append(name)
        arrays.append(_typed(docs, name, type_, joined))
    signals = joined.signals.take(take)
    names += signals.column_names
    arrays += [column.combine_chunks() for column in signals.columns]
    names.append(DUPLICATE)
    arrays.append(joined.duplicate.take(take))
    if joined.bands is not None:
        names.append(minhash_column(spec.minhash))
        arrays.append(joined.bands.take(take))
    names.append(LINE)
    arrays.append(docs.column(LINE))
    return pa.RecordBatch.from_arrays(arrays, names=names), bad


def _typed(docs: pa.RecordBatch, name: str, type_: pa.DataType, joined: _Joined) -> pa.Array:
    """A kept CCNet field as its documented type; null where the file lacks it, or holds
    something else, which is one warning per file and field. Arrow's JSON
    parser reads CCNet's ``date_download`` ("2020-03-29T09:55:33Z") as a timestamp: it is
    written back in that very form, not Arrow's "2020-03-29 09:55:33"."""
    if name not in docs.schema.names:
        return pa.nulls(docs.num_rows, type_)
    column = docs.column(name)
    try:
        if pa.types.is_timestamp(column.type) and type_ == pa.string():
            return pc.strftime(column, format=CCNET_TIME)
        return pc.cast(column, type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        warning = f"RedPajama-V2 field {name!r} of {joined.prefix} is not {type_}: null in blocks of another type"
        if warning not in joined.warnings:
            joined.warnings.append(warning)
        return pa.nulls(docs.num_rows, type_)


def _ids(prefix: str, rows: np.ndarray) -> pa.Array:
    n = len(rows)
    return pc.binary_join_element_wise(
        pa.repeat(pa.scalar(prefix + ID_SEPARATOR), n), pc.cast(pa.array(rows, pa.int64()), pa.string()), ""
    )


def _count_rows(path: Path) -> int | None:
    """The number of rows RedPajama numbered in the documents file (its lines, the last
    one counted without a newline too), so a component of another length is refused
    before any document is given out; None when the file cannot be read to its end (the
    JSON lines reader quarantines the damage itself)."""
    try:
        with open(path, "rb", buffering=0) as raw:
            stream, _ = open_stream(raw)
            count, last = 0, b"\n"
            while block := stream.read(COUNT_BLOCK):
                count += int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 10))
                last = block[-1:]
            return count + (last != b"\n")
    except Exception:  # any codec's error on a damaged stream: the reader names it, at its line
        return None


def _concat(first: pa.RecordBatch | None, second: pa.RecordBatch | None) -> pa.RecordBatch | None:
    if first is None or second is None:
        return first if second is None else second
    return pa.Table.from_batches([first, second]).combine_chunks().to_batches()[0]
