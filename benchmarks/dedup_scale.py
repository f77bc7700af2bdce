"""Scale check for the dedup stage: peak memory and time over 1M (or 10M) short documents.

The documents are synthetic (the real data here is tens of MB): 40 words drawn from a
200k-word vocabulary, built directly as Arrow buffers so that generating them costs little
next to dedup. Every 10th document is a near copy of an earlier one in its batch (one of
its last three words replaced) and every 50th an exact copy, so clustering has real work to do.

It runs every phase in this process, as the local runner would with one worker: map per
unit, reduce per partition, finalize's rounds task by task, then filter per unit
(regenerating the same documents). Reported: time per phase, documents per second, peak
RSS (``resource.getrusage``, which includes memory-mapped pages the process touched),
CPU seconds and bytes read of each finalize round, and from them the projection of reduce
and finalize for 1 TB and 100 TB of C4 on 16 and 64 nodes (``project`` says what it assumes).

    python -m benchmarks.dedup_scale                  # 1M documents
    python -m benchmarks.dedup_scale --docs 10000000  # 10M
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.compile.warm_steps import steps_for
from pipeline.engine.slices import THREADS as SLICE_THREADS
from pipeline.formats import partfile
from pipeline.formats.unit_table import DocStore, UnitTable
from pipeline.phases import Round
from pipeline.stage import UnitContext
from stages.dedup import Dedup
from stages.dedup.store import BAND_RECORD, BANDS

WORDS_PER_DOC = 40
C4_DOCS_PER_TB = 450e6  # c4/en: 365M documents in about 800 GB of JSON
C4_FILES_PER_TB = 1280  # its files of about 780 MB of JSON: map's units
CORES_PER_NODE = 32
FETCH_S = 0.03  # one ranged GET from an object store in the same region (assumed)
NODE_BYTES_S = 1.25e9  # a node's link to the object store, 10 Gbit/s, shared by its cores (assumed)
TASK_MEMORY = 4 << 30  # 128 GB a node over its 32 cores
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


def finalize_timed(stage: Dedup, work: Path) -> tuple[dict, list[dict]]:
    """Finalize's rounds task by task, as the engine hands them to workers, each timed:
    per round, its kind, tasks, wall and CPU seconds (the per-task rates of the projection)."""
    done: list[list[dict]] = []
    rounds: list[dict] = []
    while isinstance(step := stage.finalize_plan(done), Round):
        for files in step.drops:
            shutil.rmtree(work / files.folder, ignore_errors=True)
        sliced = sum(_size(work, pattern) for pattern in step.slices)
        results, wall, cpu = [], [], []
        for task in range(step.tasks):
            started, cpu_started = time.perf_counter(), time.process_time()
            results.append(stage.finalize_task(step, task, work))
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        done.append(results)
        kind = step.name.split(" step")[0]
        rounds.append(
            {"kind": kind, "tasks": step.tasks, "wall": sum(wall), "cpu": sum(cpu), "max": max(wall), "sliced": sliced}
        )
    return step, rounds


def _size(work: Path, pattern: str) -> int:
    return sum(f.stat().st_size for f in work.glob(pattern) if f.is_file())


def fixed_costs(stage: Dedup, work: Path, units: int) -> dict[str, float]:
    """Per-task costs that grow with the files a task reads rather than its documents:
    reading one partition of a partitioned file (a task reads one of each of P files, or
    of every unit's band file), and opening a unit's docs file (a members task opens those
    of its range's units); bytes per document of the band and docs files. Median of
    repeated reads, page cache warm."""
    bands = [BANDS.path(work, "web", f"u{u:05d}") for u in range(units)]
    reads = []
    for _ in range(20):
        for path in bands:
            started = time.perf_counter()
            partfile.read(path, 0, BAND_RECORD)
            reads.append(time.perf_counter() - started)
    opens = []
    for _ in range(5):
        store = DocStore(UnitTable.load(work, "dedup"))
        for u in range(units):
            started = time.perf_counter()
            store.unit_rows(u)
            opens.append(time.perf_counter() - started)
    docs = UnitTable.load(work, "dedup").total
    return {
        "file_s": statistics.median(reads),
        "open_s": statistics.median(opens),
        "bands_per_doc": _size(work, "map/*/*.bands") / docs,
        "docs_per_doc": _size(work, "map/*/*.docs.arrow") / docs,
    }


def project(docs: int, reduce_wall: float, rounds: list[dict], fixed: dict[str, float], bytes_per_doc: float) -> None:
    """Reduce and finalize for C4, from this run's wall seconds per million documents.

    Assumes what the measured run had: the same duplicate rate (the later rounds' work
    grows with the documents in clusters), as many star steps, ranges of equal size, P
    tasks a round in ceil(P / cores) waves. A task's time: its share of the round's
    measured time, plus per file it reads a partition of (every unit's band file in
    reduce and in the units round, P files in the rounds of P tasks) ``file_s`` and on
    an object store two requests (``FETCH_S`` each, ``slices.THREADS`` at a time), plus the
    transfer of its bytes (its share of the round's measured input; in members also the
    docs files of its range's units, ``C4_FILES_PER_TB / P + 1`` of them, whole, and
    ``open_s`` each) over its node's link, which the node's cores share (``NODE_BYTES_S``).
    P is the power of two with the shortest time among those whose partitions fit
    ``TASK_MEMORY`` at ``bytes_per_doc`` (reduce's band records dominate)."""
    per_m = {"reduce": reduce_wall / docs * 1e6}
    for r in rounds:
        per_m[r["kind"]] = per_m.get(r["kind"], 0.0) + r["wall"] / docs * 1e6
    print("\nwall seconds per million documents, all tasks of a phase together:")
    for kind, value in per_m.items():
        count = sum(r["kind"] == kind for r in rounds) or 1
        print(f"  {kind:<12} {value:8.2f}   ({count} round{'s' * (count > 1)})")
    print(f"  a partition of a file {fixed['file_s'] * 1e3:.2f} ms, a docs file opened {fixed['open_s'] * 1e3:.2f} ms")
    print(
        f"  bytes per document: {fixed['bands_per_doc']:,.0f} of band files, {fixed['docs_per_doc']:,.0f} of docs files"
    )
    for r in rounds:
        if r["tasks"] > 1:
            print(f"  {r['kind']:<12} reads {r['sliced'] / docs:6.1f} bytes a document of partitioned files")
    print(f"  memory: {bytes_per_doc:,.0f} bytes per document of a task's partition")
    shape = f"{CORES_PER_NODE} cores and {NODE_BYTES_S / 1e9:.2f} GB/s a node, {TASK_MEMORY >> 30} GB a task"
    print(f"\nprojection ({shape}):")
    print("| corpus | documents | nodes | P | reduce | finalize | of both, fetching | core-hours |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, tb in (("1 TB C4", 1), ("100 TB C4", 100)):
        millions = tb * C4_DOCS_PER_TB / 1e6
        smallest = millions * 1e6 * bytes_per_doc / TASK_MEMORY
        for nodes in (16, 64):
            shape = (nodes * CORES_PER_NODE, millions, tb * C4_FILES_PER_TB, per_m, rounds, fixed, docs)
            fits = [2**k for k in range(6, 16) if 2**k >= smallest]
            P = min(fits, key=lambda P: sum(_phases(P, *shape)[:2]))
            reduce_s, finalize_s, fetch_s, core_s = _phases(P, *shape)
            print(
                f"| {label} | {millions / 1e3:.2f}B | {nodes} | {P:,} | {_wall(reduce_s)} | "
                f"{_wall(finalize_s)} | {_wall(fetch_s)} | {core_s / 3600:,.1f} |"
            )


def _wall(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _phases(P, cores, millions, files, per_m, rounds, fixed, docs) -> tuple[float, float, float, float]:
    """Wall seconds of reduce, of finalize, of the fetches in both, and core-seconds."""
    waves = -(-P // cores)
    request = 2 * FETCH_S / SLICE_THREADS
    per_task_docs = millions * 1e6 / P
    reduce_task = per_m["reduce"] * millions / P + files * fixed["file_s"]
    reduce_fetch = files * request + _transfer(fixed["bands_per_doc"] * per_task_docs)
    # The units round reads a header of every band file.
    finalize_s, fetch_s, core_s = files * (fixed["file_s"] + request), files * request + waves * reduce_fetch, 0.0
    for r in rounds:
        if r["tasks"] == 1:
            continue
        task = r["wall"] / docs * per_task_docs + P * fixed["file_s"]
        fetch = P * request + _transfer(r["sliced"] / docs * per_task_docs)
        if r["kind"] == "members":
            units = files / P + 1  # a range's units, the first and last shared with its neighbours
            task += units * fixed["open_s"]
            fetch += _transfer(units * fixed["docs_per_doc"] * millions * 1e6 / files)
        finalize_s += waves * (task + fetch)
        fetch_s += waves * fetch
        core_s += P * task
    core_s += P * reduce_task
    return waves * (reduce_task + reduce_fetch), finalize_s, fetch_s, core_s


def _transfer(task_bytes: float) -> float:
    """Seconds to fetch ``task_bytes`` for each of a node's tasks at once over its link."""
    return task_bytes * CORES_PER_NODE / NODE_BYTES_S


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--per-unit", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    ap.add_argument(
        "--bytes-per-doc",
        type=float,
        default=700,
        help="peak memory per document of a task's partition, for choosing P in the projection "
        "(default: from peak RSS at 4 and 32 partitions over 1M documents)",
    )
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="dedup_scale_"))
    units = (args.docs + args.per_unit - 1) // args.per_unit
    options = Dedup.Options(partitions=args.partitions)
    stage = Dedup(options)
    for step, _ in steps_for(Dedup.name, options, "web", 0.0):  # kernels compiled before the clock, as a run does
        step()
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
        summary, rounds = finalize_timed(stage, work)
        times["finalize"] = time.perf_counter() - t
        fixed = fixed_costs(stage, work, units)
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
    for r in rounds:
        print(
            f"  {r['kind']:<12} {r['tasks']:3d} tasks  {r['wall']:6.2f} s ({r['cpu']:.2f} CPU-s)  "
            f"slowest task {r['max']:.3f} s"
        )
    project(docs, times["reduce"], rounds, fixed, args.bytes_per_doc)


if __name__ == "__main__":
    main()
