"""Record-batch files (Parquet, Arrow) whose schema or blocks are hostile: no schema a
file can carry aborts the run, and a damaged row group or record batch costs only its
own rows, each counted in the ledger, read whole or in pieces alike."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from pipeline.readers import InputSpec, read_input
from pipeline.readers.batches import Block, read_batches
from pipeline.readers.splits import plan_spans

ROWS = 500
_random = random.Random(43)
# Text that does not compress, so a row group spans many pages and damage can fall mid-group.
TABLE = pa.table(
    {
        "id": [f"d{i}" for i in range(ROWS)],
        "text": ["".join(_random.choice("abcdefghij klmnop") for _ in range(200)) for _ in range(ROWS)],
    }
)


def read(path: Path, **options) -> tuple[list[int], list[dict]]:
    """The rows kept as documents (their locations) and the ledger rows of one file."""
    spec = InputSpec(source="web", file_key=path.name, batch_rows=options.pop("batch_rows", 10), **options)
    kept, bad = [], []
    for chunk in read_input(path, spec):
        kept += chunk.docs.column("_line").to_pylist() if chunk.docs is not None else []
        bad += chunk.bad.to_pylist() if chunk.bad is not None else []
    return kept, bad


def write_arrow(path: Path, table: pa.Table, stream: bool = True, batch_rows: int = 100) -> Path:
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(path, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
    return path


def two_text_columns() -> pa.Table:
    return pa.table([pa.array(["one", "two"]), pa.array(["three", "four"])], names=["text", "text"])


def lists_nested(depth: int) -> pa.Array:
    """Two rows of lists ``depth`` deep: Parquet counts two levels a list, Arrow one."""
    array = pa.array([1, 2])
    for _ in range(depth):
        array = pa.ListArray.from_arrays(pa.array(np.arange(len(array) + 1, dtype=np.int32)), array)
    return array


# Schemas no document can be made of: each file is one unreadable-file row, at row 0.
UNUSABLE = {
    "two text columns": (two_text_columns(), "2 columns named 'text'"),
    "two id columns": (
        pa.table([pa.array(["a", "b"]), pa.array(["c", "d"]), pa.array(["x", "y"])], names=["id", "id", "text"]),
        "2 columns named 'id'",
    ),
    "two other columns": (
        pa.table([pa.array(["x", "y"]), pa.array([1, 2]), pa.array([3, 4])], names=["text", "m", "m"]),
        "2 columns named 'm'",
    ),
}
# Columns an Arrow file can hold and Parquet, the output's format, cannot (Arrow only).
UNWRITABLE = {
    "union": pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])]),
    "interval": pa.array([pa.MonthDayNano([1, 2, 3])] * 2, pa.month_day_nano_interval()),
    "empty struct": pa.array([{}, {}], pa.struct([])),
    "dictionary of structs": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array([{"a": 1}])),
    "nested past Parquet's limit": lists_nested(60),
}


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("name", list(UNUSABLE))
def test_repeated_column_names_make_the_file_unreadable_not_the_run(name, fmt, tmp_path):
    table, detail = UNUSABLE[name]
    path = tmp_path / f"f.{fmt}"
    pq.write_table(table, path) if fmt == "parquet" else write_arrow(path, table)
    kept, bad = read(path)
    assert kept == [] and [(b["reason"], b["line"], b["detail"]) for b in bad] == [
        ("bad-input:unreadable-file", 0, detail)
    ]


@pytest.mark.parametrize("name", list(UNWRITABLE))
def test_a_column_parquet_cannot_store_makes_the_file_unreadable(name, tmp_path):
    path = write_arrow(tmp_path / "f.arrow", pa.table({"text": ["one", "two"], "odd": UNWRITABLE[name]}))
    kept, bad = read(path)
    assert kept == [] and [(b["reason"], b["line"]) for b in bad] == [("bad-input:unreadable-file", 0)]
    assert bad[0]["detail"].startswith("column 'odd'"), bad[0]["detail"]


def test_a_column_name_that_is_not_utf8_makes_the_file_unreadable(tmp_path):
    table = pa.table({"text": ["one", "two"], "zzzz": [1, 2]})
    parquet, arrow = tmp_path / "f.parquet", tmp_path / "f.arrow"
    pq.write_table(table, parquet, store_schema=False)
    write_arrow(arrow, table)
    for path in (parquet, arrow):
        path.write_bytes(path.read_bytes().replace(b"zzzz", b"\xff\xfez\xc3"))
        kept, bad = read(path)
        assert kept == [] and [(b["reason"], b["line"]) for b in bad] == [("bad-input:unreadable-file", 0)], path


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_odd_but_usable_columns_are_kept(fmt, tmp_path):
    """An empty column name, a struct with two fields of one name, string views (which
    Arrow cannot filter, and every stage that drops a document filters) stay documents."""
    table = pa.table(
        [
            pa.array(["one", "two"]),
            pa.array([1, 2]),
            pa.StructArray.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"]),
            pa.array(["x", "y"], pa.string_view()),
            pa.array([{"v": "x"}, {"v": "y"}], pa.struct([("v", pa.string_view())])),
        ],
        names=["text", "", "twins", "view", "nested_view"],
    )
    path = tmp_path / f"f.{fmt}"
    pq.write_table(table, path) if fmt == "parquet" else write_arrow(path, table)
    spec = InputSpec(source="web", file_key=path.name)
    docs = [c.docs for c in read_input(path, spec) if c.docs is not None]
    assert sum(d.num_rows for d in docs) == 2
    kept = docs[0].filter(pa.array([True, False]))  # what a stage does
    assert kept.column("view").to_pylist() == ["x"] and kept.column("").to_pylist() == [1]


def damaged_parquet(path: Path, group: int = 2, at: float | None = None) -> Path:
    """Row groups of 100 rows; in row group ``group`` the text's first page header is
    overwritten, or (``at``) bytes that far into its column chunk."""
    pq.write_table(TABLE, path, row_group_size=100, use_dictionary=False, compression="zstd", data_page_size=2048)
    column = pq.ParquetFile(path).metadata.row_group(group).column(1)
    offset = column.data_page_offset + (0 if at is None else int(column.total_compressed_size * at))
    data = bytearray(path.read_bytes())
    data[offset : offset + 16] = b"\xff" * 16 if at is None else b"\x00" * 16
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_row_group_costs_only_its_rows(tmp_path):
    kept, bad = read(damaged_parquet(tmp_path / "d.parquet"))
    assert kept == [*range(200), *range(300, ROWS)]  # row groups 3 and 4 too
    assert [b["line"] for b in bad] == list(range(200, 300))
    assert {b["reason"] for b in bad} == {"bad-input:unreadable-row"}
    assert all(b["detail"].startswith("row group 2 unreadable: ") for b in bad), bad[0]["detail"]
    assert [b["id"] for b in bad[:2]] == ["d.parquet:200", "d.parquet:201"]


def test_damage_mid_group_keeps_the_rows_before_it_and_counts_none_twice(tmp_path):
    kept, bad = read(damaged_parquet(tmp_path / "d.parquet", at=0.5))
    lost = [b["line"] for b in bad]
    assert 200 < lost[0] and lost == list(range(lost[0], 300))  # the rest of the group
    assert sorted(kept + lost) == list(range(ROWS))


@pytest.mark.parametrize("damage", ["row group", "mid-group", "record batch"])
def test_pieces_of_a_damaged_file_read_as_the_whole_file(damage, tmp_path):
    if damage == "record batch":  # one record batch a piece
        path, split_bytes = arrow_with_a_damaged_batch(tmp_path / "d.arrow", stream=False), 1
    else:
        path = damaged_parquet(tmp_path / "d.parquet", at=0.5 if damage == "mid-group" else None)
        split_bytes = path.stat().st_size // 4
    spans = plan_spans(path, path.suffix[1:], split_bytes, block_bytes=1000)
    assert spans is not None and len(spans) > 2
    whole = read(path, batch_rows=2)
    pieces = [read(path, span=span, batch_rows=2) for span in spans]
    assert [row for kept, _ in pieces for row in kept] == whole[0]
    assert [row for _, bad in pieces for row in bad] == whole[1] and whole[1]


def arrow_with_a_damaged_batch(path: Path, stream: bool) -> Path:
    """Three record batches of 4 rows; the second one's string offsets run backwards (a
    flipped bit in a mapped file): it decodes, but cannot be trusted."""
    damaged = pa.Array.from_buffers(
        pa.string(), 4, [None, pa.py_buffer(np.array([0, 6, 3, 9, 10], np.int32)), pa.py_buffer(b"abcdefghij")]
    )
    good = [pa.array([f"batch {b} row {r}" for r in range(4)]) for b in (0, 2)]
    table = pa.table({"text": pa.chunked_array([good[0], damaged, good[1]])})
    return write_arrow(path, table, stream=stream, batch_rows=4)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "file"])
def test_a_damaged_record_batch_costs_only_its_rows(stream, tmp_path):
    kept, bad = read(arrow_with_a_damaged_batch(tmp_path / "d.arrow", stream), batch_rows=2)
    assert kept == [0, 1, 2, 3, 8, 9, 10, 11]
    assert [(b["reason"], b["line"]) for b in bad] == [("bad-input:unreadable-row", r) for r in range(4, 8)]
    assert all(b["detail"].startswith("record batch 1 unreadable: ") for b in bad)


def test_a_block_short_of_the_rows_it_claims_counts_the_rest(tmp_path):
    """A row group whose pages hold fewer rows than its footer says (read without an
    error): the missing ones are in the ledger, and the next group keeps its row numbers."""
    batch = pa.record_batch({"text": ["a b", "c d", "e f"]})

    @contextmanager
    def short_blocks(path, spec):
        yield (
            batch.schema,
            iter([Block("row group 0", 5, 50, iter([batch])), Block("row group 1", 3, 30, iter([batch]))]),
        )

    spec = InputSpec(source="web", file_key="f")
    chunks = list(read_batches(tmp_path / "f.parquet", spec, short_blocks))
    kept = [row for c in chunks if c.docs is not None for row in c.docs.column("_line").to_pylist()]
    bad = [row for c in chunks if c.bad is not None for row in c.bad.to_pylist()]
    assert kept == [0, 1, 2, 5, 6, 7] and [b["line"] for b in bad] == [3, 4]
    assert bad[0]["detail"] == "row group 0 holds 3 of the 5 rows it claims"
    assert sum(c.bytes_read for c in chunks) == 80


def test_a_run_over_hostile_batch_files_finishes_and_balances(tmp_path):
    """Good files beside a damaged one and ones with unusable schemas: rc 0, the good
    documents out, every row of the damaged file counted, the balance exact."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    pq.write_table(TABLE.slice(0, 50), inputs / "good.parquet")
    damaged_parquet(inputs / "damaged.parquet")
    pq.write_table(two_text_columns(), inputs / "twins.parquet")
    write_arrow(inputs / "twins.arrow", two_text_columns())
    write_arrow(inputs / "union.arrow", pa.table({"text": ["one", "two"], "odd": UNWRITABLE["union"]}))
    config = tmp_path / "run.toml"
    config.write_text(
        f'[run]\nsplit_bytes = 20000\n[sources.web]\npaths = ["{inputs}/*"]\n[[stages]]\nname = "normalize"\n'
    )
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "--workers", "2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    balance = json.loads((out / "manifest.json").read_text())["balance"]
    assert balance == {"input": 50 + ROWS + 3, "output": 50 + ROWS - 100, "rejected": 100 + 3}
    ledger = pq.read_table(out / "rejects").to_pylist()
    assert Counter((r["file"].rsplit("/", 1)[-1], r["reason"]) for r in ledger) == {
        ("damaged.parquet", "bad-input:unreadable-row"): 100,
        ("twins.parquet", "bad-input:unreadable-file"): 1,
        ("twins.arrow", "bad-input:unreadable-file"): 1,
        ("union.arrow", "bad-input:unreadable-file"): 1,
    }
