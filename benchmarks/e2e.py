"""The whole pipeline against datatrove, side by side on the same real corpus.

    python -m benchmarks.e2e [--scales 1,4,16] [--workers 2] [--data ../shared/data]
    python -m benchmarks.e2e --scales 1,4,16 --sides prep     # prep's scaling alone

Corpus: the shared web, code and math files (about 60 MB of JSON lines), written as
several gzipped shards per source. At scale k every document appears k times with a
unique id (`<id>#<copy>`), which the output says: copies are exact duplicates, so both
dedups remove them, and the extra volume measures scaling, not filtering quality.

Both sides run the same steps on every document, with `--workers` processes:
  (a) prep run: quality (Gopher repetition, Gopher quality, C4, FineWeb: the web rules
      for all sources, as datatrove applies them), pii, dedup (MinHash 5-grams, 14x8),
      tokenize (GPT-2), writing kept documents as Parquet;
  (b) datatrove 0.10: JsonlReader, GopherRepetitionFilter, GopherQualityFilter,
      C4QualityFilter, FineWebQualityFilter, PIIFormatter, JsonlWriter; then its four-step
      MinhashDedup (signatures, buckets, cluster, filter) with the same 5-grams and 14x8
      buckets, and DocumentTokenizer with GPT-2 (built offline from the shared
      encoder.json and vocab.bpe), writing kept documents as JSON lines.
A third side, ``floor`` (``--sides prep,floor,datatrove``), is ``prep run`` of the same
sources with no stage: it reads every document and writes it as Parquet, which the chain
must do at least (each document is written, kept or in the rejects ledger). datatrove's
time over the floor's is the most any prep could show with every stage costing nothing.
prep's side runs ``--prep-runs`` times (3) and its median run is the row: it lasts seconds
on a shared machine whose speed drifts by a fifth from minute to minute, which
datatrove's minutes average out. With prep first in ``--sides`` (the default), its runs are
split around datatrove's, half before and half after, so they sample the machine over
the same minutes. prep's kernels are loaded into numba's cache by one
untimed prep run first (a fresh install loads the kernels prep ships compiled; where they
do not fit it compiles them, 10-21 s, which `benchmarks.first_run` measures on its own).
Each side runs in its own process tree, timed from its start to its exit: prep's is
``prep run`` itself, as a user types it. CPU seconds and peak memory are sampled from /proc
over all its processes together (CPU of processes living under 0.2 s is missed). What the
comparison reads afterwards (the ids each side kept) is read untimed.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.proctree import cpu_and_peak_memory

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CORPUS = {
    "web": [
        "web/web_gold.jsonl.gz",
        "web/dolma_ccmain_20190717_00140.jsonl.gz",
        "web/nltk_webtext.jsonl.gz",
        "web/datajuicer_redpajama_pile_samples.jsonl.gz",
        "web/olmo_paloma_c4_100_domains_guardian_val.jsonl.gz",
    ],
    "code": [
        "code/python_stdlib.jsonl.gz",
        "code/js_usr_lib_node_modules.jsonl.gz",
        "code/perl_usr_share_perl.jsonl.gz",
    ],
    "math": ["math/gsm8k.jsonl.gz", "math/stacks_project_sections.jsonl.gz", "math/datajuicer_arxiv_sample.jsonl.gz"],
}
SHARDS_PER_SOURCE = 4


def build_corpus(data: Path, out: Path, scale: int, sources: tuple[str, ...] = tuple(CORPUS)) -> tuple[int, int]:
    """Write the corpus (``sources`` of it) at ``scale`` copies; returns (documents, bytes
    of JSON lines)."""
    documents = size = 0
    for source in sources:
        files = CORPUS[source]
        records = []
        for name in files:
            with gzip.open(data / name, "rt", encoding="utf-8") as f:
                for line_no, line in enumerate(f):
                    record = json.loads(line)
                    if isinstance(record.get("text"), str) and record["text"].strip():
                        records.append({"id": str(record.get("id") or f"{name}:{line_no}"), "text": record["text"]})
        folder = out / source
        folder.mkdir(parents=True)
        shards = [
            gzip.open(folder / f"part-{k:03d}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1)
            for k in range(SHARDS_PER_SOURCE)
        ]
        for copy in range(scale):
            for i, record in enumerate(records):
                line = json.dumps({"id": f"{record['id']}#{copy}", "text": record["text"]}) + "\n"
                shards[(copy * len(records) + i) % SHARDS_PER_SOURCE].write(line)
                documents += 1
                size += len(line.encode())
        for shard in shards:
            shard.close()
    return documents, size


PREP_CONFIG = """
[sources.web]
paths = ["{corpus}/web/*.jsonl.gz"]
[sources.code]
paths = ["{corpus}/code/*.jsonl.gz"]
[sources.math]
paths = ["{corpus}/math/*.jsonl.gz"]
[[stages]]
name = "quality"
code_sources = []
math_sources = []
no_space_script_min_frac = 2.0
[[stages]]
name = "pii"
[[stages]]
name = "dedup"
min_similarity = 0.0
[[stages]]
name = "tokenize"
tokenizer = "gpt2"
"""


def prep_command(config: Path, out: Path, workers: int) -> list[str]:
    """``prep run`` itself, as a user runs it (``python -m pipeline`` is ``prep``)."""
    return [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-w", str(workers), "-q"]


def prep_kept(out: Path) -> list[str]:
    """Ids of the documents a prep run wrote to ``out``."""
    import pyarrow.parquet as pq

    kept: list[str] = []
    for path in sorted((out / "docs").rglob("*.parquet")):
        kept += pq.read_table(path, columns=["id"]).column("id").to_pylist()
    return kept


PREP_SIDES = ("prep", "floor")  # run as ``prep run``, ``--prep-runs`` times around datatrove


def side_command(side: str, corpus: Path, work: Path, workers: int) -> list[str]:
    """What a side's timed process runs: prep's is ``prep run``, the floor's ``prep run``
    of the sources alone; datatrove's, this module's hidden ``--side datatrove``."""
    if side in PREP_SIDES:
        config = work / "e2e.toml"
        text = PREP_CONFIG.format(corpus=corpus)
        config.write_text(text if side == "prep" else text.split("[[stages]]")[0])
        return prep_command(config, work / "out", workers)
    return datatrove_command(__spec__.name, corpus, work, workers)


def collect(side: str, work: Path) -> dict:
    """What a side kept and how many tokens it wrote, read from its output after the timing."""
    if side == "prep":
        manifest = json.loads((work / "out" / "manifest.json").read_text())
        return {"kept": prep_kept(work / "out"), "tokens": manifest["stages"]["tokenize"]["counters"]["tokens"]}
    if side == "floor":
        return {"kept": prep_kept(work / "out"), "tokens": 0}
    tokens = sum(p.stat().st_size for p in (work / "tokens").rglob("*.ds")) // 2
    return {"kept": datatrove_kept(work / "kept"), "tokens": tokens}


def datatrove_kept(folder: Path) -> list[str]:
    """Ids of the documents datatrove's JsonlWriter wrote to ``folder`` (gzipped or not)."""
    kept: list[str] = []
    for path in sorted(folder.glob("*.jsonl*")):
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
            kept += [json.loads(line)["id"] for line in f]
    return kept


