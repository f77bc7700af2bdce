"""Hostile input, third round: what real crawls and careless users leave in each source
format that the earlier rounds (``test_hostile_*``) do not cover. Every case is a small
file written here; each must read to the end with its good documents kept and the bad
part in the ledger at its location."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import shutil
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA
from rpv2_fixture import build_rpv2_tree
from test_compressed_jsonl import zstd

from pipeline.engine.run import run_pipeline
from pipeline.engine.source_files import SourceFilesError, source_files
from pipeline.readers import InputSpec, batches, read_input
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


# -- JSON lines -------------------------------------------------------------------------------


def jsonl(first: int, last: int) -> bytes:
    return b"".join(json.dumps({"id": f"j{i}", "text": TEXTS[i % 6]}).encode() + b"\n" for i in range(first, last))


def test_a_json_array_one_element_a_line_is_told_as_one(tmp_path):
    """``json.dump(docs, f, indent=...)`` beside JSON lines: each line of it is quarantined
    at its number, with the likely cause and the fix, not only the parser's complaint."""
    path = tmp_path / "array.json"
    elements = [json.dumps({"id": f"a{i}", "text": TEXTS[i]}) for i in range(3)]
    path.write_text("[\n" + ",\n".join(elements) + "\n]\n")
    docs, bad = read(path)
    assert [d["id"] for d in docs] == ["a2"]  # the last element is a JSON line as it stands
    assert locations(bad) == [("bad-input:broken-json", n) for n in (1, 2, 3, 5)]
    assert all("one JSON array" in row["detail"] and "jq -c" in row["detail"] for row in bad)
    (tmp_path / "one_line.json").write_text(json.dumps([{"text": t} for t in TEXTS]) + "\n")
    docs, bad = read(tmp_path / "one_line.json")
    assert not docs and locations(bad) == [("bad-input:not-an-object", 1)] and "one JSON array" in bad[0]["detail"]


def test_a_byte_order_mark_inside_the_file_is_told_as_files_joined(tmp_path):
    path = tmp_path / "joined.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl(0, 2) + b"\xef\xbb\xbf" + jsonl(2, 4))  # cat a.jsonl b.jsonl
    docs, bad = read(path)
    assert [d["id"] for d in docs] == ["j0", "j1", "j3"] and locations(bad) == [("bad-input:broken-json", 3)]
    assert "byte-order mark starts the line" in bad[0]["detail"]


def test_a_tar_archive_named_like_json_lines_says_so(tmp_path):
    """A downloaded ``.tar.gz`` of JSON lines named ``.jsonl.gz``: its first line is the
    archive's header joined to the first document."""
    inner = tmp_path / "inner.jsonl"
    inner.write_bytes(jsonl(0, 3))
    path = tmp_path / "archive.jsonl.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.add(inner, arcname="inner.jsonl")
    docs, bad = read(path)
    assert [d["id"] for d in docs] == ["j1", "j2"] and bad[0]["line"] == 1
    assert "tar archive" in bad[0]["detail"] and all("tar archive" not in row["detail"] for row in bad[1:])


def test_a_utf16_file_says_so_at_its_first_line(tmp_path):
    """Windows tools write UTF-16 with a byte-order mark: line 1's row says what the file is."""
    path = tmp_path / "windows.jsonl"
    path.write_bytes(jsonl(0, 3).decode().encode("utf-16"))
    docs, bad = read(path)
    assert not docs and len(bad) == 4 and bad[0]["reason"] == "bad-input:invalid-utf8"  # and the last NUL byte
    assert "UTF-16" in bad[0]["detail"] and "iconv" in bad[0]["detail"]
    path.write_bytes(b"\xff" + jsonl(0, 1))  # a stray byte is no UTF-16 file
    assert "UTF-16" not in read(path)[1][0]["detail"]


