"""Tokenization throughput on real documents: the library alone, prep's stage, datatrove.

On the same web + code documents (from ../shared/data), in the same process, this measures:

  (a) the raw library, the ceiling: tiktoken ``encode_ordinary_batch`` with N threads, and
      SentencePiece's batch ``encode`` with N threads;
  (b) prep's ``tokenize`` stage driven like the runner drives it (Arrow batches in,
      open_unit / process / close_unit, shard + index + sidecar + Parquet written and renamed),
      with prep's own tiktoken encoder compiled first, as a large run's warm-up does
      (``pipeline/text/tiktoken_fast.py``), started afresh each run as a worker starts;
  (c) datatrove's ``DocumentTokenizer`` (HF ``tokenizers``) on GPT-2, from a tokenizer.json
      built offline from the shared GPT-2 files; skipped, with the reason, if it cannot run.

It prints MB/s (UTF-8 input), tokens/s, bytes per token and each row's ratio to (a) for
the same tokenizer. Each measurement is the best of ``--repeat`` runs, (a) and (b)
interleaved so that load from other processes hits both alike.

    python -m benchmarks.tokenization --max-mb 8 --threads 2
"""

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SHARED = SHARED if SHARED.is_dir() else Path("/work/shared/data")
WEB = ["web/dolma_ccmain_20190717_00140.jsonl.gz", "web/web_gold.jsonl.gz"]
CODE = ["code/python_stdlib.jsonl.gz", "code/js_usr_lib_node_modules.jsonl.gz"]
SP_MODEL = SHARED / "tokenizers" / "sentencepiece" / "mistral_v3_tokenizer.model"


def load_texts(files: list[str], max_bytes: int) -> list[str]:
    """Documents from ``files`` in order until ``max_bytes`` of UTF-8 text (no repetition)."""
    texts, total = [], 0
    for name in files:
        with gzip.open(SHARED / name, "rt", encoding="utf-8") as f:
            for line in f:
                text = json.loads(line).get("text")
                if not isinstance(text, str) or not text:
                    continue
                texts.append(text)
                total += len(text.encode("utf-8"))
                if total >= max_bytes:
                    return texts
    return texts