def run_datatrove(corpus: Path, work: Path, workers: int) -> None:
    import datatrove.utils.hashes.xxhash as dt_xxhash
    import xxhash
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter

    from benchmarks.tokenization import gpt2_tokenizer_json

    # datatrove 0.10.1 hands str to xxhash, which xxhash >= 4 refuses: encode first.
    dt_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)
    tokenizer = gpt2_tokenizer_json(work)
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
    tasks = SHARDS_PER_SOURCE * len(CORPUS)
    filtered = work / "filtered"
    steps = [
        (
            [
                JsonlReader(str(corpus), glob_pattern="*/*.jsonl.gz"),
                GopherRepetitionFilter(),
                GopherQualityFilter(),
                C4QualityFilter(),
                FineWebQualityFilter(),
                PIIFormatter(),
                JsonlWriter(str(filtered)),
            ],
            tasks,
        ),
        ([JsonlReader(str(filtered)), MinhashDedupSignature(output_folder=str(work / "sigs"), config=config)], tasks),
        (
            [MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config)],
            config.num_buckets,
        ),
        (
            [
                MinhashDedupCluster(
                    input_folder=str(work / "buckets"), output_folder=str(work / "remove"), config=config
                )
            ],
            1,
        ),
        (
            [
                JsonlReader(str(filtered)),
                MinhashDedupFilter(input_folder=str(work / "remove")),
                JsonlWriter(str(work / "kept")),  # writers pass documents on; the tokenizer ends a pipeline
                DocumentTokenizer(
                    output_folder=str(work / "tokens"),
                    tokenizer_name_or_path=str(tokenizer),
                    eos_token="<|endoftext|>",
                    shuffle_documents=False,
                ),
            ],
            tasks,
        ),
    ]
    for k, (pipeline, n) in enumerate(steps):
        LocalPipelineExecutor(pipeline=pipeline, tasks=n, workers=workers, logging_dir=str(work / f"logs{k}")).run()