def dictionary_frame(data: bytes, dictionary_id: int = 42) -> bytes:
    """A zstd frame that names a dictionary (as ``zstd -D`` writes), its data in one raw block."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x01, 0x00, dictionary_id])  # dictionary id flag; window byte
    return header + (len(data) << 3 | 1).to_bytes(3, "little") + data  # the last block, raw


def test_a_frame_compressed_with_a_dictionary_says_what_to_do(tmp_path):
    path = tmp_path / "dict.jsonl.zst"
    path.write_bytes(zstd(jsonl(0, 4)) + dictionary_frame(jsonl(4, 8)))
    docs, bad = read(path)
    assert [d["id"] for d in docs] == ["j0", "j1", "j2", "j3"]
    assert locations(bad) == [("bad-input:corrupt-zstd", 5)] and "zstd -d -D" in bad[0]["detail"]


def test_objects_of_no_fields_are_kept_as_null_and_the_documents_can_be_written(tmp_path):
    """``"meta": {}`` on every line of a block is a struct of no fields to Arrow, which
    Parquet cannot store: the run used to abort writing the documents. Nested in an
    object or a list it is null the same way; the document and its other fields stay."""
    records = [
        {"id": "e0", "text": TEXTS[0], "meta": {}, "deep": {"a": {}, "n": 1}, "list": [{}, {}]},
        {"id": "e1", "text": TEXTS[1], "meta": {}, "deep": None, "list": [[{}]]},
        {"id": "e2", "text": TEXTS[2], "meta": {}, "deep": {"a": {}, "n": 2}, "list": None},
    ]
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records[:2]) + b"not json\n")
    path.write_bytes(path.read_bytes() + json.dumps(records[2]).encode() + b"\n")  # the slow path too
    for block_bytes in (1 << 20, 1):
        docs, bad = read(path, block_bytes=block_bytes)
        assert locations(bad) == [("bad-input:broken-json", 3)]
        assert [(d["id"], d["meta"], d["deep"]) for d in docs if d["id"] != "e1"] == [
            ("e0", None, {"a": None, "n": 1}),
            ("e2", None, {"a": None, "n": 2}),
        ]
    spec = InputSpec(source="web", file_key=path.name)
    for chunk in read_input(path, spec):
        if chunk.docs is not None:
            pq.write_table(pa.Table.from_batches([chunk.docs]), tmp_path / "out.parquet")  # raised before


@pytest.mark.parametrize("compress", [bz2.compress, lzma.compress], ids=["bz2", "xz"])
def test_streams_after_padding_are_read_and_bytes_after_a_stream_are_reported(tmp_path, compress):
    """xz allows NUL padding between streams; the standard library's readers took it,
    and any stray bytes, for the end of the file and dropped every stream after, unsaid."""
    path = tmp_path / "streams.jsonl.xz"  # the content tells the codec, whatever the name
    path.write_bytes(compress(jsonl(0, 2)) + b"\0" * 8 + compress(jsonl(2, 4)) + b"\0" * 3)
    docs, bad = read(path)
    assert [d["id"] for d in docs] == ["j0", "j1", "j2", "j3"] and not bad
    path.write_bytes(compress(jsonl(0, 2)) + b"stray bytes" + compress(jsonl(2, 4)))
    docs, bad = read(path)
    name = "bz2" if compress is bz2.compress else "xz"
    assert [d["id"] for d in docs] == ["j0", "j1"] and locations(bad) == [(f"bad-input:corrupt-{name}", 3)]
    assert bad[0]["detail"].endswith("the rest of the file from this line on is unreadable")


# -- Parquet and Arrow ------------------------------------------------------------------------


def invalid_strings(values: list[bytes | None], type_: pa.DataType) -> pa.Array:
    """A string array holding these bytes as they are, valid UTF-8 or not."""
    return pa.array(values, pa.large_binary() if type_ == pa.large_string() else pa.binary()).view(type_)


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


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_batch_of_more_text_than_a_string_holds_is_read_in_slices(tmp_path, monkeypatch, suffix):
    """A ``datasets`` batch of a thousand books holds over 2 GiB of large-string text,
    which the documents' ``string`` cannot: the run ended on the cast. Read in slices of
    ``TEXT_BYTES`` (made small here), every row comes out as it does read whole."""
    values = [(t * 3).encode() for t in TEXTS] * 5
    values[7], values[12] = None, b"caf\xe9"
    texts = invalid_strings(values, pa.large_string())
    table = pa.table({"id": [f"r{i}" for i in range(30)], "text": texts})
    path = tmp_path / f"books{suffix}"
    pq.write_table(table, path, store_schema=True) if suffix == ".parquet" else write_arrow_stream(path, table)
    whole = read(path)
    monkeypatch.setattr(batches, "TEXT_BYTES", 500)
    chunks = [c for c in read_input(path, InputSpec(source="web", file_key=path.name)) if c.docs is not None]
    assert len(chunks) > 3 and all(len(c.docs.column("text").buffers()[2]) <= 500 for c in chunks)
    docs, bad = read(path)
    assert docs == whole[0] and sorted(bad, key=lambda row: row["line"]) == sorted(
        whole[1], key=lambda row: row["line"]
    )
    assert [d["_line"] for d in docs] == [i for i in range(30) if i not in (7, 12)]
    assert sorted(locations(bad)) == [("bad-input:invalid-utf8", 12), ("bad-input:missing-text", 7)]


def test_a_text_under_another_name_or_of_another_type_says_what_the_field_is(tmp_path):
    """Every row is lost to such a file: each row's detail says what to change."""
    pq.write_table(pa.table({"id": ["a", "b"], "content": TEXTS[:2], "bad\nname": [1, 2]}), tmp_path / "named.parquet")
    _, bad = read(tmp_path / "named.parquet")
    assert locations(bad) == [("bad-input:missing-text", 0), ("bad-input:missing-text", 1)]
    assert (
        bad[0]["detail"]
        == "no 'text' field (fields: id, content, bad\\x0aname); set the source's text_field to the one with the text"
    )
    pq.write_table(pa.table({"text": pa.array([{"body": t} for t in TEXTS[:2]])}), tmp_path / "nested.parquet")
    _, bad = read(tmp_path / "nested.parquet")
    assert [row["detail"] for row in bad] == ["'text' field is struct<body: string>, not a string"] * 2


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


