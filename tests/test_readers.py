"""Every reader on real files: documents, ids, kept fields, and streaming in bounded chunks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, write_jsonl

from pipeline.formats.hf_dataset_folder import expand_hf_folder, is_hf_folder
from pipeline.readers import InputSpec, read_input


def read_all(path: Path, **spec_options) -> tuple[pa.Table | None, list[dict], dict]:
    spec = InputSpec(source="web", file_key=path.name, **spec_options)
    docs, bad, extra = [], [], {}
    for chunk in read_input(path, spec):
        if chunk.docs is not None:
            docs.append(chunk.docs)
        if chunk.bad is not None:
            bad.extend(chunk.bad.to_pylist())
        extra.update(chunk.extra)
    # Blocks may infer different types for the same field (a struct with other keys):
    # unify the way a Parquet dataset reader would.
    table = pa.concat_tables([pa.Table.from_batches([d]) for d in docs], promote_options="permissive") if docs else None
    return table, bad, extra


def jsonl_records(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_jsonl_gz_real_corpus_keeps_ids_text_and_fields(shared_data):
    path = shared_data / "web" / "dolma_ccmain_20190717_00140.jsonl.gz"
    records = jsonl_records(path)
    table, bad, extra = read_all(path, block_bytes=256 << 10)  # many blocks
    # Pages whose text is empty are quarantined under their own id, with their line.
    empty = [(i + 1, r["id"]) for i, r in enumerate(records) if not r["text"].strip()]
    assert [(b["line"], b["id"]) for b in bad] == empty and empty
    assert {b["reason"] for b in bad} == {"bad-input:empty-text"}
    expected = [r for r in records if r["text"].strip()]
    assert table.num_rows == len(expected)
    assert table.column("id").to_pylist() == [r["id"] for r in expected]
    assert table.column("text").to_pylist() == [r["text"] for r in expected]
    assert set(table.column("source").to_pylist()) == {"web"}
    # The input's own `source` field is kept under a prefixed name; other fields as they are.
    assert table.column("input_source").to_pylist() == [r["source"] for r in expected]
    assert "metadata" in table.column_names
    assert table.column("_line").to_pylist() == [i + 1 for i, r in enumerate(records) if r["text"].strip()]
    assert extra["bytes"] == path.stat().st_size


def test_c4_json_gz_keeps_its_fields():
    path = SAMPLE / "web" / "c4_guardian.json.gz"
    table, bad, _ = read_all(path)
    expected = jsonl_records(path)
    assert bad == [] and table.num_rows == len(expected) == 10
    assert table.column("added").to_pylist()[0] is not None
    assert table.column("text").to_pylist() == [r["text"] for r in expected]


def test_c4_shape_text_timestamp_url(tmp_path):
    records = [
        {"text": "First page.\nSecond line.", "timestamp": "2019-04-25T12:57:54Z", "url": "https://a.example/x"},
        {"text": "Another page.", "timestamp": "2019-04-20T08:01:02Z", "url": "https://b.example/y"},
    ]
    path = write_jsonl(tmp_path / "c4-train.00000-of-01024.json.gz", records)
    table, bad, _ = read_all(path)
    assert bad == []
    assert table.column("url").to_pylist() == [r["url"] for r in records]
    assert table.column("timestamp").null_count == 0
    # No id in C4: the id is the file and line, stable across runs.
    assert table.column("id").to_pylist() == [f"{path.name}:1", f"{path.name}:2"]


def test_redpajama_jsonl_with_meta(shared_data, tmp_path):
    source = shared_data / "math" / "datajuicer_arxiv_sample.jsonl.gz"
    expected = jsonl_records(source)
    plain = tmp_path / "arxiv.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in expected))
    table, bad, _ = read_all(plain)
    assert bad == [] and table.num_rows == len(expected)
    assert table.column("meta").to_pylist()[0] == expected[0]["meta"]


def test_multi_member_gzip_is_read_whole(tmp_path):
    records = [{"text": f"document {i}"} for i in range(6)]
    first = gzip.compress("".join(json.dumps(r) + "\n" for r in records[:3]).encode())
    second = gzip.compress("".join(json.dumps(r) + "\n" for r in records[3:]).encode())
    path = tmp_path / "joined.jsonl.gz"
    path.write_bytes(first + second)
    table, bad, _ = read_all(path)
    assert bad == [] and table.column("text").to_pylist() == [r["text"] for r in records]


def test_blank_lines_do_not_shift_locations(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text('{"text": "a"}\n\n   \n{"text": "b"}\n\n{"text": "c"}')
    table, bad, _ = read_all(path)
    assert bad == []
    assert table.column("_line").to_pylist() == [1, 4, 6]
    assert table.column("id").to_pylist() == ["gaps.jsonl:1", "gaps.jsonl:4", "gaps.jsonl:6"]


def test_parquet_real_docs(shared_data, tmp_path):
    records = jsonl_records(shared_data / "code" / "python_stdlib.jsonl.gz")[:300]
    path = tmp_path / "code.parquet"
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=64)
    table, bad, extra = read_all(path, batch_rows=50)
    empty = [i for i, r in enumerate(records) if not r["text"].strip()]
    assert [b["line"] for b in bad] == empty  # empty files are quarantined, by row
    kept = [r for i, r in enumerate(records) if i not in empty]
    assert table.column("id").to_pylist() == [r["id"] for r in kept]
    assert table.column("license").to_pylist() == [r["license"] for r in kept]
    assert extra["sha256"]


def test_hf_save_to_disk_folder_and_dataset_dict(shared_data, tmp_path):
    datasets = pytest.importorskip("datasets")
    records = jsonl_records(shared_data / "math" / "gsm8k.jsonl.gz")[:200]
    ds = datasets.Dataset.from_list(records)
    ds.save_to_disk(str(tmp_path / "gsm8k"))
    assert is_hf_folder(tmp_path / "gsm8k")
    files = expand_hf_folder(tmp_path / "gsm8k")
    texts = []
    for f in files:
        table, bad, _ = read_all(f)
        assert bad == []
        texts += table.column("text").to_pylist()
        assert "question" in table.column_names
    assert texts == [r["text"] for r in records]

    datasets.DatasetDict({"train": ds.select(range(150)), "test": ds.select(range(150, 200))}).save_to_disk(
        str(tmp_path / "dd")
    )
    files = expand_hf_folder(tmp_path / "dd")
    assert [f.parent.name for f in files] == ["train", "test"]
    assert sum(read_all(f)[0].num_rows for f in files) == 200


def test_streaming_memory_is_bounded_by_block_size(shared_data):
    """Each batch covers at most about one block of input, however large the file."""
    path = shared_data / "web" / "web_gold.jsonl.gz"
    block = 512 << 10
    spec = InputSpec(source="web", file_key=path.name, block_bytes=block)
    largest = rows = 0
    for chunk in read_input(path, spec):
        if chunk.docs is not None:
            rows += chunk.docs.num_rows
            text_bytes = chunk.docs.column("text").nbytes
            largest = max(largest, text_bytes)
    assert rows > 2500
    # A block can exceed block_bytes by at most one line (the longest page here is < 1 MB).
    assert largest < block + (1 << 20)
