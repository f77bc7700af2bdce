"""Loader throughput: nanoGPT's get_batch vs a naive DataLoader vs prep's loader, same data, same run.

    python -m benchmarks.loader [--tokens 50_000_000] [--batches 3000] [--workdir /tmp/prep-loader-bench]

Data: real text (web pages, Python/JS sources, math LaTeX and word problems from
../shared/data) tokenized with the GPT-2 BPE (uint16 ids, end-of-text after every
document) and written with ``ShardWriter`` as one shard. The real text is about 20M
tokens; to reach ``--tokens`` the documents are repeated as they are (the loader's speed
does not depend on the content). Built once into ``--workdir``.

Contenders, all batch 8 x 2048, int64 inputs and labels, consumer does nothing:
  (a) nanoGPT ``get_batch``: random windows from ``np.memmap`` in the main process
      (the memmap recreated per batch as nanoGPT does);
  (b) a naive map-style Dataset of windows over the same memmap in
      ``torch.utils.data.DataLoader(batch_size=8, shuffle=True, num_workers=2)``;
  (c) ``TokenDataset`` + ``build_dataloader(num_workers=2)``, which also yields
      ``position_ids`` and ``cu_seqlens``.
Also printed: opening time (cold: builds the index; warm: cached) on this data and on a
synthetic 1B-token index (sparse ``.bin``, document lengths drawn from the real ones),
and each of (c)'s workers' memory after its first batch and at the end of the run, under
the default start method (the timed run) and the others asked for (``--start-methods``):
private memory (``benchmarks.proctree.Memory``: not the pages shared with the parent,
not the page cache of the token files) beside the target of 200 MiB per worker.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks.proctree import Memory, memory
from pipeline.formats.token_shards import ShardWriter, write_index
from pipeline.loader import TokenDataset, build_dataloader
from pipeline.loader.cache import CACHE_DIRNAME
from pipeline.text.tokenizers import load_tokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT_FILES = [
    ("web/web_gold.jsonl.gz", "text"),
    ("web/dolma_ccmain_20190717_00140.jsonl.gz", "text"),
    ("web/nltk_webtext.jsonl.gz", "text"),
    ("code/python_stdlib.jsonl.gz", "text"),
    ("code/js_usr_lib_node_modules.jsonl.gz", "text"),
    ("math/stacks_project_sections.jsonl.gz", "text"),
    ("math/gsm8k.jsonl.gz", "question"),
]
BATCH, SEQ, WORKERS = 8, 2048, 2
TARGET_PRIVATE_MIB = 200  # issue 20: per loader worker


def read_texts() -> list[str]:
    texts = []
    for name, field in TEXT_FILES:
        path = DATA / name
        if not path.exists():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                value = json.loads(line).get(field)
                if isinstance(value, str) and value:
                    texts.append(value)
    return texts


def build_data(folder: Path, target_tokens: int) -> tuple[Path, np.ndarray, int]:
    """One uint16 shard of real tokenized documents, repeated up to ``target_tokens``."""
    prefix = folder / "shard-00000"
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    lengths_path = folder / "real_lengths.npy"
    if not (bin_path.exists() and idx_path.exists() and lengths_path.exists()):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        texts = read_texts()
        if not texts:
            raise SystemExit(f"no text found under {DATA}")
        tok = load_tokenizer("gpt2")
        ids, lengths = tok.encode_batch(texts)
        # An end-of-text token after every document, as prep's tokenize stage writes.
        ends = np.cumsum(lengths)
        ids = np.insert(ids, ends, tok.eos_id).astype(np.uint16)
        lengths = lengths + 1
        np.save(lengths_path, lengths)
        writer = ShardWriter(f"{bin_path}.tmp", f"{idx_path}.tmp", np.uint16)
        while writer.tokens < target_tokens:
            writer.add_documents(ids, lengths)
        writer.close()
        os.replace(f"{idx_path}.tmp", idx_path)
        os.replace(f"{bin_path}.tmp", bin_path)
    return bin_path, np.load(lengths_path), int(np.load(lengths_path).sum())


# -- (a) nanoGPT ----------------------------------------------------------------------


def nanogpt_get_batch(bin_path: Path):
    # As in nanoGPT's train.py (recreate the memmap every batch to avoid a memory leak).
    data = np.memmap(bin_path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - SEQ, (BATCH,))
    x = torch.stack([torch.from_numpy((data[i : i + SEQ]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + SEQ]).astype(np.int64)) for i in ix])
    return x, y


def run_nanogpt(bin_path: Path, batches: int) -> float:
    nanogpt_get_batch(bin_path)
    t0 = time.perf_counter()
    for _ in range(batches):
        nanogpt_get_batch(bin_path)
    return batches * BATCH * SEQ / (time.perf_counter() - t0)


# -- (b) naive map-style Dataset --------------------------------------------------------


class NaiveWindows(Dataset):
    """One window per item from the memmap; DataLoader collates 8 of them per batch."""

    def __init__(self, bin_path: Path):
        self.bin_path = bin_path
        self.count = (os.path.getsize(bin_path) // 2 - 1) // SEQ
        self.data = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        if self.data is None:
            self.data = np.memmap(self.bin_path, dtype=np.uint16, mode="r")
        w = torch.from_numpy(self.data[i * SEQ : i * SEQ + SEQ + 1].astype(np.int64))
        return w[:-1], w[1:]


def time_iterator(iterator, batches: int) -> float:
    """tokens/s over ``batches`` batches, after one batch of warm-up (worker start)."""
    next(iterator)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * BATCH * SEQ / (time.perf_counter() - t0)


def run_naive(bin_path: Path, batches: int) -> float:
    loader = DataLoader(NaiveWindows(bin_path), batch_size=BATCH, shuffle=True, num_workers=2, drop_last=True)
    return time_iterator(iter(loader), batches)


# -- (c) ours ---------------------------------------------------------------------------


class WorkerPids:
    """``worker_init_fn`` that records each worker's pid in a shared tensor (any start method)."""

    def __init__(self, workers: int):
        self.pids = torch.zeros(workers, dtype=torch.int64).share_memory_()

    def __call__(self, worker_id: int) -> None:
        self.pids[worker_id] = os.getpid()