# -- RedPajama-V2 -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rpv2_tree(tmp_path_factory) -> Path:
    """A RedPajama-V2 tree (``rpv2_fixture``), built once: each test damages a copy."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    with gzip.open(SHARED_DATA / "web" / "dolma_cc_en_head_and_provided.jsonl.gz") as f:
        docs = [json.loads(line) for line in f]
    return build_rpv2_tree(tmp_path_factory.mktemp("rpv2") / "rpv2", docs).root


def in_first(lines: list[bytes], name: str, value: bytes, part: int = 2) -> list[bytes]:
    """The signals lines with part ``part`` (0 start, 1 end, 2 value) of the first
    document's first ``name`` span replaced by ``value``."""
    head, rest = lines[0].split(f'"{name}": [['.encode(), 1)
    span, after = rest.split(b"]", 1)
    parts = span.split(b", ")
    parts[part] = value
    return [head + f'"{name}": [['.encode() + b", ".join(parts) + b"]" + after, *lines[1:]]


LINE_SIGNAL = "rps_lines_ending_with_terminal_punctution_mark"  # the first: its spans give the lines
SIGNALS_DAMAGE = {
    # what is done to the head file's signals lines: the kind of its documents' rows (None: read)
    "one line more": (lambda lines: lines + lines[-1:], "bad-input:signals-mismatch"),
    "lines swapped": (lambda lines: [lines[1], lines[0], *lines[2:]], "bad-input:signals-mismatch"),
    "a value that is text": (
        lambda lines: in_first(lines, "rps_doc_word_count", b'"12"'),
        "bad-input:signals-unreadable",
    ),
    "a line start that is no integer": (
        lambda lines: in_first(lines, LINE_SIGNAL, b"0.5", 0),
        "bad-input:signals-unreadable",
    ),
    "NaN and Infinity, as Python's json writes them": (
        lambda lines: in_first(in_first(lines, "rps_doc_word_count", b"NaN"), "rps_doc_curly_bracket", b"Infinity"),
        None,
    ),
}


