"""Scale check for the dedup stage: peak memory and time over 1M (or 10M) short documents.

The documents are synthetic (the real data here is tens of MB): 40 words drawn from a
200k-word vocabulary, built directly as Arrow buffers so that generating them costs little
next to dedup. Every 10th document is a near copy of an earlier one in its batch (one of
its last three words replaced) and every 50th an exact copy, so clustering has real work to do.

It runs every phase in this process, as the local runner would with one worker: map per
unit, reduce per partition, finalize, then filter per unit (regenerating the same
documents). Reported: time per phase, documents per second, and peak RSS
(``resource.getrusage``, which includes memory-mapped pages the process touched).

    python -m benchmarks.dedup_scale                  # 1M documents
    python -m benchmarks.dedup_scale --docs 10000000  # 10M
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.stage import UnitContext
from stages.dedup import Dedup

WORDS_PER_DOC = 40
WORD_LEN = 6  # letters; each word is followed by a space


def synthetic_batch(first: int, n: int, seed: int) -> pa.RecordBatch:
    """``n`` documents with ids ``first..first+n-1``; a pure function of its arguments."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 200_000, size=(n, WORDS_PER_DOC))
    near = np.arange(n)[(np.arange(n) % 10 == 9)]
    src = rng.integers(0, np.maximum(near, 1))
    words[near] = words[src]
    cols = rng.integers(WORDS_PER_DOC - 3, WORDS_PER_DOC, size=len(near))  # J ~ 0.85-0.95
    words[near, cols] = rng.integers(0, 200_000, size=len(near))
    exact = np.arange(n)[(np.arange(n) % 50 == 49)]
    words[exact] = words[exact - 7]
    letters = np.empty((n, WORDS_PER_DOC, WORD_LEN + 1), np.uint8)
    w = words.copy()
    for k in range(WORD_LEN):
        letters[:, :, WORD_LEN - 1 - k] = ord("a") + w % 26
        w //= 26
    letters[:, :, WORD_LEN] = ord(" ")
    data = letters.reshape(-1)
    width = WORDS_PER_DOC * (WORD_LEN + 1)
    offsets = np.arange(n + 1, dtype=np.int32) * width
    text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes()))
    ids = pc.cast(pa.array(np.arange(first, first + n)), pa.string())
    return pa.RecordBatch.from_arrays([ids, text, pa.array(np.full(n, "web"))], ["id", "text", "source"])


def unit_batches(u: int, per_unit: int, batch: int):
    for start in range(0, per_unit, batch):
        n = min(batch, per_unit - start)
        yield synthetic_batch(u * per_unit + start, n, seed=u * 1_000_003 + start)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--per-unit", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="dedup_scale_"))
    units = (args.docs + args.per_unit - 1) // args.per_unit
    stage = Dedup(Dedup.Options(partitions=args.partitions))
    times = {}
    try:
        t = time.perf_counter()
        for u in range(units):
            ctx = UnitContext(out_dir=work, source="web", unit=f"u{u:05d}")
            stage.map_unit(unit_batches(u, args.per_unit, args.batch), ctx, work)
            for tmp, final in ctx.pending.items():
                os.replace(tmp, final)
        times["map"] = time.perf_counter() - t
        t = time.perf_counter()
        for p in range(stage.partitions()):
            stage.reduce_partition(p, work)
        times["reduce"] = time.perf_counter() - t
        t = time.perf_counter()
        summary = stage.finalize(work)
        times["finalize"] = time.perf_counter() - t
        t = time.perf_counter()
        removed = 0
        for u in range(units):
            ctx = UnitContext(out_dir=work, source="web", unit=f"u{u:05d}")
            stage.open_unit(ctx)
            for b in unit_batches(u, args.per_unit, args.batch):
                removed += int(pc.sum(pc.is_valid(stage.process(b, "web").drop_reason)).as_py())
            stage.close_unit(ctx)
        times["filter"] = time.perf_counter() - t
        disk = sum(f.stat().st_size for f in work.rglob("*") if f.is_file())
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    docs = units * args.per_unit
    total = sum(times.values())
    print(f"documents        {docs:,} in {units} units, {args.partitions} partitions")
    for phase, secs in times.items():
        print(f"{phase:<16} {secs:8.1f} s")
    print(f"total            {total:8.1f} s   ({docs / total:,.0f} docs/s end to end)")
    print(
        f"removed          {removed:,}  (exact {summary['dedup.exact_removed']:,}, "
        f"near {summary['dedup.near_removed']:,}, "
        f"{summary['dedup.cc_steps']} CC steps)"
    )
    print(f"work folder      {disk / 1e9:.2f} GB")
    print(f"peak RSS         {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