def add_side_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden arguments ``datatrove_command`` runs datatrove's side with (``--workers``
    is the caller's)."""
    parser.add_argument("--side", choices=["datatrove"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)


def datatrove_command(module: str, corpus: Path, work: Path, workers: int) -> list[str]:
    """``python -m <module> --side datatrove ...``: a benchmark's datatrove side."""
    return [
        sys.executable,
        "-m",
        module,
        "--side",
        "datatrove",
        "--corpus",
        str(corpus),
        "--work",
        str(work),
        "--workers",
        str(workers),
    ]


def measure(side: str, corpus: Path, workers: int, module: str = "benchmarks.e2e") -> dict:
    """Run one side in its own process tree: wall, CPU seconds and peak PSS of the tree.

    ``module`` (this one, or another benchmark lending its own sides) gives the command
    (``side_command``) and reads the outputs (``collect``). The timed process does the
    pipeline alone, from its start to its exit; what the benchmark reads to compare the
    sides is read afterwards, untimed. CPU and memory are sampled from /proc over every
    process of the tree (``cpu_and_peak_memory``).
    """
    sides = importlib.import_module(module)
    with tempfile.TemporaryDirectory(dir=corpus.parent) as tmp:
        work = Path(tmp)
        command = sides.side_command(side, corpus, work, workers)
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
        code, cpu, peak = cpu_and_peak_memory(proc)
        wall = time.perf_counter() - start
        if code != 0:
            raise SystemExit(f"{side} failed with exit code {code}")
        collected = sides.collect(side, work)
    return {"wall": wall, "cpu": cpu, "peak_pss": peak, **collected}


def measure_sides(sides: list[str], corpus: Path, workers: int, prep_runs: int) -> dict[str, dict]:
    """Each side measured: datatrove once, prep (and the floor) ``prep_runs`` times with
    the first half of the runs before datatrove's and the rest after; such a side's row is
    its run of median wall time, with every run's wall."""
    before = (prep_runs + 1) // 2 if "datatrove" in sides else prep_runs
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for side in sides:
        count = before if side in PREP_SIDES else 1
        runs[side] += [measure(side, corpus, workers) for _ in range(count)]
    for side in (s for s in sides if s in PREP_SIDES):
        runs[side] += [measure(side, corpus, workers) for _ in range(prep_runs - before)]
    results = {}
    for side, measured in runs.items():
        measured.sort(key=lambda r: r["wall"])
        results[side] = {**measured[len(measured) // 2], "walls": [r["wall"] for r in measured]}
    return results


def report(scale: int, documents: int, size: int, results: dict[str, dict]) -> None:
    print(
        f"\nscale {scale}x: {documents:,} documents, {size / 1e6:,.1f} MB of JSON lines"
        + (f" (the corpus repeated {scale} times with unique ids)" if scale > 1 else "")
    )
    print(
        f"{'':<12} {'wall s':>8} {'CPU s':>8} {'docs/s':>9} {'MB/s':>7} {'kept':>8} {'tokens':>12} "
        f"{'peak PSS':>9} {'CPU-h/B tok':>12}"
    )
    for name, r in results.items():
        per_billion = r["cpu"] / 3600 / (r["tokens"] / 1e9) if r["tokens"] else float("nan")
        print(
            f"{name:<12} {r['wall']:8.1f} {r['cpu']:8.1f} {documents / r['wall']:9,.0f} {size / r['wall'] / 1e6:7.2f} "
            f"{len(r['kept']):8,} {r['tokens']:12,} {r['peak_pss'] / 2**20:8,.0f}M {per_billion:12.1f}"
        )
    for name, r in results.items():
        if len(r["walls"]) > 1:
            walls = " / ".join(f"{wall:.1f}" for wall in r["walls"])
            print(f"{name}'s {len(r['walls'])} runs: {walls} s wall (the row: the median)")
    if "datatrove" in results and "floor" in results:
        datatrove, floor = results["datatrove"], results["floor"]
        print(
            f"datatrove vs the floor (prep reading and writing every document, no stage): "
            f"{datatrove['wall'] / floor['wall']:.1f}x (wall), {datatrove['cpu'] / floor['cpu']:.1f}x (CPU): "
            "the most prep could show with every stage free"
        )
    if "prep" not in results or "datatrove" not in results:
        return
    prep, datatrove = results["prep"], results["datatrove"]
    print(
        f"prep vs datatrove: {datatrove['wall'] / prep['wall']:.1f}x faster (wall), "
        f"{datatrove['cpu'] / prep['cpu']:.1f}x less CPU"
    )
    ours, theirs = set(prep["kept"]), set(datatrove["kept"])
    print(
        f"kept by both {len(ours & theirs):,}; only by prep {len(ours - theirs):,}; "
        f"only by datatrove {len(theirs - ours):,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1", help="comma-separated corpus multiples, e.g. 1,4,16")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument(
        "--sides", default="prep,datatrove", help="of prep, floor (prep reading and writing alone), datatrove"
    )
    parser.add_argument(
        "--prep-runs", type=int, default=3, help="runs of prep's side per scale; the median is reported"
    )
    add_side_arguments(parser)
    args = parser.parse_args()
    if args.prep_runs < 1:
        parser.error("--prep-runs must be at least 1")
    if args.side:  # datatrove's side, inside its own process tree
        run_datatrove(args.corpus, args.work, args.workers)
        return
    sides = [s for s in args.sides.split(",") if s]
    rows = []
    for scale in [int(s) for s in args.scales.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "corpus"
            documents, size = build_corpus(args.data, corpus, scale)
            if any(side in PREP_SIDES for side in sides) and not rows:
                measure("prep", corpus, args.workers)  # untimed: compiles the kernels if the cache is cold
            results = measure_sides(sides, corpus, args.workers, args.prep_runs)
            shutil.rmtree(corpus)
        report(scale, documents, size, results)
        rows.append((scale, results))
    if len(rows) > 1:
        print("\nscaling exponents (time ~ volume^k, memory ~ volume^k) from the smallest to the largest scale:")
        (s0, first), (s1, last) = rows[0], rows[-1]
        for name in sides:
            a, b = first[name], last[name]
            k_time = math.log(b["wall"] / a["wall"]) / math.log(s1 / s0)
            k_mem = math.log(b["peak_pss"] / a["peak_pss"]) / math.log(s1 / s0)
            print(f"  {name:<10} time k = {k_time:.2f}   peak memory k = {k_mem:.2f}")


if __name__ == "__main__":
    main()
