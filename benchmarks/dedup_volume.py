"""prep's dedup against datatrove's MinhashDedup at volume, with planted near duplicates.

    python -m benchmarks.dedup_volume [--docs 100000] [--repeat 3] [--workers 2]
    python -m benchmarks.dedup_volume --quick          # 5,000 passages, one repeat

The 1,000-document comparison in ``benchmarks/dedup.py`` is dominated by datatrove's fixed
costs; this one runs both on 100,000 real passages (``benchmarks/neardup_corpus.py``: the
shared web, math, speech, changelog and code text cut into ~200-word passages, exact
repeats passed over) plus 5 % planted edited copies at known 5-gram Jaccard similarities
spread over 0.60-0.95, shuffled into 8 JSON-lines files in /tmp.

Both sides run the same job on the same files with ``--workers`` processes, same word
5-grams, 14 bands x 8 hashes, pure LSH (every candidate pair is a duplicate; prep's
``min_similarity`` check is off unless ``--min-similarity`` sets it), and both write the
kept documents:
  (a) ``prep run`` with the ``dedup`` stage alone (kept documents as Parquet);
  (b) datatrove 0.10's four steps (signature, buckets, cluster, filter) through
      ``benchmarks.dedup.run_datatrove``, one task per file in the signature and filter
      steps, 14 in buckets, kept documents as uncompressed JSON lines.
Each side runs in its own process tree (``benchmarks.e2e.measure``): wall, CPU seconds
and peak proportional resident memory (PSS) summed over the tree, sampled every 0.2 s.
The two sides take turns going first; the medians of ``--repeat`` runs are reported,
with their spread.

A planted pair is *found* when exactly one of its two documents survives, *missed* when
both survive, and *both gone* when neither does (each was taken as the duplicate of some
third document). Removals of documents in no planted pair are counted apart: the corpus
holds real near duplicates (licence headers, boilerplate, revised sections) that neither
side is wrong to remove. Recall is printed per bin of true similarity, beside the chance
that 14 x 8 LSH makes the pair a candidate at all: 1 - (1 - J^8)^14, averaged over the bin.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.dedup import run_datatrove as datatrove_minhash
from benchmarks.e2e import (
    SHARED,
    add_side_arguments,
    datatrove_command,
    datatrove_kept,
    measure,
    prep_command,
    prep_kept,
)
from benchmarks.neardup_corpus import SOURCES, build, write_shards

SHARDS = 8
BANDS, ROWS = 14, 8
BINS = [0.0, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.01]
PREP_TOML = "prep.toml"
PREP_CONFIG = """
[sources.passages]
paths = ["{corpus}/*.jsonl"]
[[stages]]
name = "dedup"
ngram = 5
bands = {bands}
rows = {rows}
min_similarity = {min_similarity}
"""


def write_prep_config(corpus: Path, min_similarity: float) -> None:
    """``prep run``'s config, beside the corpus files it reads (the side runs in its own process)."""
    text = PREP_CONFIG.format(corpus=corpus, bands=BANDS, rows=ROWS, min_similarity=min_similarity)
    (corpus / PREP_TOML).write_text(text)


def side_command(side: str, corpus: Path, work: Path, workers: int) -> list[str]:
    """What a side's timed process runs (``benchmarks.e2e.measure``): ``prep run`` with the
    config beside the corpus, or this module's hidden ``--side datatrove``."""
    if side == "prep":
        return prep_command(corpus / PREP_TOML, work / "out", workers)
    return datatrove_command(__spec__.name, corpus, work, workers)


def collect(side: str, work: Path) -> dict:
    """The ids a side kept, read from its output after the timing."""
    if side == "prep":
        return {"kept": prep_kept(work / "out")}
    return {"kept": datatrove_kept(work / "kept")}


def run_datatrove(corpus: Path, work: Path, workers: int) -> None:
    """datatrove's MinhashDedup, writing the documents it keeps to ``work``/kept. Its log
    (several hundred lines on stderr) goes to a file in ``work``; stderr comes back before
    any error is shown."""
    saved = os.dup(2)
    with open(work / "datatrove.log", "w") as log:
        os.dup2(log.fileno(), 2)
        try:
            files = len(list(corpus.glob("*.jsonl")))
            datatrove_minhash(corpus / "*.jsonl", work, workers=workers, tasks=files, kept=work / "kept")
        finally:
            os.dup2(saved, 2)


def lsh_chance(j: float) -> float:
    return 1 - (1 - j**ROWS) ** BANDS


def outcomes(planted: list[dict], kept: set[str]) -> list[str]:
    """``found``, ``missed`` or ``both gone`` for each planted pair."""
    out = []
    for p in planted:
        alive = (p["original"] in kept) + (p["copy"] in kept)
        out.append({1: "found", 2: "missed", 0: "both gone"}[alive])
    return out


