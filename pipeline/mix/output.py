"""Writing a mixture: ``mix.json`` and the global order, each file atomically.

``order_source.npy`` (uint16) and ``order_document.npy`` (int64) give, for every position
of the mixture, the source and the document's index within that source (documents are
numbered across the source's shards in the order ``mix.json`` lists them). A loader maps
a position to its tokens with O(1) work: two array reads and a search over a handful
of shard offsets.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# The file names and paths live in ``pipeline.formats.mix`` (readers import them without the
# planner); the names are imported here too for callers that already import them from this module.
from pipeline.formats.mix import ORDER_DOCUMENT, ORDER_SOURCE, MixLayout
from pipeline.mix.inventory import Inventory
from pipeline.mix.order import MixOrder
from pipeline.mix.plan import Plan
from pipeline.util.atomic import atomic_path, save_npy_atomic
from pipeline.util.numbers import counted


def describe(inventory: Inventory, plan: Plan, order: MixOrder, seed: int, curriculum: str, runs: list[Path]) -> dict:
    sources = {}
    for name in order.sources:
        source = inventory.sources[name]
        sources[name] = {
            "weights": [round(w[name], 10) for w in plan.weights],
            "tokens_available": source.tokens,
            "tokens_target": sum(t[name] for t in plan.targets),
            "tokens_used": order.used[name],
            "epochs": round(order.used[name] / source.tokens, 6) if source.tokens else 0.0,
            "documents": source.documents,
            "shards": [str(Path(p).resolve()) for p in source.shards],
            "shard_documents": [int(n) for n in _documents_per_shard(source.shards)],
        }
    return {
        "format": "prep-mix",
        "version": 1,
        "runs": [str(Path(r).resolve()) for r in runs],
        "seed": seed,
        "curriculum": curriculum,
        "budget": plan.budget,
        "tokens": int(order.tokens.sum()),
        "positions": int(len(order.source)),
        "phases": [
            {"tokens": b, "start": order.phase_starts[i], "end": order.phase_starts[i + 1], "weights": plan.weights[i]}
            for i, b in enumerate(plan.phase_budgets)
        ],
        "tokenizer": {
            k: inventory.tokenizer.get(k)
            for k in ("tokenizer", "vocab_size", "vocab_sha256", "eod_id", "bos_id", "dtype")
        },
        "sources": sources,
        "order": {"source": ORDER_SOURCE, "document": ORDER_DOCUMENT},
    }


def _documents_per_shard(shards: list[str]) -> list[int]:
    from pipeline.formats.indexed_shard import IndexedShard

    return [len(IndexedShard(prefix)) for prefix in shards]


def write_mix(out: Path, description: dict, order: MixOrder) -> None:
    """The order arrays, then ``mix.json`` (a folder with it is complete), between the
    writing mark's creation and removal: stopped in between, the next ``prep mix`` there
    knows the arrays are a stopped mixture's and replaces them."""
    folder = MixLayout(out)
    with atomic_path(folder.writing) as tmp:
        tmp.write_text("prep mix is writing a mixture here; without mix.json it stopped early\n")
    save_npy_atomic(folder.order_source, order.source.astype(np.uint16))
    save_npy_atomic(folder.order_document, order.document.astype(np.int64))
    with atomic_path(folder.manifest) as tmp:
        tmp.write_text(json.dumps(description, indent=2) + "\n")
    folder.writing.unlink()


def plan_table(description: dict) -> str:
    """The plan as a table, for --dry-run and the end of a real run."""
    rows = [f"{'source':<12} {'weight':>8} {'available':>14} {'used':>14} {'epochs':>7}"]
    for name, s in description["sources"].items():
        weight = sum(s["weights"]) / len(s["weights"])
        rows.append(
            f"{name:<12} {weight:>8.2%} {s['tokens_available']:>14,} {s['tokens_used']:>14,} {s['epochs']:>7.2f}"
        )
    rows.append(
        f"{'total':<12} {'':>8} {'':>14} {description['tokens']:>14,}   budget {description['budget']:,}, "
        f"{counted(len(description['phases']), 'phase')}, curriculum {description['curriculum']}, "
        f"seed {description['seed']}"
    )
    return "\n".join(rows)
