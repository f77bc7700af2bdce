"""Planning a mixture over millions of documents: time and peak memory.

    python -m benchmarks.mix [--documents 10000000]

The inventory (per-document token counts and id hashes) is built in memory with
realistic length distributions, so the numbers are those of planning alone: weights,
hash down/up-sampling, curriculum sort, the weighted interleave and the 1M-token window
check. The peer is the obvious per-document loop (a heap that always serves the source
furthest behind its share), timed on a tenth of the documents and scaled linearly.
"""

from __future__ import annotations

import argparse
import heapq
import resource
import time

import numpy as np

from pipeline.mix.inventory import Inventory, SourceInventory
from pipeline.mix.order import build_order, window_shares
from pipeline.mix.plan import make_plan

WEIGHTS = {"code": 0.25, "math": 0.08}


def synthetic_inventory(documents: int, seed: int = 0) -> Inventory:
    rng = np.random.default_rng(seed)
    shares = {"web": 0.7, "code": 0.2, "math": 0.1}
    sources = {}
    for name, share in shares.items():
        n = int(documents * share)
        lengths = np.clip(rng.lognormal(6.0, 1.0, n), 16, 8192).astype(np.int64)
        sources[name] = SourceInventory(name, [], lengths, rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64))
    return Inventory(sources=sources, tokenizer={})


def heap_interleave(inventory: Inventory, targets: dict[str, int]) -> int:
    """The per-document baseline: serve the source with the smallest progress."""
    heap = [(0.0, name, 0) for name in sorted(targets) if targets[name] > 0]
    heapq.heapify(heap)
    emitted, used = 0, dict.fromkeys(targets, 0)
    while heap:
        _, name, i = heapq.heappop(heap)
        lengths = inventory.sources[name].lengths
        if used[name] >= targets[name]:
            continue
        used[name] += int(lengths[i % len(lengths)])
        emitted += 1
        heapq.heappush(heap, (used[name] / targets[name], name, i + 1))
    return emitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000_000)
    args = parser.parse_args()
    inventory = synthetic_inventory(args.documents)
    total = sum(s.tokens for s in inventory.sources.values())
    start = time.perf_counter()
    plan = make_plan(inventory, WEIGHTS, budget=None)
    keys = {name: s.lengths.astype(np.float64) for name, s in inventory.sources.items()}  # curriculum: length
    order = build_order(inventory, plan, seed=0, keys=keys)
    planned = time.perf_counter() - start
    shares = window_shares(order, 1_000_000)
    checked = time.perf_counter() - start - planned
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    targets = {name: sum(t[name] for t in plan.targets) for name in inventory.sources}
    worst = max(np.abs(shares[:, i] - plan.weights[0][name]).max() for i, name in enumerate(order.sources))
    sample = synthetic_inventory(args.documents // 10)
    sample_plan = make_plan(sample, WEIGHTS, budget=None)
    start = time.perf_counter()
    heap_interleave(sample, {n: sum(t[n] for t in sample_plan.targets) for n in sample.sources})
    heap_seconds = (time.perf_counter() - start) * 10
    print(
        f"{args.documents:,} documents, {total / 1e9:.2f}B tokens; mixture of {len(order.source):,} positions, "
        f"{sum(targets.values()) / 1e9:.2f}B tokens"
    )
    print(
        f"plan + order (curriculum length): {planned:.2f} s   window check: {checked:.2f} s   "
        f"peak RSS {peak_mb:,.0f} MB"
    )
    print(f"worst share deviation over {len(shares):,} windows of 1M tokens: {worst:.4%}")
    print(f"per-document heap interleave (scaled from {args.documents // 10:,} docs): {heap_seconds:.1f} s")
    print(f"ratio heap / prep: {heap_seconds / planned:.1f}x")


if __name__ == "__main__":
    main()
