"""Hostile input through ``read_input``: every bad record is quarantined with its reason
and location, nothing raises, nothing kills the process, every string yielded is valid
UTF-8, and kept + quarantined = input records (a file that cannot be read counts as one).

Each case is one file; the table says what must come out of it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA

from pipeline.formats.hf_dataset_folder import expand_hf_folder
from pipeline.readers import InputSpec, rawfile, read_input
from pipeline.readers.common import StrictModeError
from pipeline.readers.nesting import MAX_DEPTH, too_deep_lines

TESTS = Path(__file__).resolve().parent
GOOD = [{"id": f"g{i}", "text": f"An ordinary document, number {i}."} for i in range(4)]


def jsonl(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def around(bad: bytes) -> bytes:
    """Two good lines, ``bad`` as line 3, two good lines."""
    return jsonl(GOOD[:2]) + bad + b"\n" + jsonl(GOOD[2:])


def nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    """A JSON object line with a good text and a field nested ``depth`` levels in all."""
    return b'{"id": "deep", "text": "fine", "m": ' + opener * (depth - 1) + b"1" + closer * (depth - 1) + b"}"


# Every byte value, 4 times: line 1 holds bytes 0-9 (valid UTF-8, not JSON), lines 2-5
# hold bytes >= 0x80 (invalid UTF-8).
GARBAGE = bytes(range(256)) * 4
GARBAGE_REASONS = Counter({"invalid-utf8": 4, "broken-json": 1})


def invalid_strings(values: list[bytes]) -> pa.Array:
    """A string array holding these bytes as they are, valid UTF-8 or not."""
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    )


def mis_encoded_table() -> pa.Table:
    """6 rows; rows 1-4 hold invalid UTF-8 in the id, the text, a struct field, a list."""
    ok = [b"fine"] * 6
    return pa.table(
        {
            "id": invalid_strings([b"r0", b"r1\xff", b"r2", b"r3", b"r4", b"r5"]),
            "text": invalid_strings([b"text 0", b"text 1", b"caf\xe9 2", b"text 3", b"text 4", b"text 5"]),
            "meta": pa.StructArray.from_arrays([invalid_strings(ok[:3] + [b"\xc3("] + ok[4:])], ["k"]),
            "tags": pa.ListArray.from_arrays(
                pa.array(np.arange(7, dtype=np.int32)), invalid_strings(ok[:4] + [b"\xed\xa0\x80"] + ok[5:])
            ),
        }
    )


MIS_ENCODED = {1: "invalid-utf8", 2: "invalid-utf8", 3: "invalid-utf8", 4: "invalid-utf8"}
TABLE = pa.table({"id": [f"d{i}" for i in range(300)], "text": [f"document {i} " * 20 for i in range(300)]})


def write_parquet(table: pa.Table, **options) -> Callable[[Path], None]:
    return lambda path: pq.write_table(table, path, **options)


def write_arrow_stream(table: pa.Table, batch_rows: int = 100, keep: float = 1.0) -> Callable[[Path], None]:
    """An Arrow stream as ``datasets`` writes it; ``keep`` < 1 cuts it short."""

    def build(path: Path) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
        data = sink.getvalue().to_pybytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return build


def parquet_damaged_in_second_row_group(path: Path) -> None:
    """Row groups of 100 rows; the page header of the second one's text is overwritten."""
    pq.write_table(TABLE, path, row_group_size=100, use_dictionary=False)
    page = pq.ParquetFile(path).metadata.row_group(1).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    data[page : page + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))


def arrow_with_damaged_offsets(path: Path) -> None:
    """Two batches of 3 rows; the second's string offsets run backwards (a flipped bit
    in a mapped file): not a UTF-8 problem, the batch itself cannot be trusted."""
    offsets = np.array([0, 6, 3, 9], dtype=np.int32)
    damaged = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(offsets), pa.py_buffer(b"abcdefghij")])
    table = pa.table({"text": pa.chunked_array([pa.array(["one", "two", "three"]), damaged])})
    write_arrow_stream(table, batch_rows=3)(path)


