"""``configs/c4.toml``'s whole chain against its floor: reading plus tokenizing alone.

    python -m benchmarks.chain_floor [--runs 3] [--workers 2] [--data ../shared/data]

A tokenized output must at least be read and tokenized, so the floor of any chain that
ends in tokens is a run with the reader and the tokenize stage alone (same tokenizer,
same outputs: kept documents as Parquet, Megatron shards). Both configs read the same
corpus, the shared web files as ``benchmarks.e2e`` writes them (its web source, 1x), and
run with ``--workers`` processes, in the same run: chain and floor alternate ``--runs``
times after one untimed run of each (which compiles the kernels if the numba cache is
cold), and each side's row is its run of median wall time. Each run is ``prep run``
itself, timed from its start to its exit, with the CPU of its whole process tree
(``benchmarks.proctree``): wall time on a shared host is inflated by the other tenants,
CPU seconds much less.

Where the chain's extra time goes is read from each run's ``cost.json``: the CPU seconds
of every stage and global phase (``cpu_seconds``), and the rest of the tree's CPU that no
stage holds (interpreter and imports, the worker pool, planning, kernel loading, the
manifest). The floor's tokenize stage sees every document the chain's sees and more (the
chain's filters drop about half), so the table compares like with like only for
``read+write`` and ``tokenize``; every other stage is the chain's alone.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.e2e import SHARED, build_corpus, prep_command
from benchmarks.proctree import cpu_and_peak_memory

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CHAIN = ROOT / "configs" / "c4.toml"
# the tree's CPU that cost.json does not record
OUTSIDE = "outside stages (start-up, pool, planning)"


def chain_config(corpus: Path) -> str:
    """``configs/c4.toml`` as shipped, its web source pointed at ``corpus``."""
    text = CHAIN.read_text(encoding="utf-8")
    pointed, count = re.subn(
        r"(\[sources\.web\]\s*\n)paths = \[[^\]]*\]", rf'\1paths = ["{corpus}/web/*.jsonl.gz"]', text
    )
    if count != 1:
        raise SystemExit(f"{CHAIN}: expected one [sources.web] paths line, found {count}")
    return pointed


def floor_config(corpus: Path) -> str:
    """The reader and c4.toml's tokenize stage alone: same run options, same tokenizer."""
    chain = tomllib.loads(CHAIN.read_text(encoding="utf-8"))
    tokenize = next(stage for stage in chain["stages"] if stage["name"] == "tokenize")
    run = "".join(f"{key} = {value!r}\n" for key, value in chain.get("run", {}).items())
    stage = "".join(f"{key} = {json.dumps(value)}\n" for key, value in tokenize.items())
    return f'[run]\n{run}[sources.web]\npaths = ["{corpus}/web/*.jsonl.gz"]\n[[stages]]\n{stage}'


def measure(config: Path, work: Path, workers: int) -> dict:
    """One ``prep run`` of ``config``: wall and tree CPU seconds, its cost.json's stage CPU."""
    out = work / "out"
    start = time.perf_counter()
    proc = subprocess.Popen(prep_command(config, out, workers), cwd=ROOT)
    code, cpu, _ = cpu_and_peak_memory(proc)
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"prep run {config} failed with exit code {code}")
    cost = json.loads((out / "cost.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    stages = {k: v for k, v in cost["cpu_seconds"].items() if k != "total"}
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {
        "wall": wall,
        "cpu": cpu,
        "stages": stages,
        "kept": manifest["balance"]["output"],
        "tokens": cost["output_tokens"],
    }


def median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["wall"])
    return {**ordered[len(ordered) // 2], "walls": [r["wall"] for r in runs], "cpus": [r["cpu"] for r in runs]}


def by_stage(run: dict) -> dict[str, float]:
    """A run's CPU seconds by cost.json label, plus what no label holds (never negative:
    the tree is sampled every 0.2 s and can miss a short-lived process)."""
    stages = dict(run["stages"])
    stages[OUTSIDE] = max(run["cpu"] - sum(stages.values()), 0.0)
    return stages


def report(corpus_docs: int, corpus_bytes: int, chain: dict, floor: dict) -> None:
    print(f"\ncorpus: {corpus_docs:,} web documents, {corpus_bytes / 1e6:,.1f} MB of JSON lines")
    print(f"{'':<8} {'wall s':>8} {'CPU s':>8} {'kept':>8} {'tokens':>12}   runs (wall s / CPU s)")
    for name, r in (("chain", chain), ("floor", floor)):
        runs = ", ".join(f"{w:.1f}/{c:.1f}" for w, c in zip(r["walls"], r["cpus"], strict=True))
        print(f"{name:<8} {r['wall']:8.2f} {r['cpu']:8.2f} {r['kept']:8,} {r['tokens']:12,}   {runs}")
    print(
        f"chain / floor: {chain['wall'] / floor['wall']:.2f}x wall, {chain['cpu'] / floor['cpu']:.2f}x CPU "
        f"(target: within 2x)"
    )
    ours, base = by_stage(chain), by_stage(floor)
    extra = chain["cpu"] - floor["cpu"]
    print(f"\nwhere the chain's CPU goes (cost.json, its median run), and its {extra:+.2f} s over the floor:")
    print(f"{'stage':<44} {'chain s':>8} {'floor s':>8} {'extra s':>8} {'of extra':>9}")
    for label in sorted(set(ours) | set(base), key=lambda k: -(ours.get(k, 0.0) - base.get(k, 0.0))):
        a, b = ours.get(label, 0.0), base.get(label, 0.0)
        share = f"{(a - b) / extra:8.0%}" if extra > 0 else ""
        print(f"{label:<44} {a:8.2f} {b:8.2f} {a - b:+8.2f} {share:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each side; the median is the row")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=SHARED)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus = work / "corpus"
        documents, size = build_corpus(args.data, corpus, 1, sources=("web",))
        configs = {"chain": work / "chain.toml", "floor": work / "floor.toml"}
        configs["chain"].write_text(chain_config(corpus))
        configs["floor"].write_text(floor_config(corpus))
        for config in configs.values():
            measure(config, work, args.workers)  # untimed: compiles the kernels if the cache is cold
        runs: dict[str, list[dict]] = {name: [] for name in configs}
        for _ in range(args.runs):
            for name, config in configs.items():
                runs[name].append(measure(config, work, args.workers))
    report(documents, size, median_run(runs["chain"]), median_run(runs["floor"]))


if __name__ == "__main__":
    main()
