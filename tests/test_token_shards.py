"""Token shard files: Megatron's layout byte for byte, megatron-core reads them, merge, inspect, train."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA

from pipeline.commands.shards import shards_group
from pipeline.commands.tokenizer import tokenizer_group
from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.shard_merge import merge_shards
from pipeline.formats.token_shards import IncompatibleShards, ShardWriter, read_sidecar, write_index
from pipeline.stage import UnitContext
from pipeline.text.tokenizer_training import hash_threshold, run_doc_files, sample_segments
from pipeline.text.tokenizers import load_tokenizer
from pipeline.util.atomic import writer_tag
from stages.tokenize import Tokenize

SHARED = SHARED_DATA or Path(__file__).parent / "no-shared-data"  # tests needing it skip
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared data folder absent")

# Megatron-LM's documented dtype codes (megatron/core/datasets/indexed_dataset.py, class DType).
MEGATRON_CODES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}


def read_megatron_index(idx_path: Path) -> dict:
    """An independent reader of a Megatron ``.idx``, written from the documented layout."""
    data = idx_path.read_bytes()
    assert data[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    sequences, doc_count = struct.unpack_from("<QQ", data, 18)
    pos = 34
    sizes = struct.unpack_from(f"<{sequences}i", data, pos)
    pos += 4 * sequences
    pointers = struct.unpack_from(f"<{sequences}q", data, pos)
    pos += 8 * sequences
    doc_index = struct.unpack_from(f"<{doc_count}q", data, pos)
    pos += 8 * doc_count
    assert pos == len(data), "trailing bytes after the document index"
    return {
        "version": version,
        "dtype": np.dtype(MEGATRON_CODES[code]),
        "sizes": list(sizes),
        "pointers": list(pointers),
        "doc_index": list(doc_index),
    }


def read_documents(prefix: Path) -> list[list[int]]:
    """Every document's tokens, through the independent reader only."""
    index = read_megatron_index(Path(str(prefix) + ".idx"))
    data = Path(str(prefix) + ".bin").read_bytes()
    dtype = index["dtype"]
    return [
        np.frombuffer(data, dtype=dtype, count=n, offset=p).tolist() for n, p in zip(index["sizes"], index["pointers"])
    ]


DOCS = [[5, 6, 7, 0], [1, 0], [65000, 2, 3, 0], [0]]


def write_shard(prefix: Path, docs: list[list[int]], dtype=np.uint16) -> None:
    writer = ShardWriter(str(prefix) + ".bin", str(prefix) + ".idx", np.dtype(dtype))
    writer.add_document(np.array(docs[0]))
    rest = docs[1:]
    writer.add_documents(np.array([t for d in rest for t in d]), np.array([len(d) for d in rest]))
    writer.close()


def test_index_bytes_follow_megatrons_layout(tmp_path):
    prefix = tmp_path / "s"
    write_shard(prefix, DOCS)
    expected = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8) + struct.pack("<QQ", 4, 5)
    expected += struct.pack("<4i", 4, 2, 4, 1)
    expected += struct.pack("<4q", 0, 8, 12, 20)  # byte offsets: uint16 tokens
    expected += struct.pack("<5q", 0, 1, 2, 3, 4)
    assert (tmp_path / "s.idx").read_bytes() == expected
    assert (tmp_path / "s.bin").read_bytes() == np.array([t for d in DOCS for t in d], "<u2").tobytes()
    assert read_documents(prefix) == DOCS
    ours = IndexedShard(prefix)
    assert [ours[i].tolist() for i in range(len(ours))] == DOCS


def test_int32_shard_and_custom_document_index(tmp_path):
    write_index(tmp_path / "x.idx", np.dtype(np.int32), np.array([3, 2]), np.array([0, 2]))
    (tmp_path / "x.bin").write_bytes(np.array([100000, 1, 2, 3, 4], "<i4").tobytes())
    index = read_megatron_index(tmp_path / "x.idx")
    assert index["dtype"] == np.int32 and index["pointers"] == [0, 12] and index["doc_index"] == [0, 2]
    assert read_documents(tmp_path / "x") == [[100000, 1, 2], [3, 4]]


def tokenize_unit(out_dir: Path, texts: list[str], unit: str, tokenizer="cl100k_base", source="web", start=0) -> Path:
    stage = Tokenize(Tokenize.Options(tokenizer=tokenizer))
    ctx = UnitContext(out_dir=out_dir, source=source, unit=unit)
    stage.open_unit(ctx)
    batch = pa.RecordBatch.from_pydict(
        {
            "id": [f"{unit}-{i}" for i in range(start, start + len(texts))],
            "text": texts,
            "source": [source] * len(texts),
            "score": [float(i) for i in range(len(texts))],
        }
    )
    stage.process(batch, source)
    stage.close_unit(ctx)
    for tmp, final in ctx.pending.items():
        os.replace(tmp, final)
    return out_dir / "tokens" / source / unit


