"""Speed and agreement of the ``decontaminate`` stage, against datatrove and plain Python.

Corpus: real documents (web pages' gold text, Stacks Project sections, CommonCrawl
pages from ../shared/data), with GSM8K *test* questions planted into some (verbatim,
numbers reformatted, whitespace changed) and GSM8K *train* questions into others; the
benchmark is GSM8K's test split (question and answer), n = 13. ``--repeat`` repeats
the corpus for volume (the same documents again: speed only, the agreement is per
distinct document anyway).

Three implementations over the same documents, one core each:

* ours: ``Decontaminate.process`` on batches of 2,000 documents (numba over Arrow
  buffers, index memory-mapped); the index build is timed apart.
* plain Python: the same normalisation (``kernels.words``) and a set of 13-word tuples:
  the reference our hashes must agree with exactly.
* datatrove 0.10.1: ``NGramsDecontIndexer`` cannot run offline (its constructor
  requires ``lighteval`` and its ``run`` always asks lighteval's registry for tasks,
  which downloads them), but its n-gram hashing is one public method,
  ``compute_hashes``, which is called here unbound with datatrove's own tokenizer,
  normalisation and hash function; the hashes are written as the indexer writes them
  (``<task>.index.hashes``) and datatrove's own ``NGramsDecontFilter`` reads that
  folder offline. Its normalisation differs from ours (spaCy word tokens, punctuation
  becomes a space, every number becomes ``0``), so agreement is reported, not assumed;
  it is slow (spaCy), so it runs on every k-th document, about ``--datatrove-mb`` MB. Its
  default hash (xxhash) fails with the installed ``xxhash`` package (it is handed
  ``str``), so its other hash, sha1 truncated to 64 bits, is used.

Run: python -m benchmarks.decontaminate [--data DIR] [--repeat N] [--datatrove-mb MB]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.decontaminate import Decontaminate
from stages.decontaminate.kernels import words
from stages.decontaminate.reference import read_examples

N = 13


def default_data_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else Path("/work/shared/data")


def read_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def corpus(data: Path) -> tuple[list[str], list[str]]:
    """(texts, kind of each: clean / test-planted / train-planted)."""
    hosts = [
        r["text"]
        for name in ("web/web_gold.jsonl.gz", "math/stacks_project_sections.jsonl.gz")
        for r in read_jsonl(data / name)
    ]
    hosts += [r["text"] for r in read_jsonl(data / "web/dolma_ccmain_20190717_00140.jsonl.gz")]
    gsm = read_jsonl(data / "math/gsm8k.jsonl.gz")
    rng = random.Random(18)
    test = rng.sample([r["question"] for r in gsm if r["split"] == "test"], 300)
    train = rng.sample([r["question"] for r in gsm if r["split"] == "train"], 300)
    edits = [
        lambda q: q,
        lambda q: re.sub(r"\d{4,}", lambda m: f"{int(m.group()):,}", q),
        lambda q: re.sub(" ", lambda _: rng.choice([" ", "  ", "\n", "\t"]), q),
    ]
    rng.shuffle(hosts)
    texts, kinds = [], []
    for k, host in enumerate(hosts):
        paragraphs = host.split("\n\n")
        middle = len(paragraphs) // 2
        if k < len(test):
            planted, kind = edits[k % 3](test[k]), "test-planted"
        elif k < len(test) + len(train):
            planted, kind = train[k - len(test)], "train-planted"
        else:
            texts.append(host)
            kinds.append("clean")
            continue
        texts.append("\n\n".join(paragraphs[:middle] + [planted] + paragraphs[middle:]))
        kinds.append(kind)
    return texts, kinds


def ours(stage: Decontaminate, texts: list[str]) -> np.ndarray:
    flags = []
    for lo in range(0, len(texts), 2000):
        chunk = texts[lo : lo + 2000]
        batch = pa.RecordBatch.from_pydict(
            {"id": [str(i) for i in range(len(chunk))], "text": chunk, "source": ["x"] * len(chunk)}
        )
        out = stage.process(batch, "x")
        flags.append(
            np.zeros(len(chunk), bool)
            if out.drop_reason is None
            else out.drop_reason.is_valid().to_numpy(zero_copy_only=False)
        )
    return np.concatenate(flags)


def plain_python(bench_texts: list[str], texts: list[str]) -> tuple[np.ndarray, float, float]:
    started = time.perf_counter()
    grams = set()
    for t in bench_texts:
        w = words(t)
        grams.update(tuple(w[j : j + N]) for j in range(len(w) - N + 1))
    built = time.perf_counter()
    flags = []
    for t in texts:
        w = words(t)
        flags.append(any(tuple(w[j : j + N]) in grams for j in range(len(w) - N + 1)))
    return np.array(flags), built - started, time.perf_counter() - built


def datatrove(bench_texts: list[str], texts: list[str]) -> tuple[np.ndarray, float, float]:
    from datatrove.data import Document
    from datatrove.pipeline.decont import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from datatrove.utils.hashing import HashConfig, create_hash_func
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    # Its default xxhash hashing fails with the installed xxhash ("Strings must be encoded
    # before hashing"): its sha1 hashing, 64 bits, is the one that runs.
    config = NGramsDecontConfig(n_grams=N, find_query_ngrams=True, hash_config=HashConfig(hash_fc="sha1"))
    started = time.perf_counter()
    indexer = SimpleNamespace(
        tokenizer=load_word_tokenizer("en"), config=config, hash_func=create_hash_func(config.hash_config)
    )
    hashes = set()
    for t in bench_texts:
        hashes.update(NGramsDecontIndexer.compute_hashes(indexer, t))
    folder = tempfile.mkdtemp(prefix="dt-decont-")
    np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(f"{folder}/gsm8k.index.hashes")
    built = time.perf_counter()
    filt = NGramsDecontFilter(folder, config=config)
    flags = []
    for i, t in enumerate(texts):
        kept = filt.filter(Document(text=t, id=str(i)))
        flags.append(kept is not True)
    return np.array(flags), built - started, time.perf_counter() - built


def agreement(a: np.ndarray, b: np.ndarray, kinds: np.ndarray) -> str:
    rows = [f"agree {np.mean(a == b):.4f}", f"both {int((a & b).sum())}", f"only ours {int((a & ~b).sum())}"]
    rows.append(f"only theirs {int((~a & b).sum())}")
    return ", ".join(rows)


def report(name: str, flags: np.ndarray, kinds: np.ndarray, mb: float, seconds: float) -> None:
    parts = [
        f"{k}: {int(flags[kinds == k].sum())}/{int((kinds == k).sum())}"
        for k in ("test-planted", "train-planted", "clean")
    ]
    print(f"{name:>13}: {mb / seconds:8.2f} MB/s ({mb:.1f} MB in {seconds:.2f} s); flagged {', '.join(parts)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--datatrove-mb", type=float, default=3.0)
    args = parser.parse_args()
    texts, kinds_list = corpus(args.data)
    kinds = np.array(kinds_list)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    bench = {"name": "gsm8k", "path": str(args.data / "math/gsm8k.jsonl.gz"), "fields": ["question", "answer"]}
    bench["filter"] = {"split": "test"}
    options = Decontaminate.Options(benchmarks=[bench], n=N)
    bench_texts = read_examples(options.specs[0]).texts
    print(f"corpus: {len(texts)} documents, {mb:.1f} MB; benchmark: {len(bench_texts)} GSM8K test texts, n = {N}")

    stage = Decontaminate(options)
    ours(stage, texts[:10])  # compile (or load numba's cache) and build the index
    started = time.perf_counter()
    stage.index = None
    ours(stage, texts[:1])
    build = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.repeat):
        flags = ours(stage, texts)
    seconds = (time.perf_counter() - started) / args.repeat
    print(f"index: {len(stage.index.hashes):,} n-grams, built in {build:.2f} s")
    report("ours", flags, kinds, mb, seconds)

    ref, ref_build, ref_seconds = plain_python(bench_texts, texts)
    report("plain Python", ref, kinds, mb, ref_seconds)
    print(f"{'':>13}  ours / plain Python: {ref_seconds / seconds:.1f}x; {agreement(flags, ref, kinds)}")

    step = max(1, int(np.ceil(mb / args.datatrove_mb)))  # every step-th document: all kinds, evenly
    pick = np.arange(0, len(texts), step)
    subset = [texts[i] for i in pick]
    sub_mb = sum(len(t.encode()) for t in subset) / 1e6
    try:
        dt, dt_build, dt_seconds = datatrove(bench_texts, subset)
    except Exception as error:
        print(f"datatrove: could not run offline: {type(error).__name__}: {error}")
        return
    started = time.perf_counter()
    ours(stage, subset)
    sub_seconds = time.perf_counter() - started
    report("datatrove", dt, kinds[pick], sub_mb, dt_seconds)
    report("ours (same)", flags[pick], kinds[pick], sub_mb, sub_seconds)
    print(f"{'':>13}  ours / datatrove: {dt_seconds / sub_seconds:.1f}x; {agreement(flags[pick], dt, kinds[pick])}")
    print(f"{'':>13}  index build: ours {build:.2f} s, plain Python {ref_build:.2f} s, datatrove {dt_build:.2f} s")


if __name__ == "__main__":
    main()