def run_ours(folder: Path, batches: int, start_method: str | None = None) -> tuple[float, list[Memory], list[Memory]]:
    """tokens/s, and each worker's memory after the first batch and after ``batches``."""
    dataset = TokenDataset(folder, SEQ, seed=0, epochs=1)
    pids = WorkerPids(WORKERS)
    loader = build_dataloader(
        dataset,
        BATCH,
        num_workers=WORKERS,
        pin_memory=False,
        worker_init_fn=pids,
        multiprocessing_context=start_method,
    )
    iterator = iter(loader)
    next(iterator)
    time.sleep(0.2)
    first = [memory(int(pid)) for pid in pids.pids]
    t0 = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    rate = batches * BATCH * SEQ / (time.perf_counter() - t0)
    return rate, first, [memory(int(pid)) for pid in pids.pids]


def print_memory(rows: list[tuple[str, list[Memory], list[Memory]]], batches: dict[str, int]) -> None:
    """Each worker's memory per start method, beside the target (see ``Memory``)."""
    print(f"\n(c) each worker's memory, MiB (target: at most {TARGET_PRIVATE_MIB} private per worker)")
    print(
        "| start method | worker | private, 1st batch | private, end (batches) "
        "| file pages only it read | shared with other processes | target |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for method, first, last in rows:
        for worker, (a, b) in enumerate(zip(first, last)):
            verdict = "met" if max(a.private, b.private) <= TARGET_PRIVATE_MIB * 1024 else "MISSED"
            print(
                f"| {method} | {worker} | {a.private / 1024:.1f} | {b.private / 1024:.1f} ({batches[method]}) | "
                f"{b.file_cache / 1024:.1f} | {b.shared / 1024:.1f} | {verdict} |"
            )


# -- opening --------------------------------------------------------------------------


def time_open(folder: Path) -> tuple[float, float]:
    shutil.rmtree(folder / CACHE_DIRNAME, ignore_errors=True)
    t0 = time.perf_counter()
    TokenDataset(folder, SEQ)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    TokenDataset(folder, SEQ)
    return cold, time.perf_counter() - t0


def synthetic_billion(folder: Path, real_lengths: np.ndarray, shards: int = 16) -> int:
    """Index files of ~1B tokens with real document lengths; ``.bin`` files left sparse."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per_shard = 1_000_000_000 // shards
    total = 0
    for s in range(shards):
        lengths = rng.choice(real_lengths, size=per_shard // int(real_lengths.mean()) + 1)
        prefix = folder / f"shard-{s:05d}"
        write_index(f"{prefix}.idx", np.uint16, lengths)
        with open(f"{prefix}.bin", "wb") as f:
            f.truncate(int(lengths.sum()) * 2)
        total += int(lengths.sum())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=50_000_000, help="tokens in the benchmark shard")
    parser.add_argument("--batches", type=int, default=3000, help="timed batches per contender")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/prep-loader-bench"))
    parser.add_argument("--skip-billion", action="store_true", help="skip the 1B-token opening test")
    parser.add_argument(
        "--start-methods",
        default="fork,forkserver,spawn",
        help="start methods to read (c)'s workers' memory under, besides the timed run's (the default one)",
    )
    parser.add_argument("--memory-batches", type=int, default=500, help="batches per start method besides fork")
    args = parser.parse_args()

    data_dir = args.workdir / "shards"
    bin_path, real_lengths, real_tokens = build_data(data_dir, args.tokens)
    total = os.path.getsize(bin_path) // 2
    print(
        f"data: {total:,} tokens in one uint16 shard ({real_tokens:,} real GPT-2 tokens from "
        f"{len(real_lengths):,} documents, repeated); batch {BATCH} x {SEQ}"
    )

    cold, warm = time_open(data_dir)
    print(f"open: cold {cold * 1e3:.1f} ms, warm {warm * 1e3:.1f} ms")
    if not args.skip_billion:
        billion_dir = args.workdir / "billion"
        n = synthetic_billion(billion_dir, real_lengths)
        cold_b, warm_b = time_open(billion_dir)
        print(
            f"open 1B index ({n:,} tokens, synthetic lengths from the real docs): "
            f"cold {cold_b:.2f} s, warm {warm_b * 1e3:.1f} ms"
        )
        shutil.rmtree(billion_dir)

    # Warm the page cache once so that no contender pays for the first read.
    np.fromfile(bin_path, dtype=np.uint8).sum()
    a = run_nanogpt(bin_path, args.batches)
    b = run_naive(bin_path, args.batches)
    c, first, last = run_ours(data_dir, args.batches)
    default = multiprocessing.get_start_method()  # what (c) ran under
    memory_rows, batches = [(default, first, last)], {default: args.batches}
    for method in args.start_methods.split(","):
        if method != default:
            memory_rows.append((method, *run_ours(data_dir, args.memory_batches, method)[1:]))
            batches[method] = args.memory_batches
    print()
    print("| loader | tokens/s | vs (a) | vs (b) |")
    print("|---|---:|---:|---:|")
    for name, rate in [
        ("(a) nanoGPT get_batch, main process", a),
        ("(b) naive Dataset, DataLoader 2 workers", b),
        ("(c) prep TokenDataset, 2 workers", c),
    ]:
        print(f"| {name} | {rate / 1e6:,.1f} M | {rate / a:.2f}x | {rate / b:.2f}x |")
    print_memory(memory_rows, batches)


if __name__ == "__main__":
    main()
