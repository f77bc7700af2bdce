"""A pack of small JSON-lines files parsed together (readers/jsonl_pack.py) keeps and
rejects exactly what reading them one by one does, hostile files among them, each row
naming its own file and line."""

from __future__ import annotations

import gzip
import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_config

from pipeline.engine.run import run_pipeline
from pipeline.readers.common import InputSpec
from pipeline.readers.jsonl_pack import scanned_file, whole_file

DOCUMENT = "A page of plain English text, long enough to be a document of its own."


def _line(**fields) -> str:
    return json.dumps(fields) + "\n"


def _files(folder):
    """Small files of every shape a pack meets, in name order."""
    folder.mkdir()
    files = {
        "a.jsonl": _line(id="a1", text=DOCUMENT, url="x") + _line(id="a2", text=DOCUMENT + " Two."),
        "b.jsonl": _line(id="b1", text=DOCUMENT).rstrip("\n"),  # no newline at the end
        "c.jsonl": _line(id="c1", text=DOCUMENT) + "\n  \n" + _line(id="c2", text=DOCUMENT),  # blank lines
        "d.jsonl": '{"id": "d1", "text": \n' + _line(id="d2", text=DOCUMENT),  # a broken line
        "e.jsonl": "",
        "f.jsonl": _line(id="f1", body="no text field") + _line(id="f2", text=DOCUMENT, lang="en"),
        "h.jsonl": _line(text=DOCUMENT) + _line(text=DOCUMENT + " Again."),  # no ids: file:line
        "i.jsonl": _line(id="i1", text=DOCUMENT, extra={"nested": [1, 2]}),
        "j.jsonl": _line(id="j1", text=DOCUMENT),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "g.jsonl").write_bytes(b"\xef\xbb\xbf" + _line(id="g1", text=DOCUMENT).encode())  # a BOM
    (folder / "k.jsonl").write_bytes(
        b'{"id": "k1", "text": "bad \xff byte"}\n' + _line(id="k2", text=DOCUMENT).encode()
    )
    with gzip.open(folder / "l.jsonl.gz", "wt") as f:
        f.write(_line(id="l1", text=DOCUMENT))
    for n in range(40):  # a run of clean one-document files: the parse-together path
        (folder / f"m{n:02d}.jsonl").write_text(_line(id=f"m{n}", text=f"{DOCUMENT} Number {n}."))


def _rows(out, sub: str, columns: list[str]) -> list[tuple]:
    tables = [pq.read_table(path) for path in sorted((out / sub).rglob("*.parquet"))]
    table = pa.concat_tables(tables, promote_options="permissive")
    return sorted(zip(*(table.column(name).to_pylist() for name in columns)), key=repr)


# The default block, and one of a few files, so that clean files are parsed together
# before, between and after the others, and some wait on past a file that is not clean.
@pytest.mark.parametrize("block_bytes", [4 << 20, 512])
def test_a_pack_keeps_and_rejects_what_reading_file_by_file_does(tmp_path, block_bytes):
    _files(tmp_path / "in")
    base = (
        f'[run]\nblock_bytes = {block_bytes}\n[sources.web]\npaths = ["in/*.jsonl*"]\n[[stages]]\nname = "normalize"\n'
    )
    packed = run_pipeline(write_config(tmp_path / "packed.toml", base), tmp_path / "packed", workers=1, quiet=True)
    one_by_one = write_config(tmp_path / "files.toml", base.replace("[run]\n", "[run]\ngroup_bytes = 0\n"))
    alone = run_pipeline(one_by_one, tmp_path / "alone", workers=1, quiet=True)
    units = [len(list((tmp_path / out / "stats" / "segment-0" / "web").iterdir())) for out in ("packed", "alone")]
    assert units == [1, 52]
    assert packed["balance"] == alone["balance"]
    documents = ["id", "text", "source"]
    assert _rows(tmp_path / "packed", "docs", documents) == _rows(tmp_path / "alone", "docs", documents)
    ledger = ["id", "reason", "file", "line", "detail"]
    rejected = _rows(tmp_path / "packed", "rejects", ledger)
    assert rejected == _rows(tmp_path / "alone", "rejects", ledger)
    assert {(row[0], row[2], row[3]) for row in rejected} >= {("d.jsonl:1", "d.jsonl", 1), ("f1", "f.jsonl", 1)}
    ids = {row[0] for row in _rows(tmp_path / "packed", "docs", documents)}
    assert {"h.jsonl:1", "h.jsonl:2", "c2", "b1", "g1", "l1", "m39"} <= ids
    inputs = [json.loads((tmp_path / out / "manifest.json").read_text())["inputs"] for out in ("packed", "alone")]
    assert inputs[0] == inputs[1]  # each file's size and sha256, whether read whole or streamed
    assert {i["path"]: i["sha256"] for i in inputs[0]}["g.jsonl"] == hashlib.sha256(
        (tmp_path / "in" / "g.jsonl").read_bytes()
    ).hexdigest()


def test_a_small_file_is_read_whole_to_its_end_and_only_if_plain_and_small(tmp_path):
    """``whole_file`` reads past the size its stat gave (a file grown since, or one of
    /proc, whose stat says 0) and gives None for a compressed file or one over the limit,
    which the streaming read then takes."""
    path = tmp_path / "a.jsonl"
    text = _line(id="a1", text=DOCUMENT * 2000).encode()
    path.write_bytes(text)
    assert whole_file(str(path), len(text), 1 << 20) == text
    assert whole_file(str(path), 10, 1 << 20) == text
    assert whole_file(str(path), len(text), len(text) - 1) is None
    gzipped = tmp_path / "b.jsonl"  # gzip bytes under a plain name: the codec is told by the bytes
    gzipped.write_bytes(gzip.compress(text))
    assert whole_file(str(gzipped), gzipped.stat().st_size, 1 << 20) is None


def test_a_small_compressed_file_that_inflates_past_a_block_is_read_streaming(tmp_path):
    """A pack holds files small on disk; one may inflate to any size, so only a file of one
    block is held whole, and the rest are read block by block, as alone."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text(_line(id="a1", text=DOCUMENT))
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:  # 2.4 MB of text in about 20 KB
        f.writelines(_line(id=f"b{n}", text=DOCUMENT * 8) for n in range(4000))
    (folder / "c.jsonl").write_text(_line(id="c1", text=DOCUMENT))
    base = '[sources.web]\npaths = ["in/*.jsonl*"]\n[[stages]]\nname = "normalize"\n'
    run = "[run]\nblock_bytes = 65536\n"
    run_pipeline(write_config(tmp_path / "packed.toml", run + base), tmp_path / "packed", workers=1, quiet=True)
    alone = write_config(tmp_path / "files.toml", run + "group_bytes = 0\n" + base)
    run_pipeline(alone, tmp_path / "alone", workers=1, quiet=True)
    documents = ["id", "text", "source"]
    packed_rows = _rows(tmp_path / "packed", "docs", documents)
    assert packed_rows == _rows(tmp_path / "alone", "docs", documents) and len(packed_rows) == 4002
    spec = InputSpec(source="web", file_key="b.jsonl.gz", block_bytes=65536)
    assert scanned_file(folder / "b.jsonl.gz", spec) is None  # not held whole
    assert scanned_file(folder / "a.jsonl", spec) is not None