def _median(runs: list[dict], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def report(documents: list[dict], planted: list[dict], skipped: int, runs: dict[str, list[dict]]) -> None:
    n = len(documents)
    mb = sum(len(d["text"].encode()) for d in documents) / 1e6
    kinds = Counter(d["id"].split(":")[0] for d in documents)
    print(
        f"\ncorpus: {n:,} documents ({n - len(planted):,} real passages + {len(planted):,} planted copies), "
        f"{mb:,.1f} MB of text; {skipped:,} exact repeats passed over"
    )
    print("  " + ", ".join(f"{k} {v:,}" for k, v in kinds.most_common()))
    print(f"\n{'':<10} {'wall s':>16} {'CPU s':>16} {'peak PSS MB':>18} {'docs/s':>8} {'removed':>8}")
    for side, rs in runs.items():
        cells = []
        for key, scale in (("wall", 1), ("cpu", 1), ("peak_pss", 2**20)):
            med, lo, hi = (v / scale for v in _median(rs, key))
            cells.append(f"{med:7,.1f} ({lo:,.0f}-{hi:,.0f})")
        removed = n - len(rs[0]["kept"])
        wall = _median(rs, "wall")[0]
        print(f"{side:<10} {cells[0]:>16} {cells[1]:>16} {cells[2]:>18} {n / wall:8,.0f} {removed:8,}")
    if len(runs) == 2:
        prep, dt = runs["prep"], runs["datatrove"]
        ratios = [_median(dt, k)[0] / _median(prep, k)[0] for k in ("wall", "cpu", "peak_pss")]
        print(
            f"datatrove / prep (medians of {len(prep)}): wall {ratios[0]:.1f}x, CPU {ratios[1]:.1f}x, "
            f"peak memory {ratios[2]:.1f}x"
        )
    for side, rs in runs.items():
        if any(set(r["kept"]) != set(rs[0]["kept"]) for r in rs):
            print(f"note: {side} kept different documents in different repeats; the first run is reported")
    kept = {side: set(rs[0]["kept"]) for side, rs in runs.items()}
    results = {side: outcomes(planted, k) for side, k in kept.items()}
    print("\nplanted pairs by true 5-gram Jaccard: found (exactly one kept) / both gone / missed (both kept)")
    header = "".join(f" {side + ' found':>14} {'gone':>5} {'miss':>5}" for side in runs)
    print(f"{'Jaccard':<11} {'pairs':>6} {'LSH P':>6}{header}")
    for lo, hi in zip(BINS, BINS[1:]):
        idx = [i for i, p in enumerate(planted) if lo <= p["jaccard"] < hi]
        if not idx:
            continue
        chance = statistics.mean(lsh_chance(planted[i]["jaccard"]) for i in idx)
        cells = ""
        for r in results.values():
            c = Counter(r[i] for i in idx)
            cells += f" {c['found'] / len(idx):13.1%} {c['both gone']:5} {c['missed']:5}"
        print(f"{lo:.2f}-{min(hi, 1):.2f}  {len(idx):6} {chance:6.1%}{cells}")
    cells = "".join(
        f" {Counter(r)['found'] / len(planted):13.1%} {Counter(r)['both gone']:5} {Counter(r)['missed']:5}"
        for r in results.values()
    )
    print(f"{'all':<11} {len(planted):6} {statistics.mean(lsh_chance(p['jaccard']) for p in planted):6.1%}{cells}")
    in_pairs = {p["original"] for p in planted} | {p["copy"] for p in planted}
    ids = {d["id"] for d in documents}
    removed = {side: ids - k - in_pairs for side, k in kept.items()}
    print("\ndocuments in no planted pair that were removed (real near duplicates in the corpus):")
    for side, r in removed.items():
        by_kind = Counter(i.split(":")[0] for i in r)
        print(f"  {side:<10} {len(r):6,}   " + ", ".join(f"{k} {v:,}" for k, v in by_kind.most_common(5)))
    if len(removed) == 2:
        a, b = removed.values()
        print(f"  removed by both {len(a & b):,}; only by prep {len(a - b):,}; only by datatrove {len(b - a):,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000, help="real passages (planted copies come on top)")
    parser.add_argument("--planted", type=float, default=0.05, help="planted copies, as a fraction of --docs")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-similarity", type=float, default=0.0, help="prep's check against the survivor")
    parser.add_argument("--quick", action="store_true", help="5,000 passages, one repeat (for development)")
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument("--sides", default="prep,datatrove")
    add_side_arguments(parser)
    args = parser.parse_args()
    if args.side:  # datatrove's side, inside its own process tree
        run_datatrove(args.corpus, args.work, args.workers)
        return
    if args.docs < 1 or args.repeat < 1 or args.workers < 1 or not 0 < args.planted <= 1:
        parser.error("--docs, --repeat and --workers must be at least 1, --planted within (0, 1]")
    if not args.data.is_dir():
        sys.exit(f"{args.data} is absent: nothing to measure on")
    if args.quick:
        args.docs, args.repeat = 5_000, 1
    sides = [s for s in args.sides.split(",") if s]
    documents, planted, skipped = build(args.data, SOURCES, args.docs, round(args.docs * args.planted), args.seed)
    with tempfile.TemporaryDirectory(prefix="dedup_volume_") as tmp:
        corpus, warm = Path(tmp) / "corpus", Path(tmp) / "warm"
        write_shards(documents, corpus, SHARDS, args.seed)
        write_shards(documents[:200], warm, 2, args.seed)
        for folder in (corpus, warm):
            write_prep_config(folder, args.min_similarity)
        if "prep" in sides:  # compiles the kernels if the cache is stale, outside the timing
            measure("prep", warm, args.workers, module=__spec__.name)
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for r in range(args.repeat):
            for side in sides if r % 2 == 0 else sides[::-1]:
                runs[side].append(measure(side, corpus, args.workers, module=__spec__.name))
                print(f"run {r + 1} {side}: {runs[side][-1]['wall']:.1f} s", flush=True)
    report(documents, planted, skipped, runs)


if __name__ == "__main__":
    main()