@pytest.mark.parametrize("damage", SIGNALS_DAMAGE, ids=list(SIGNALS_DAMAGE))
def test_signals_that_do_not_line_up_quarantine_their_documents_at_each_line(rpv2_tree, tmp_path, damage):
    root = shutil.copytree(rpv2_tree, tmp_path / "rpv2")
    signals = root / "quality_signals" / "2023-06" / "0000" / "en_head.signals.json.gz"
    change, kind = SIGNALS_DAMAGE[damage]
    signals.write_bytes(gzip.compress(b"".join(change(gzip.decompress(signals.read_bytes()).splitlines(True)))))
    docs, bad = [], []
    documents = root / "documents" / "2023-06" / "0000" / "en_head.json.gz"
    for chunk in read_input(documents, InputSpec(source="web", file_key="d"), "redpajama-v2"):
        docs += chunk.docs.to_pylist() if chunk.docs is not None else []
        bad += chunk.bad.to_pylist() if chunk.bad is not None else []
    if kind is None:  # read as floats: the column_filter stage reads a NaN as null, an inf as a value
        assert not bad and len(docs) == 5
        assert math.isnan(docs[0]["rps_doc_word_count"]) and docs[0]["rps_doc_curly_bracket"] == math.inf
    else:
        assert not docs and locations(bad) == [(kind, line) for line in range(1, 6)]
        assert all("en_head" in row["detail"] for row in bad)


# -- paths ------------------------------------------------------------------------------------


def test_a_literal_name_holding_a_wildcard_or_a_folder_is_told_how_to_name_it(tmp_path):
    """``part[1].jsonl`` is a character class to glob, and a folder holds inputs but is
    none: the one-line refusal says so, and the escaped name it suggests reads the file."""
    (tmp_path / "part[1].jsonl").write_bytes(jsonl(0, 2))
    (tmp_path / "folder").mkdir()
    with pytest.raises(SourceFilesError, match=r"wildcards: write \[\*\] \[\?\] \[\[\]"):
        source_files("web", ["part[1].jsonl"], tmp_path, None)
    assert source_files("web", ["part[[]1].jsonl"], tmp_path, None) == [tmp_path / "part[1].jsonl"]
    with pytest.raises(
        SourceFilesError, match=r"it is a folder: name its files, with a pattern such as /\*.jsonl after it"
    ):
        source_files("web", ["folder/"], tmp_path, None)
    with pytest.raises(SourceFilesError) as refused:
        source_files("web", ["absent[1].jsonl"], tmp_path, None)
    assert str(refused.value).endswith("absent[1].jsonl)")  # nothing of that name: no hint


@pytest.mark.parametrize(
    ("compress", "tool"), [(zstd, "zstd -d"), (bz2.compress, "bzip2 -d"), (lzma.compress, "xz -d")]
)
def test_a_warc_compressed_otherwise_than_gzip_is_one_row_saying_so(tmp_path, compress, tool):
    """``.warc.zst`` (ArchiveTeam's) and friends: not a header that never ends at byte 0."""
    path = tmp_path / "records.warc.zst"
    path.write_bytes(b"".join(compress(warc_record(i)) for i in range(2)))
    docs, bad = read(path)
    assert not docs and locations(bad) == [("bad-input:unreadable-file", 0)]
    assert f"compressed WARC; WARC files are read plain or gzipped: {tool} it first" in bad[0]["detail"]


# -- a run over them --------------------------------------------------------------------------


def wet_conversion(i: int) -> bytes:
    text = f"Converted text of page {i}, as a WET file holds it.".encode()
    head = (
        f"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Record-ID: <urn:uuid:wet{i:05d}>\r\n"
        f"WARC-Date: 2024-04-25T16:24:44Z\r\nWARC-Target-URI: https://example.com/wet{i}\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(text)}\r\n\r\n"
    )
    return head.encode() + text + b"\r\n\r\n"