def real_web_line_as_latin1(path: Path) -> None:
    """30 real CommonCrawl lines with a text; the 5th, one holding accented letters, is
    re-encoded as latin-1, the way a mis-converted shard carries it."""
    with gzip.open(SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz") as f:
        lines = [line.rstrip(b"\n") for line in f if json.loads(line)["text"].strip()]
    accented = next(line for line in lines if _latin1_with_accents(line))
    good = [line for line in lines if line != accented][:29]
    latin1 = accented.decode().encode("latin-1")
    path.write_bytes(b"\n".join(good[:4] + [latin1] + good[4:]) + b"\n")


def _latin1_with_accents(line: bytes) -> bool:
    try:
        return any(byte > 127 for byte in line.decode().encode("latin-1"))
    except UnicodeEncodeError:
        return False


def missing(path: Path) -> None:
    """No file at all: it vanished between planning and reading."""


def directory(path: Path) -> None:
    """A path that cannot be opened as a file."""
    path.mkdir()


@dataclass
class Case:
    name: str
    content: bytes | Callable[[Path], None]  # the file's bytes, or what writes it
    file_name: str
    reasons: Counter  # bad-input kinds expected (without the ``bad-input:`` prefix)
    kept: int
    records: int  # input records, by the accounting rule (an unreadable file is one)
    where: dict[int, str] = field(default_factory=dict)  # location -> kind, for some bad rows
    readable: bool = True  # the file's bytes can be hashed (extra carries sha256, bytes)
    needs_real_data: bool = False
    isolated: bool = False  # read in a child process: a crash must fail the test, not pytest


CASES = [
    # Invalid UTF-8 inside syntactically valid JSON.
    Case(
        "latin-1 file",
        "".join(
            json.dumps({"id": f"l{i}", "text": "café crème" if i % 2 else "plain"}, ensure_ascii=False) + "\n"
            for i in range(6)
        ).encode("latin-1"),
        "latin1.jsonl",
        Counter({"invalid-utf8": 3}),
        kept=3,
        records=6,
        where={2: "invalid-utf8", 4: "invalid-utf8", 6: "invalid-utf8"},
    ),
    Case(
        "real web line re-encoded as latin-1",
        real_web_line_as_latin1,
        "web.jsonl",
        Counter({"invalid-utf8": 1}),
        kept=29,
        records=30,
        where={5: "invalid-utf8"},
        needs_real_data=True,
    ),
    Case(
        "invalid byte in the text",
        around(b'{"id": "x", "text": "bad \xff\xfe bytes"}'),
        "text.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "invalid byte in the id",
        around(b'{"id": "x\xe9", "text": "good text"}'),
        "id.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "invalid byte in another field",
        around(b'{"id": "x", "text": "good", "url": "http://caf\xe9"}'),
        "field.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "invalid byte in a key",
        around(b'{"id": "x", "text": "good", "k\xe9y": 1}'),
        "key.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "invalid byte in a nested field",
        around(b'{"id": "x", "text": "good", "m": {"a": ["\xc3("]}}'),
        "nested.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "UTF-8-encoded surrogate",
        around(b'{"id": "x", "text": "half \xed\xa0\x80 a pair"}'),
        "surrogate.jsonl",
        Counter({"invalid-utf8": 1}),
        4,
        5,
        {3: "invalid-utf8"},
    ),
    Case(
        "lone surrogate escape",
        around(b'{"id": "x", "text": "half \\ud800 a pair"}'),
        "escape.jsonl",
        Counter({"broken-json": 1}),
        4,
        5,
        {3: "broken-json"},
    ),
    # Nesting.
    Case(
        "nested 5,000 and 100,000 deep among good lines",
        jsonl(GOOD[:1])
        + nested(5_000)
        + b"\n"
        + jsonl(GOOD[1:2])
        + nested(100_000, b'{"a": ', b"}")
        + b"\n"
        + jsonl(GOOD[2:]),
        "deep.jsonl",
        Counter({"too-deep": 2}),
        kept=4,
        records=6,
        where={2: "too-deep", 4: "too-deep"},
        isolated=True,
    ),
    Case(
        "nested 2,000 deep",
        around(nested(2_000)),
        "deep2000.jsonl",
        Counter({"too-deep": 1}),
        4,
        5,
        {3: "too-deep"},
        isolated=True,
    ),
    Case(
        "nested one past the limit",
        around(nested(MAX_DEPTH + 1)),
        "past.jsonl",
        Counter({"too-deep": 1}),
        4,
        5,
        {3: "too-deep"},
    ),
    Case(
        "objects nested at the limit are kept",
        around(nested(MAX_DEPTH, b'{"a": ', b"}")),
        "limit.jsonl",
        Counter(),
        5,
        5,
    ),
    Case("arrays nested at the limit are kept", around(nested(MAX_DEPTH)), "limit_arrays.jsonl", Counter(), 5, 5),
    Case(
        "brackets inside strings do not nest",
        around(jsonl([{"text": "[{" * 5_000 + '\\"' + "]" * 10}]).rstrip()),
        "strings.jsonl",
        Counter(),
        5,
        5,
    ),
    # Garbage, and gzip that is not.
    Case(
        "binary garbage named .jsonl",
        GARBAGE,
        "garbage.jsonl",
        GARBAGE_REASONS,
        0,
        5,
        {1: "broken-json", 2: "invalid-utf8"},
    ),
    Case("binary garbage named .jsonl.gz", GARBAGE, "garbage.jsonl.gz", GARBAGE_REASONS, 0, 5),
    Case("gzipped binary garbage", gzip.compress(GARBAGE, mtime=0), "garbage2.jsonl.gz", GARBAGE_REASONS, 0, 5),
    Case("plain JSON lines named .gz", jsonl(GOOD), "plain.jsonl.gz", Counter(), 4, 4),
    Case("a line of NULs", around(b"\x00" * 1000), "nuls.jsonl", Counter({"broken-json": 1}), 4, 5, {3: "broken-json"}),
    Case(
        "a line of form feeds is not blank",
        around(b"\x0c\x0c"),
        "ff.jsonl",
        Counter({"broken-json": 1}),
        4,
        5,
        {3: "broken-json"},
    ),
    # Text and id of the wrong kind.
    Case(
        "text of every wrong type",
        jsonl(
            GOOD[:1]
            + [
                {"text": 123456789012345678901234567890},
                {"text": {"a": "b"}},
                {"text": ["a"]},
                {"text": True},
                {"text": None},
            ]
            + GOOD[1:]
        ),
        "types.jsonl",
        Counter({"non-string-text": 4, "missing-text": 1}),
        4,
        9,
        {2: "non-string-text", 6: "missing-text"},
    ),
    Case(
        "text too big for a double",
        around(b'{"id": "x", "text": 1e999}'),
        "inf.jsonl",
        Counter({"broken-json": 1}),
        4,
        5,
        {3: "broken-json"},
    ),
    Case(
        "id that is an object or a list keeps its document",
        around(jsonl([{"id": {"a": 1}, "text": "t"}, {"id": [1], "text": "t"}]).rstrip()),
        "ids.jsonl",
        Counter(),
        6,
        6,
    ),
    Case(
        "duplicate key",
        around(b'{"text": "a", "text": "b"}'),
        "dup.jsonl",
        Counter({"unparseable": 1}),
        4,
        5,
        {3: "unparseable"},
    ),
    # Files that cannot be read.
    Case(
        "missing JSON lines file",
        missing,
        "gone.jsonl",
        Counter({"unreadable-file": 1}),
        0,
        1,
        {0: "unreadable-file"},
        readable=False,
    ),
    Case(
        "directory named .jsonl",
        directory,
        "dir.jsonl",
        Counter({"unreadable-file": 1}),
        0,
        1,
        {0: "unreadable-file"},
        readable=False,
    ),
    Case("0-byte Parquet", b"", "empty.parquet", Counter({"unreadable-file": 1}), 0, 1, {0: "unreadable-file"}),
    Case("garbage Parquet", GARBAGE, "garbage.parquet", Counter({"unreadable-file": 1}), 0, 1, {0: "unreadable-file"}),
    Case(
        "Parquet without its footer",
        lambda p: (write_parquet(TABLE)(p), p.write_bytes(p.read_bytes()[:-100])),
        "cut.parquet",
        Counter({"unreadable-file": 1}),
        0,
        1,
        {0: "unreadable-file"},
    ),
    Case(
        "Parquet damaged part-way",
        parquet_damaged_in_second_row_group,
        "damaged.parquet",
        Counter({"unreadable-row": 100}),  # the damaged row group's rows; the third is kept
        200,
        300,
        {100: "unreadable-row", 199: "unreadable-row"},
    ),
    Case(
        "missing Parquet",
        missing,
        "gone.parquet",
        Counter({"unreadable-file": 1}),
        0,
        1,
        {0: "unreadable-file"},
        readable=False,
    ),
    Case("0-byte Arrow", b"", "empty.arrow", Counter({"unreadable-file": 1}), 0, 1, {0: "unreadable-file"}),
    Case("garbage Arrow", GARBAGE, "garbage.arrow", Counter({"unreadable-file": 1}), 0, 1, {0: "unreadable-file"}),
    Case(
        "Arrow stream cut short",
        write_arrow_stream(TABLE, keep=0.8),
        "cut.arrow",
        Counter({"unreadable-file": 1}),
        200,
        201,
        {200: "unreadable-file"},
    ),
    Case(
        "Arrow batch with damaged offsets",
        arrow_with_damaged_offsets,
        "offsets.arrow",
        Counter({"unreadable-row": 3}),
        3,
        6,
        {3: "unreadable-row", 5: "unreadable-row"},
    ),
    Case(
        "missing Arrow",
        missing,
        "gone.arrow",
        Counter({"unreadable-file": 1}),
        0,
        1,
        {0: "unreadable-file"},
        readable=False,
    ),
    # Invalid UTF-8 in Parquet and Arrow string columns.
    Case(
        "Parquet with invalid UTF-8",
        write_parquet(mis_encoded_table()),
        "mis.parquet",
        Counter({"invalid-utf8": 4}),
        2,
        6,
        MIS_ENCODED,
    ),
    Case(
        "Arrow with invalid UTF-8",
        write_arrow_stream(mis_encoded_table(), batch_rows=4),
        "mis.arrow",
        Counter({"invalid-utf8": 4}),
        2,
        6,
        MIS_ENCODED,
    ),
    Case(
        "Parquet with dictionary-encoded text",
        write_parquet(TABLE.set_column(1, "text", TABLE.column("text").dictionary_encode())),
        "dict.parquet",
        Counter(),
        300,
        300,
    ),
]


def summarize(path: Path, strict: bool = False) -> dict:
    """What ``read_input`` makes of ``path``, as plain data (so a child process can report
    it): kept documents, ledger rows, the last chunk's extra, and any yielded batch that
    fails full validation (invalid UTF-8 in a string column)."""
    spec = InputSpec(source="web", file_key=path.name, block_bytes=64 << 10, batch_rows=64, strict=strict)
    kept, bad, invalid, extra = 0, [], [], {}
    try:
        for chunk in read_input(path, spec):
            for batch in (chunk.docs, chunk.bad):
                if batch is not None:
                    try:
                        batch.validate(full=True)
                    except pa.ArrowInvalid as error:
                        invalid.append(str(error))
            kept += chunk.docs.num_rows if chunk.docs is not None else 0
            if chunk.bad is not None:
                bad += [[r["reason"].removeprefix("bad-input:"), r["line"], r["detail"]] for r in chunk.bad.to_pylist()]
            extra.update(chunk.extra)
    except StrictModeError as error:
        return {"strict_error": str(error)}
    return {"kept": kept, "bad": bad, "invalid": invalid, "extra": extra}


def summarize_in_child(path: Path, strict: bool = False) -> dict:
    """``summarize`` in a fresh interpreter: a segfault shows as a failed test."""
    code = (
        "import json, sys; from pathlib import Path; from test_hostile_readers import summarize; "
        f"print(json.dumps(summarize(Path(sys.argv[1]), {strict})))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"reader died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def build(case: Case, folder: Path) -> Path:
    if case.needs_real_data and SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    path = folder / case.file_name
    if isinstance(case.content, bytes):
        path.write_bytes(case.content)
    else:
        case.content(path)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_quarantined_and_balanced(case: Case, tmp_path):
    path = build(case, tmp_path)
    result = (summarize_in_child if case.isolated else summarize)(path)
    assert result["invalid"] == [], "a yielded batch holds invalid UTF-8"
    assert Counter(kind for kind, _, _ in result["bad"]) == case.reasons, result["bad"]
    assert result["kept"] == case.kept
    assert result["kept"] + len(result["bad"]) == case.records  # the balance
    found = {line: kind for kind, line, _ in result["bad"]}
    for line, kind in case.where.items():
        assert found.get(line) == kind, f"expected {kind} at {line}: {result['bad']}"
    assert all(detail for _, _, detail in result["bad"]), "every quarantined row says why"
    if case.readable:
        assert result["extra"]["bytes"] == path.stat().st_size and len(result["extra"]["sha256"]) == 64


def test_raw_bytes_of_an_invalid_line_are_kept(tmp_path):
    path = tmp_path / "a.jsonl"
    line = b'{"id": "x", "text": "caf\xe9"}'
    path.write_bytes(around(line))
    spec = InputSpec(source="web", file_key=path.name)
    rows = [r for chunk in read_input(path, spec) if chunk.bad is not None for r in chunk.bad.to_pylist()]
    assert [(r["id"], r["line"], r["raw"]) for r in rows] == [("a.jsonl:3", 3, line)]


def test_invalid_utf8_rows_of_parquet_keep_their_text_bytes(tmp_path):
    path = tmp_path / "mis.parquet"
    write_parquet(mis_encoded_table())(path)
    rows = [
        r
        for chunk in read_input(path, InputSpec(source="web", file_key=path.name))
        if chunk.bad is not None
        for r in chunk.bad.to_pylist()
    ]
    assert [(r["id"], r["raw"]) for r in rows][:2] == [("mis.parquet:1", b"text 1"), ("mis.parquet:2", b"caf\xe9 2")]
    assert "'id'" in rows[0]["detail"] and "'meta'" in rows[2]["detail"] and "'tags'" in rows[3]["detail"]


def test_object_id_falls_back_to_the_location(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_bytes(jsonl([{"id": {"a": 1}, "text": "t"}]))
    docs = [c.docs for c in read_input(path, InputSpec(source="web", file_key=path.name)) if c.docs is not None]
    assert docs[0].column("id").to_pylist() == ["ids.jsonl:1"]
    assert docs[0].column("input_id").to_pylist() == [{"a": 1}]


def test_renamed_fields_never_collide_with_input_fields(tmp_path):
    """Two output columns of one name would make the docs Parquet unreadable."""
    path = tmp_path / "names.jsonl"
    path.write_bytes(jsonl([{"id": {"a": 1}, "input_id": "theirs", "source": "s", "input_source": "t", "text": "x"}]))
    docs = [c.docs for c in read_input(path, InputSpec(source="web", file_key=path.name)) if c.docs is not None][0]
    assert len(set(docs.schema.names)) == len(docs.schema.names)
    assert docs.column("input_id").to_pylist() == ["theirs"] and docs.column("input_input_id").to_pylist() == [{"a": 1}]
    assert docs.column("input_source").to_pylist() == ["t"] and docs.column("input_input_source").to_pylist() == ["s"]


def test_an_input_field_named_like_the_internal_line_is_kept(tmp_path):
    path = tmp_path / "line.jsonl"
    path.write_bytes(jsonl([{"text": "t", "_line": "theirs"}]))
    docs = [c.docs for c in read_input(path, InputSpec(source="web", file_key=path.name)) if c.docs is not None]
    assert docs[0].column("input__line").to_pylist() == ["theirs"]
    assert docs[0].column("_line").to_pylist() == [1]


@pytest.mark.parametrize(
    "case_name, location, kind",
    [
        ("latin-1 file", "latin1.jsonl:2", "invalid-utf8"),
        ("nested 5,000 and 100,000 deep among good lines", "deep.jsonl:2", "too-deep"),
        ("0-byte Parquet", "empty.parquet:0", "unreadable-file"),
        ("Parquet with invalid UTF-8", "mis.parquet:1", "invalid-utf8"),
        ("Arrow stream cut short", "cut.arrow:200", "unreadable-file"),
        ("missing JSON lines file", "gone.jsonl:0", "unreadable-file"),
    ],
)
def test_strict_stops_at_the_first_naming_file_and_line(case_name, location, kind, tmp_path):
    case = next(c for c in CASES if c.name == case_name)
    result = summarize_in_child(build(case, tmp_path), strict=True)
    assert location in result["strict_error"] and kind in result["strict_error"]


@pytest.mark.parametrize("state", ['{"_data_files": [{"filename": ', "[" * 100_000], ids=["cut-short", "too-deep"])
def test_hf_folder_with_broken_state_json_still_lists_its_files(tmp_path, state):
    folder = tmp_path / "ds"
    folder.mkdir()
    for i in range(2):
        write_arrow_stream(TABLE.slice(i * 150, 150))(folder / f"data-0000{i}-of-00002.arrow")
    (folder / "state.json").write_text(state)
    assert expand_hf_folder(folder) == [folder / "data-00000-of-00002.arrow", folder / "data-00001-of-00002.arrow"]


def test_hf_folder_with_broken_arrow_file(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    write_arrow_stream(TABLE)(folder / "data-00000-of-00002.arrow")
    (folder / "data-00001-of-00002.arrow").write_bytes(GARBAGE)
    (folder / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": f"data-0000{i}-of-00002.arrow"} for i in range(2)]})
    )
    results = [summarize(f) for f in expand_hf_folder(folder)]
    assert [r["kept"] for r in results] == [300, 0]
    assert [kind for kind, _, _ in results[1]["bad"]] == ["unreadable-file"]


def test_permission_denied_is_an_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "secret.jsonl"
    path.write_bytes(jsonl(GOOD))
    path.chmod(0)
    if os.geteuid() == 0:  # root opens whatever the mode: fail the open as for anyone else

        def denied(file, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(file))

        monkeypatch.setattr(rawfile, "open", denied, raising=False)
    result = summarize(path)
    assert [(kind, line) for kind, line, _ in result["bad"]] == [("unreadable-file", 0)] and result["kept"] == 0
    assert "Permission denied" in result["bad"][0][2]


def reference_too_deep(block: bytes, limit: int) -> list[int]:
    """The nesting scan, written plainly: lines whose bracket depth outside strings
    exceeds ``limit``."""
    found = []
    for number, line in enumerate(block.split(b"\n")):
        depth, in_string, escaped = 0, False, False
        for byte in line:
            if in_string:
                escaped, in_string = (False, in_string) if escaped else (byte == 92, byte != 34)
            elif byte == 34:
                in_string = True
            elif byte in b"[{":
                depth += 1
                if depth > limit:
                    found.append(number)
                    break
            elif byte in b"]}":
                depth = max(depth - 1, 0)
    return found


def test_nesting_scan_agrees_with_a_plain_one_on_random_json_bytes():
    """Random strings of brackets, quotes, backslashes and newlines: the word-at-a-time
    native scan must find exactly the lines the plain one does."""
    rng = np.random.default_rng(7)
    dense = np.frombuffer(b'[]{}"\\\\ax\n', np.uint8)
    sparse = np.frombuffer(b'[]{}"\\\\\n' + b"a" * 60, np.uint8)  # long plain runs: whole words skipped
    for trial in range(4000):
        alphabet = dense if trial % 2 else sparse
        block = alphabet[rng.integers(0, len(alphabet), rng.integers(1, 400))].tobytes()
        limit = int(rng.integers(0, 4))
        assert too_deep_lines(block, limit).tolist() == reference_too_deep(block, limit), (block, limit)