def sample_texts(n: int, offset: int = 0) -> list[str]:
    path = SHARED / "web" / "dolma_ccmain_20190717_00140.jsonl.gz"
    if not path.exists():
        return [f"text {i} with words " * (i % 5 + 1) for i in range(offset, offset + n)]
    with gzip.open(path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, offset, offset + n)]
    return [t for t in texts if t]


def test_stage_shard_read_by_independent_reader(tmp_path):
    texts = sample_texts(20)
    prefix = tokenize_unit(tmp_path, texts, "u")
    docs = read_documents(prefix)
    tok = load_tokenizer("cl100k_base")
    assert [tok.decode(d[:-1]) for d in docs] == texts
    assert all(d[-1] == tok.eos_id for d in docs)


def test_megatron_core_reads_our_shards(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    texts = sample_texts(20)
    for tokenizer in ("gpt2", "cl100k_base"):  # uint16 and int32
        prefix = tokenize_unit(tmp_path / tokenizer, texts, "u", tokenizer=tokenizer)
        theirs = indexed.IndexedDataset(str(prefix))
        ours = IndexedShard(prefix)
        assert len(theirs) == len(ours) == len(texts)
        assert np.array_equal(theirs.sequence_lengths, ours.sizes)
        assert np.array_equal(theirs.document_indices, ours.document_index)
        for i in range(len(ours)):
            assert theirs[i].dtype == ours.dtype
            assert np.array_equal(theirs[i], ours[i])
        assert np.array_equal(theirs.get(3, offset=2, length=5), ours[3][2:7])


def test_megatron_core_builder_writes_the_same_bytes(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    builder = indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16)
    for doc in DOCS:
        builder.add_document(np.array(doc, dtype=np.int64), [len(doc)])
    builder.finalize(str(tmp_path / "m.idx"))
    write_shard(tmp_path / "p", DOCS)
    assert (tmp_path / "m.idx").read_bytes() == (tmp_path / "p.idx").read_bytes()
    assert (tmp_path / "m.bin").read_bytes() == (tmp_path / "p.bin").read_bytes()


# --- merge ---------------------------------------------------------------------------------------


def test_merge_streams_shards_into_one(tmp_path, monkeypatch):
    import pipeline.formats.shard_merge as sm

    monkeypatch.setattr(sm, "COPY_BUFFER_BYTES", 1000)  # many blocks per input
    a = tokenize_unit(tmp_path, sample_texts(12), "a")
    b = tokenize_unit(tmp_path, sample_texts(9, offset=12), "b")
    meta = merge_shards(tmp_path / "out" / "merged", [a, b])
    merged = tmp_path / "out" / "merged"
    docs = read_documents(merged)
    assert docs == read_documents(a) + read_documents(b)
    assert read_megatron_index(Path(str(merged) + ".idx"))["doc_index"] == list(range(len(docs) + 1))
    side = read_sidecar(merged)
    assert side == meta and side["documents"] == len(docs) and side["tokenizer"] == "cl100k_base"
    rows = pq.read_table(str(merged) + ".docs.parquet")
    assert rows.column("n_tokens").to_pylist() == [len(d) for d in docs]
    assert rows.column("id").to_pylist()[:2] == ["a-0", "a-1"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "merged.bin",
        "merged.docs.parquet",
        "merged.idx",
        "merged.json",
    ]


def test_merge_replaces_only_a_shard_prep_wrote_and_all_of_it(tmp_path):
    """A user's file named like an output was written over; merging again into a shard
    whose inputs had no .docs.parquet left the old one describing other documents."""
    a = tokenize_unit(tmp_path, sample_texts(4), "a")
    out = tmp_path / "out" / "merged"
    out.parent.mkdir()
    Path(f"{out}.bin").write_text("a file of the user's")
    with pytest.raises(ValueError, match=r"merged\.bin exists and is not part of a token shard prep wrote"):
        merge_shards(out, [a])
    assert Path(f"{out}.bin").read_text() == "a file of the user's"
    Path(f"{out}.bin").unlink()
    merge_shards(out, [a])  # with a .docs.parquet
    bare = tmp_path / "bare" / "b"
    bare.parent.mkdir()
    for suffix in (".bin", ".idx", ".json"):
        Path(f"{bare}{suffix}").write_bytes(Path(f"{a}{suffix}").read_bytes())
    merge_shards(out, [bare])  # again, from an input without one
    assert sorted(p.name for p in out.parent.iterdir()) == ["merged.bin", "merged.idx", "merged.json"]


def test_merge_refuses_an_output_that_is_an_input_by_another_spelling(tmp_path, monkeypatch):
    """`prep shards merge ./a a.idx b.idx` passed the check (a string compare): input a was
    replaced by the merge, which holds b's documents, still beside it in the folder."""
    a = tokenize_unit(tmp_path, sample_texts(4), "a")
    b = tokenize_unit(tmp_path, sample_texts(3, offset=4), "b")
    before = Path(f"{a}.bin").read_bytes()
    monkeypatch.chdir(Path(a).parent)
    for spelling in (f"./{Path(a).name}", Path(a).name, f"{Path(a).parent}/../{Path(a).parent.name}/{Path(a).name}"):
        with pytest.raises(ValueError, match=r"^the output .* is also an input"):
            merge_shards(spelling, [a, b])
    assert Path(f"{a}.bin").read_bytes() == before


def test_merge_refuses_mixed_dtypes_and_tokenizers(tmp_path):
    g = tokenize_unit(tmp_path / "g", ["hello world"], "g", tokenizer="gpt2")
    c = tokenize_unit(tmp_path / "c", ["hello world"], "c", tokenizer="cl100k_base")
    o = tokenize_unit(tmp_path / "o", ["hello world"], "o", tokenizer="o200k_base")
    with pytest.raises(IncompatibleShards, match="uint16|int32"):
        merge_shards(tmp_path / "m1", [g, c])
    with pytest.raises(IncompatibleShards, match="o200k_base"):
        merge_shards(tmp_path / "m2", [c, o])
    bare = tmp_path / "bare"
    write_shard(bare, [[1, 2], [3]], dtype=np.int32)
    with pytest.raises(IncompatibleShards, match="no sidecar"):
        merge_shards(tmp_path / "m3", [c, bare])
    assert not any(p.name.startswith("m") for p in tmp_path.iterdir())


# --- the commands -------------------------------------------------------------------------------


def test_inspect_and_merge_commands(tmp_path):
    texts = sample_texts(8)
    a = tokenize_unit(tmp_path, texts[:5], "a")
    tokenize_unit(tmp_path, texts[5:], "b")
    runner = CliRunner()

    result = runner.invoke(shards_group, ["inspect", str(a) + ".idx", "--json", "--verify"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert (info["documents"], info["dtype"], info["tokenizer"]) == (5, "int32", "cl100k_base")
    assert info["problems"] == [] and info["tokens"] == IndexedShard(a).num_tokens

    result = runner.invoke(shards_group, ["inspect", str(a), "--decode", "2"])
    assert result.exit_code == 0, result.output
    assert result.output == texts[2] + "<|endoftext|>"

    for folder in (tmp_path / "tokens" / "web", tmp_path / "tokens", tmp_path):  # shards, tokens/, the run
        result = runner.invoke(shards_group, ["inspect", str(folder)])
        assert result.exit_code == 0 and "total: 2 shards" in result.output, (folder, result.output)

    result = runner.invoke(shards_group, ["inspect", str(a), "--decode", "99"])
    assert result.exit_code != 0 and "out of range" in result.output

    out = tmp_path / "all"
    result = runner.invoke(shards_group, ["merge", str(out), str(tmp_path / "tokens" / "web")])
    assert result.exit_code == 0, result.output
    assert len(IndexedShard(out)) == len(texts)
    decoded = runner.invoke(shards_group, ["inspect", str(out), "--decode", "6"]).output
    assert decoded == texts[6] + "<|endoftext|>"


def test_inspect_on_a_folder_without_shards_says_where_it_looked(tmp_path):
    (tmp_path / "docs" / "web").mkdir(parents=True)
    result = CliRunner().invoke(shards_group, ["inspect", str(tmp_path)])
    assert result.exit_code == 2 and f"no shard (.bin + .idx) in {tmp_path}, its tokens/" in result.output


def test_inspect_reports_a_damaged_bin(tmp_path):
    a = tokenize_unit(tmp_path, ["hello world", "again"], "a")
    data = bytearray(Path(str(a) + ".bin").read_bytes())
    data[0] ^= 1
    Path(str(a) + ".bin").write_bytes(bytes(data))
    result = CliRunner().invoke(shards_group, ["inspect", str(a), "--verify"])
    assert result.exit_code == 1 and "sha256" in result.output


def make_run(tmp_path: Path) -> Path:
    """A run folder with kept documents as the runner writes them: docs/<source>/*.parquet."""
    web = sample_texts(80)
    code_path = SHARED / "code" / "python_stdlib.jsonl.gz"
    with gzip.open(code_path, "rt", encoding="utf-8") as f:
        code = [json.loads(line)["text"] for line in itertools.islice(f, 40)]
    for source, texts in (("web", web), ("code", code)):
        folder = tmp_path / "run" / "docs" / source
        folder.mkdir(parents=True)
        pq.write_table(
            pa.table({"id": [f"{source}-{i}" for i in range(len(texts))], "text": texts}), folder / "part-0.parquet"
        )
    return tmp_path / "run"


@needs_shared
def test_hash_sample_is_stable_and_order_free(tmp_path):
    run = make_run(tmp_path)
    files = run_doc_files(run)
    half = hash_threshold(files, 0.5, 10**12)
    segments = list(sample_segments(files, half))
    assert sorted(segments) == sorted(sample_segments(files[::-1], half))
    everything = list(sample_segments(files, hash_threshold(files, 1.0, 10**12)))
    assert 0.2 * len(everything) < len(segments) < 0.8 * len(everything)
    small = list(sample_segments(files, hash_threshold(files, 1.0, 50_000)))
    assert sum(len(s.encode()) for s in small) <= 50_000


@needs_shared
@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_tokenizer_train_gives_a_usable_spec(tmp_path, model_type):
    run = make_run(tmp_path)
    model = tmp_path / "tok" / "mine.model"
    result = CliRunner().invoke(
        tokenizer_group,
        [
            "train",
            str(run),
            "--vocab-size",
            "1200",
            "--out",
            str(model),
            "--model-type",
            model_type,
            "--max-chars",
            "300000",
            "--threads",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    tok = load_tokenizer(str(model))
    assert tok.vocab_size == 1200 and tok.eos_id == 2 and tok.bos_id == 1
    texts = sample_texts(5) + ["def f(x):\n\treturn x  # tabs and  spaces\n", "ünïcödé 😀 never seen"]
    flat, lengths = tok.encode_batch(texts)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    assert [tok.decode(d) for d in docs] == texts  # identity normalisation + byte fallback: lossless
    # The trained model works as the stage's tokenizer (uint16 shards).
    prefix = tokenize_unit(tmp_path / "out", texts, "u", tokenizer=str(model))
    assert IndexedShard(prefix).dtype == np.uint16


def test_unit_names_ending_in_json(tmp_path):
    """An input file ``x.json`` gives a unit ``x.json``: its shard's files are x.json.bin, x.json.json, ..."""
    prefix = tokenize_unit(tmp_path, ["hello world"], "00000-pages.json")
    tokenize_unit(tmp_path, ["again"], "00001-more.json")
    assert Path(str(prefix) + ".json").exists()
    merged = merge_shards(tmp_path / "m", [prefix, tmp_path / "tokens" / "web" / "00001-more.json.idx"])
    assert merged["documents"] == 2
    result = CliRunner().invoke(shards_group, ["inspect", str(prefix), "--decode", "0"])
    assert result.exit_code == 0 and result.output == "hello world<|endoftext|>"


def test_a_merge_killed_between_its_renames_or_before_them_is_replaced_by_the_next(tmp_path, monkeypatch):
    """Killed after its .bin took its name and before the sidecar, a merge left files the
    next merge refused as the user's; killed before its renames, it left full-size
    temporaries that nothing removed. The sidecar is renamed first now, and the next merge
    removes the temporaries of writers no longer running."""
    import pipeline.formats.shard_merge as sm

    a = tokenize_unit(tmp_path, sample_texts(6), "a")
    out = tmp_path / "out" / "merged"
    replace = os.replace

    def killed_after_the_first_rename(tmp, final):
        replace(tmp, final)
        raise KeyboardInterrupt

    monkeypatch.setattr(sm.os, "replace", killed_after_the_first_rename)
    with pytest.raises(KeyboardInterrupt):
        merge_shards(out, [a])
    monkeypatch.undo()
    dead = 2**22 + 1  # above Linux's largest pid: no process holds it
    host = writer_tag().split("@")[1]
    left = out.parent / f".merged.bin.{dead}@{host}.tmp"
    left.write_bytes(b"\0" * 100)  # what a merge killed by SIGKILL leaves
    mine = out.parent / f".merged.bin.{os.getppid()}@{host}.tmp"  # a running writer's (pytest's parent): kept
    mine.write_bytes(b"\0")
    merge_shards(out, [a])
    assert read_documents(out) == read_documents(a)
    assert sorted(p.name for p in out.parent.iterdir()) == [
        f".merged.bin.{os.getppid()}@{host}.tmp",
        "merged.bin",
        "merged.docs.parquet",
        "merged.idx",
        "merged.json",
    ]
