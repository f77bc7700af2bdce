"""Locations after a zstd frame that could not be read (``readers/jsonl``): how many lines
it held is unknown, so a line after it is named by the compressed offset reading resumed
at and its number from there, ``<file>@<offset>:<line>``: the line ``tail -c +<offset + 1>
FILE | zstd -d`` gives at that number. Lines before any damage keep ``file:line``.
Before, lines after the damage were numbered as if it held one line: a later broken
record's ledger row and a document's id named another line of the file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_config
from test_compressed_jsonl import zstd
from test_readers import read_all

from pipeline.engine.run import run_pipeline

FRAMES = [
    b'{"text": "first frame, one"}\n{"text": "first frame, two"}\n',
    b'{"text": "lost with its frame"}\n{"text": "lost too"}\n{"text": "and this"}\n' * 5,
    b'{"text": "after the gap"}\n{"text": broken\n{"id": "own", "text": "its own id"}\n'
    b'{"text": "x"}\n{"text": "the last one"}\n',
    b'{"text": "after a second gap"}\n' * 20,  # compressible: a raw block's zeroed bytes would decode
    b'{"text": "then another"}\n{oops\n',
]


def _damaged(tmp_path, damaged=(1,)):
    """The frames, those numbered ``damaged`` corrupted past their header; the file and
    each frame's compressed start."""
    pieces = [bytearray(zstd(frame)) for frame in FRAMES]
    for k in damaged:
        pieces[k][12:-4] = bytes(len(pieces[k]) - 16)
    path = tmp_path / "d.jsonl.zst"
    path.write_bytes(b"".join(pieces))
    return path, [sum(map(len, pieces[:k])) for k in range(len(pieces))]


def _line_at(path, file: str, line: int) -> bytes:
    """The line ``file:line`` names, found as a user would (``zstd -d`` from the offset)."""
    name, _, offset = file.partition("@")
    data = path.read_bytes()[int(offset or 0) :]
    text = b"".join(zstd_frame_texts(data))
    return text.split(b"\n")[line - 1]


def zstd_frame_texts(data: bytes):
    """The decompressed bytes from the start of ``data`` up to the first frame that fails."""
    with pa.CompressedInputStream(pa.BufferReader(data), "zstd") as stream:
        while True:
            try:
                part = stream.read(1)  # a byte at a time: a failing read drops what it decoded
            except OSError:
                return
            if not part:
                return
            yield part


@pytest.mark.parametrize("damaged", [(1,), (1, 3)])
def test_every_location_after_a_skipped_frame_names_its_line(tmp_path, damaged):
    path, starts = _damaged(tmp_path, damaged)
    table, bad, _ = read_all(path)
    resumed = [starts[k + 1] for k in damaged]
    rows = table.to_pylist()
    # Before the damage, the ids are as they always were.
    assert [r["id"] for r in rows[:2]] == ["d.jsonl.zst:1", "d.jsonl.zst:2"]
    assert all(r["id"].startswith(f"d.jsonl.zst@{resumed[0]}:") for r in rows[2:4] if r["id"] != "own")
    for row in rows:  # each document's location is its own line
        file = row.get("_file") or "d.jsonl.zst"
        assert json.loads(_line_at(path, file, row["_line"]))["text"] == row["text"]
        if row["id"] != "own":
            assert row["id"] == f"{file}:{row['_line']}"
    broken = [b for b in bad if b["reason"] == "bad-input:broken-json"]
    assert [(b["file"], b["line"]) for b in broken] == [
        (f"d.jsonl.zst@{resumed[0]}", 2),
        (f"d.jsonl.zst@{resumed[-1]}", 2 if len(damaged) > 1 else 27),
    ]
    for row in broken:
        assert (
            _line_at(path, row["file"], row["line"]) == bytes(row["raw"])
            and row["id"] == f"{row['file']}:{row['line']}"
        )
    lost = [b for b in bad if b["reason"] == "bad-input:corrupt-zstd"]
    assert [(b["file"], b["line"]) for b in lost] == [("d.jsonl.zst", 3)] + [(f"d.jsonl.zst@{resumed[0]}", 6)] * (
        len(damaged) > 1
    )
    assert f"later lines are located as @{resumed[0]}:<line>, counted from there" in lost[0]["detail"]


@pytest.mark.parametrize("packed", [False, True])
def test_a_stage_rejection_after_a_skipped_frame_names_its_line(tmp_path, packed):
    """The stage's ledger row takes the document's location: ``<file>@<offset>:<line>``,
    in a unit of its own and in a pack of small files (which names each row's file)."""
    path, starts = _damaged(tmp_path)
    if packed:
        (tmp_path / "e.jsonl").write_text('{"text": "a small file beside it"}\n')
    paths = '["*.zst", "*.jsonl"]' if packed else '["*.zst"]'
    config = write_config(
        tmp_path / "run.toml", f'[sources.web]\npaths = {paths}\n[[stages]]\nname = "length"\nmin_chars = 5\n'
    )
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    ledger = pq.read_table(tmp_path / "out" / "rejects").to_pylist()
    (short,) = [r for r in ledger if r["stage"] == "length"]
    assert short["text"] == "x" and (short["file"].rsplit("/", 1)[-1], short["line"]) == (f"d.jsonl.zst@{starts[2]}", 4)
    assert short["id"] == f"{short['file']}:4"
    kept = pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist()
    assert "_file" not in pq.read_schema(next((tmp_path / "out" / "docs").rglob("*.parquet"))).names
    assert sorted(kept)[:2] == [f"{short['file'].rsplit('@', 1)[0]}:1", f"{short['file'].rsplit('@', 1)[0]}:2"]