def test_a_run_over_hostile_sources_keeps_the_good_quarantines_the_rest_and_resumes(tmp_path):
    """WARC and WET files in one source through ``extract`` (a WET record has its text
    and no HTML: it passes through), a JSON array, an empty object and a
    dictionary-compressed frame beside good JSON lines, and Parquet text stored as bytes:
    the run ends, every good document is out, the rest is in the ledger at its place, and
    a rerun does nothing again."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "pages.warc.gz").write_bytes(member(warc_record(0)) + b"junk" + member(warc_record(1)) + member(b""))
    (inputs / "pages.warc.wet.gz").write_bytes(member(wet_conversion(0)) + member(wet_conversion(1)))
    (inputs / "array.json").write_text("[\n" + json.dumps({"id": "arr", "text": TEXTS[0]}) + "\n]\n")
    (inputs / "objects.jsonl").write_text(json.dumps({"id": "obj", "text": TEXTS[2], "meta": {}}) + "\n")
    (inputs / "frames.jsonl.zst").write_bytes(zstd(jsonl(0, 3)) + dictionary_frame(jsonl(3, 5)))
    pq.write_table(
        pa.table({"id": ["b0", "b1"], "text": pa.array([TEXTS[1].encode(), b"\xff"], pa.binary())}),
        inputs / "b.parquet",
    )
    config = tmp_path / "run.toml"
    config.write_text(
        '[sources.web]\npaths = ["in/*.warc*"]\n[sources.files]\npaths = ["in/*.json*", "in/*.parquet"]\n'
        '[[stages]]\nname = "extract"\nsources = ["web"]\n[[stages]]\nname = "normalize"\n'
    )
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    parts = sorted((tmp_path / "out" / "docs").rglob("*.parquet"))  # sources differ in their columns
    docs = {row["id"]: row for part in parts for row in pq.read_table(part).to_pylist()}
    assert sorted(docs) == sorted(
        [
            "<urn:uuid:00000000>",
            "<urn:uuid:00000001>",
            "<urn:uuid:wet00000>",
            "<urn:uuid:wet00001>",
            "arr",
            "obj",
            "j0",
            "j1",
            "j2",
            "b0",
        ]
    )
    assert docs["<urn:uuid:00000001>"]["text"] == "Page 1." and docs["<urn:uuid:wet00001>"]["text"].startswith(
        "Converted"
    )
    assert manifest["bad_input"] == {
        "bad-input:warc-garbage": 1,
        "bad-input:broken-json": 2,
        "bad-input:corrupt-zstd": 1,
        "bad-input:invalid-utf8": 1,
    }
    ledger = {
        (r["file"].rsplit("/", 1)[-1], r["line"]): r["reason"]
        for r in pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    }
    assert ledger == {
        ("pages.warc.gz", len(member(warc_record(0)))): "bad-input:warc-garbage",
        ("array.json", 1): "bad-input:broken-json",
        ("array.json", 3): "bad-input:broken-json",
        ("frames.jsonl.zst", 4): "bad-input:corrupt-zstd",
        ("b.parquet", 1): "bad-input:invalid-utf8",
    }
    assert manifest["balance"] == {"input": 15, "output": 10, "rejected": 5}
    again = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert again["balance"] == manifest["balance"] and again["bad_input"] == manifest["bad_input"]


def test_input_names_as_long_as_the_file_system_allows_run_and_keep_their_units_apart(tmp_path):
    """A unit is named by its input file, and its outputs' temporaries are 50-odd bytes
    longer: a legal 250-byte input name made the run fail with 'File name too long'. Two
    long names that differ only at the end stay two units; a rerun does nothing again."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    names = ["a" * 240 + "1.jsonl", "a" * 240 + "2.jsonl", "é" * 120 + ".jsonl"]
    for k, name in enumerate(names):
        (inputs / name).write_text(json.dumps({"id": f"d{k}", "text": TEXTS[k]}) + "\n")
    config = tmp_path / "run.toml"
    config.write_text(
        '[run]\ngroup_bytes = 0\n[sources.web]\npaths = ["in/*.jsonl"]\n'
        '[[stages]]\nname = "dedup"\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n'
    )
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert manifest["stages"]["tokenize"]["output"] == 3
    written = [path.name for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert max(len(name.encode()) for name in written) <= 200
    assert len(list((tmp_path / "out" / "tokens" / "web").glob("*.bin"))) == 3
    again = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert again["stages"]["tokenize"] == manifest["stages"]["tokenize"]
