"""Hostile input, third round: what real crawls and careless users leave in each source
format that the earlier rounds (``test_hostile_*``) do not cover. Every case is a small
file written here; each must read to the end with its good documents kept and the bad
part in the ledger at its location."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.readers import InputSpec, read_input
from pipeline.readers.common import Span

TEXTS = [f"Document {i}, with a few ordinary words in it." for i in range(6)]


def read(path: Path, **options) -> tuple[list[dict], list[dict]]:
    """(documents, ledger rows) of one file, each batch checked in full: no invalid
    string ever leaves a reader."""
    spec = InputSpec(source="web", file_key=path.name, **options)
    docs, bad = [], []
    for chunk in read_input(path, spec):
        for batch, rows in ((chunk.docs, docs), (chunk.bad, bad)):
            if batch is not None:
                batch.validate(full=True)
                rows += batch.to_pylist()
    return docs, bad


def locations(bad: list[dict]) -> list[tuple[str, int]]:
    return [(row["reason"], row["line"]) for row in bad]


# -- Parquet and Arrow ------------------------------------------------------------------------


def write_arrow_stream(path: Path, table: pa.Table) -> None:
    with pa.ipc.new_stream(path, table.schema) as writer:
        writer.write_table(table)


@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_text_stored_as_bytes_is_text_and_a_value_that_is_not_utf8_is_its_own_row(tmp_path, binary, suffix):
    """Parquet writers that leave out the UTF-8 annotation (Hive, older Spark) give a
    binary text column: its documents are read, not every row refused as non-string."""
    values = [t.encode() for t in TEXTS]
    values[3] = b"caf\xe9 in latin-1"
    table = pa.table({"id": [f"b{i}" for i in range(6)], "text": pa.array(values, binary)})
    path = tmp_path / f"bytes{suffix}"
    pq.write_table(table, path) if suffix == ".parquet" else write_arrow_stream(path, table)
    docs, bad = read(path)
    assert [d["text"] for d in docs] == [t for i, t in enumerate(TEXTS) if i != 3]
    assert locations(bad) == [("bad-input:invalid-utf8", 3)]
    assert bad[0]["raw"] == b"caf\xe9 in latin-1"


def test_a_binary_field_beside_the_text_stays_bytes(tmp_path):
    table = pa.table({"text": TEXTS, "blob": pa.array([b"\xff\x00"] * 6, pa.binary())})
    pq.write_table(table, tmp_path / "blob.parquet")
    docs, bad = read(tmp_path / "blob.parquet")
    assert not bad and [d["blob"] for d in docs] == [b"\xff\x00"] * 6


# -- WARC -------------------------------------------------------------------------------------


def warc_record(i: int) -> bytes:
    """A response record of a small HTML page, as Common Crawl writes one."""
    page = f"<html><body><p>Page {i}.</p></body></html>".encode()
    block = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + page
    head = (
        f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{i:08d}>\r\n"
        f"WARC-Date: 2024-04-25T16:24:44Z\r\nWARC-Target-URI: https://example.com/{i}\r\n"
        f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n"
    )
    return head.encode() + block + b"\r\n\r\n"


def member(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize(
    ("layout", "pages"),
    [
        ([member(b"")], 0),  # a writer that opened the file and wrote no record
        ([member(warc_record(0)), member(b""), member(warc_record(1))], 2),
        ([member(warc_record(0)), member(b"\r\n\r\n"), member(warc_record(1)), member(b"")], 2),
    ],
    ids=["only-an-empty-member", "empty-member-between", "blank-lines-member-and-empty-end"],
)
def test_a_gzip_member_of_nothing_or_blank_lines_is_no_damage(tmp_path, layout, pages):
    path = tmp_path / "blank.warc.gz"
    path.write_bytes(b"".join(layout))
    docs, bad = read(path)
    assert not bad and [d["url"] for d in docs] == [f"https://example.com/{i}" for i in range(pages)]
    cuts = [0, *range(1, path.stat().st_size, 7), path.stat().st_size]  # pieces read what the whole file reads
    pieces = [read(path, span=Span(start, end, start)) for start, end in zip(cuts, cuts[1:])]
    assert [d["url"] for p in pieces for d in p[0]] == [d["url"] for d in docs] and not any(p[1] for p in pieces)


def test_a_member_of_bytes_after_a_record_is_still_damage(tmp_path):
    """Only line ends are blank: a member of anything else where a record should start is a row."""
    path = tmp_path / "stray.warc.gz"
    first = member(warc_record(0))
    path.write_bytes(first + member(b"\r\n stray \r\n") + member(warc_record(1)))
    docs, bad = read(path)
    assert len(docs) == 2 and locations(bad) == [("bad-input:warc-corrupt-gzip", len(first))]
