"""RedPajama-V2 as it ships: filtering on its quality signals and deduplicating on its
MinHash bands, against prep recomputing both from the text, on the same tree in the
same run.

    python -m benchmarks.redpajama_v2 [--docs 3000] [--data ../shared/data]

The tree: ``tests/rpv2_fixture.build_rpv2_tree`` (RedPajama-V2's published layout: two
snapshots, head/middle/tail, signals, duplicates and minhash files) over real web text
from ../shared/data/web (C4, Dolma CC, web_gold, in that order, repeated when --docs needs
more), each wrapped in the CCNet metadata of a real CCNet document. Every 7th document is
an exact copy of an earlier one and every 11th a one-word edit (the fixture's plan), so
both dedup sides have work.

Sides, each a ``prep run`` over the same tree with 2 workers; the figure compared is the
stage's own CPU seconds from the run's cost.json (reading and writing are the same on
both sides, and would hide the stages' difference):
  filter, shipped     column_filter with configs/redpajama_v2.toml's rules (Gopher and C4
                      page rules over rps_doc_* / ccnet_* columns);
  filter, recomputed  the quality stage with configs/c4.toml's settings (Gopher
                      repetition + quality, C4, FineWeb), computing its signals from the text;
  dedup, shipped      dedup on minhash_sim0.8 (RedPajama's 9 bands x 13 rows);
  dedup, recomputed   dedup computing MinHash with the same parameters (13-word shingles,
                      9 x 13), so the clusters can be compared: removed documents in
                      common, and only on one side (the hash functions differ, so a pair
                      near the threshold may fall either way).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import tomllib

from pipeline.engine.run import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fixture that writes the layout
from rpv2_fixture import build_rpv2_tree  # noqa: E402

WEB = ("olmo_paloma_c4_100_domains_guardian_val.jsonl.gz", "dolma_ccmain_20190717_00140.jsonl.gz", "web_gold.jsonl.gz")
CCNET = "dolma_cc_en_head_and_provided.jsonl.gz"
SNAPSHOTS = ("2023-06", "2023-14")
PER_FILE = 100


def _lines(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        yield from (json.loads(line) for line in f)


def web_documents(data: Path, count: int) -> list[dict]:
    """``count`` real texts, each in a real CCNet document's metadata (its url made unique)."""
    ccnet = list(_lines(data / "web" / CCNET))
    texts = [d["text"] for d in ccnet] + [d["text"] for name in WEB for d in _lines(data / "web" / name)]
    texts = [t for t in texts if t.strip()]
    docs = []
    for k, (text, shell) in enumerate(zip(itertools.islice(itertools.cycle(texts), count), itertools.cycle(ccnet))):
        meta = {**shell["metadata"], "url": f"{shell['metadata']['url']}#{k}", "length": len(text)}
        meta["nlines"] = text.count("\n") + 1
        docs.append({"text": text, "metadata": meta})
    return docs


def _toml_table(stage: dict) -> str:
    """One [[stages]] table (values as JSON, which TOML reads for these types; rules a subtable)."""
    plain = "".join(f"{k} = {json.dumps(v)}\n" for k, v in stage.items() if not isinstance(v, dict))
    tables = "".join(
        f"[stages.{k}]\n" + "".join(f"{rk} = {json.dumps(rv)}\n" for rk, rv in v.items())
        for k, v in stage.items()
        if isinstance(v, dict)
    )
    return "[[stages]]\n" + plain + tables


def shipped_stage(config: str, name: str) -> dict:
    [stage] = [s for s in tomllib.loads((ROOT / "configs" / config).read_text())["stages"] if s["name"] == name]
    return stage


def run_side(tree: Path, folder: Path, label: str, stage: dict) -> dict:
    config = folder / f"{label}.toml"
    source = f'[sources.web]\npaths = ["{tree}"]\nformat = "redpajama-v2"\nminhash = 0.8\n\n'
    config.write_text(source + _toml_table(stage))
    out = folder / label
    start = time.perf_counter()
    manifest = run_pipeline(config, out, workers=2, quiet=True)
    wall = time.perf_counter() - start
    cost = json.loads((out / "cost.json").read_text())["cpu_seconds"]
    # dedup's signatures are its map phase's work; its reduce and finalize are the same on both sides
    stage_cpu = cost.get(f"{stage['name']}:map", cost.get(stage["name"], 0.0))
    rejects = pq.read_table(out / "rejects").to_pylist() if (out / "rejects").exists() else []
    removed = {r["id"] for r in rejects if r["stage"] == stage["name"]}
    return {"wall": wall, "cpu": stage_cpu, "removed": removed, "input": manifest["balance"]["input"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    files = len(SNAPSHOTS) * 3  # head, middle, tail per shard
    shards = max(1, -(-args.docs // (files * PER_FILE)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        docs = web_documents(args.data, shards * files * PER_FILE)
        tree = build_rpv2_tree(folder / "rpv2", docs, SNAPSHOTS, shards=shards, docs_per_file=PER_FILE)
        print(
            f"tree: {len(tree.expected):,} documents in {len(tree.documents)} files, built in "
            f"{time.perf_counter() - start:.0f} s"
        )
        sides = {
            "filter, shipped": {**shipped_stage("redpajama_v2.toml", "column_filter")},
            "filter, recomputed": shipped_stage("c4.toml", "quality"),
            "dedup, shipped": {"name": "dedup", "signatures": "minhash_sim0.8", "bands": 9, "rows": 13},
            "dedup, recomputed": {"name": "dedup", "ngram": 13, "bands": 9, "rows": 13},
        }
        results = {
            label: run_side(tree.root, folder, label.replace(", ", "-"), stage) for label, stage in sides.items()
        }
    print(f"{'side':<20} {'stage CPU s':>11} {'run wall s':>10} {'removed':>8}")
    for label, r in results.items():
        print(f"{label:<20} {r['cpu']:>11.3f} {r['wall']:>10.1f} {len(r['removed']):>8,}")
    for kind in ("filter", "dedup"):
        shipped, recomputed = results[f"{kind}, shipped"], results[f"{kind}, recomputed"]
        print(
            f"{kind}: shipped signals {recomputed['cpu'] / max(shipped['cpu'], 1e-9):.1f}x less stage CPU "
            f"({recomputed['cpu'] - shipped['cpu']:.2f} s saved over {shipped['input']:,} documents)"
        )
    a, b = results["dedup, shipped"]["removed"], results["dedup, recomputed"]["removed"]
    print(
        f"dedup removed: {len(a & b):,} by both, {len(a - b):,} only with shipped bands, "
        f"{len(b - a):,} only recomputed (agreement {len(a & b) / max(len(a | b), 1):.1%})"
    )


if __name__ == "__main__":
    main()