def best_of(repeat: int, fn):
    """(best seconds, result of the last run)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def to_batches(texts: list[str], rows: int = 1000) -> list[pa.RecordBatch]:
    batches = []
    for start in range(0, len(texts), rows):
        part = texts[start : start + rows]
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "id": [f"doc-{start + i}" for i in range(len(part))],
                    "text": part,
                    "source": ["bench"] * len(part),
                }
            )
        )
    return batches


def run_stage(spec: str, batches: list[pa.RecordBatch], out_dir: Path, threads: int) -> int:
    """The tokenize stage over one unit, as the runner drives it, files committed; returns tokens."""
    from pipeline.stage import UnitContext
    from stages.tokenize import Tokenize

    shutil.rmtree(out_dir, ignore_errors=True)
    stage = Tokenize(Tokenize.Options(tokenizer=spec, threads=threads))
    if hasattr(stage.tokenizer, "ranks"):
        stage.tokenizer._fast = None  # a fresh encoder and memo, as in a new worker
    unit = UnitContext(out_dir=out_dir, source="bench", unit="part-00000")
    stage.open_unit(unit)
    for batch in batches:
        stage.process(batch, "bench")
    counters = stage.close_unit(unit)
    for tmp, final in unit.pending.items():
        os.replace(tmp, final)
    return counters["tokens"]


def gpt2_tokenizer_json(folder: Path) -> Path:
    """GPT-2 as a Hugging Face tokenizer.json, built from the shared encoder.json + vocab.bpe."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    src = SHARED / "tokenizers" / "gpt2"
    tok = Tokenizer(models.BPE.from_file(str(src / "encoder.json"), str(src / "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    path = folder / "gpt2-tokenizer.json"
    tok.save(str(path))
    return path


def run_datatrove(texts: list[str], tokenizer_json: Path, out_dir: Path) -> int:
    from datatrove.data import Document
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer

    shutil.rmtree(out_dir, ignore_errors=True)
    step = DocumentTokenizer(
        output_folder=str(out_dir),
        tokenizer_name_or_path=str(tokenizer_json),
        eos_token="<|endoftext|>",
        shuffle_documents=False,
        batch_size=1000,
    )
    docs = (Document(text=t, id=str(i)) for i, t in enumerate(texts))
    step.run(docs, rank=0, world_size=1)
    # Count what it wrote (its .ds files hold the tokens back to back, EOS included).
    return sum(p.stat().st_size for p in out_dir.glob("*.ds")) // step.token_size


class Table:
    def __init__(self, mb: float):
        self.mb = mb
        self.rows: list[tuple[str, float, int, float | None]] = []

    def add(self, label: str, seconds: float, tokens: int, ceiling: float | None = None) -> float:
        self.rows.append((label, seconds, tokens, ceiling))
        return seconds

    def print(self, n_bytes: int) -> None:
        print(f"{'run':68} {'MB/s':>8} {'Mtok/s':>8} {'B/token':>8} {'vs (a)':>7}")
        for label, seconds, tokens, ceiling in self.rows:
            ratio = f"{ceiling / seconds:7.2f}" if ceiling else "      -"
            print(f"{label:68} {self.mb / seconds:8.2f} {tokens / seconds / 1e6:8.3f} {n_bytes / tokens:8.2f} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-mb", type=float, default=8.0, help="MB of text (half web, half code)")
    parser.add_argument("--threads", type=int, default=0, help="threads for every contender (0: CPUs, <= 8)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--encodings", default="cl100k_base,gpt2", help="tiktoken encodings to measure")
    args = parser.parse_args()

    from pipeline.text.tokenizers import default_threads, load_tokenizer
    from stages.tokenize import compile_fast_encoder

    threads = args.threads or default_threads()
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))  # HF tokenizers' pool, before it starts
    half = int(args.max_mb * 1e6 / 2)
    texts = load_texts(WEB, half) + load_texts(CODE, half)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    batches = to_batches(texts)
    table = Table(n_bytes / 1e6)
    print(
        f"{len(texts)} documents, {n_bytes / 1e6:.1f} MB (web: {', '.join(WEB)}; code: {', '.join(CODE)}), "
        f"{threads} threads, best of {args.repeat}, {os.cpu_count()} CPUs on the machine"
    )
    work = Path(tempfile.mkdtemp(prefix="prep-bench-tokenize-"))
    try:
        for name in [e for e in args.encodings.split(",") if e]:
            enc = load_tokenizer(name).encoding
            enc.encode_ordinary_batch(texts[:50], num_threads=threads)  # warm up
            compile_fast_encoder(name)
            a = b = float("inf")
            for _ in range(args.repeat):
                sa, ids = best_of(1, lambda enc=enc: enc.encode_ordinary_batch(texts, num_threads=threads))
                sb, stage_tokens = best_of(1, lambda name=name: run_stage(name, batches, work / name, threads))
                a, b = min(a, sa), min(b, sb)
            a_tokens = sum(len(i) for i in ids)
            assert stage_tokens == a_tokens + len(texts), "the stage wrote other ids than tiktoken"
            table.add(f"(a) tiktoken {name} encode_ordinary_batch", a, a_tokens)
            table.add(f"(b) prep tokenize stage {name} (+ shard, idx, sidecar, parquet)", b, a_tokens, a)
            if name == "gpt2":
                try:
                    tokenizer_json = gpt2_tokenizer_json(work)
                    c, c_tokens = best_of(
                        args.repeat, lambda spec=tokenizer_json: run_datatrove(texts, spec, work / "dt")
                    )
                    table.add("(c) datatrove DocumentTokenizer gpt2 (HF tokenizers)", c, c_tokens - len(texts), a)
                except ImportError as e:
                    print(f"(c) datatrove DocumentTokenizer: cannot run offline here: {e}")
        if SP_MODEL.exists():
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(model_file=str(SP_MODEL))
            a = b = float("inf")
            for _ in range(args.repeat):
                sa, ids = best_of(1, lambda: sp.encode(texts, num_threads=threads))
                sb, stage_tokens = best_of(1, lambda: run_stage(str(SP_MODEL), batches, work / "sp", threads))
                a, b = min(a, sa), min(b, sb)
            a_tokens = sum(len(i) for i in ids)
            table.add("(a) SentencePiece mistral_v3 encode (batch, threads)", a, a_tokens)
            table.add("(b) prep tokenize stage mistral_v3 .model", b, a_tokens, a)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table.print(n_bytes)


if __name__ == "__main__":
    main()
