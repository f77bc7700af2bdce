"""One large plain JSON lines file on 1 and 2 workers: units smaller than a file.

    python -m benchmarks.split_units [--mb 200] [--repeat 3] [--data ../shared/data]

Corpus: the shared web pages (web_gold, then web_html: real text and real HTML), written
as one plain JSON lines file in a temporary folder; when they hold less than ``--mb``
they are written again, each copy's ids made unique (``<id>#<copy>``), which only
adds volume. The chain is normalize and quality: per-document work that keeps a
worker's main thread busy, as a real chain does.

The file is cut into ``split_bytes`` = 64 MB units (the default). Before, a file was
one unit, and 2 workers took the time of 1 (a lone task runs in the main process).
Each round runs 1 and 2 workers; ratios are taken within each round (a shared
machine's load drifts) and the median round is reported, after one untimed run that
fills the page cache and numba's cache of compiled kernels. Each run is a fresh
``prep run`` process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCES = ["web/web_gold.jsonl.gz", "web/web_html.jsonl.gz"]
STAGES = '[[stages]]\nname = "normalize"\n[[stages]]\nname = "quality"\n'


def build_file(data: Path, path: Path, megabytes: int) -> int:
    """Write at least ``megabytes`` MB of JSON lines; return the documents written."""
    documents = written = copy = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < megabytes << 20:
            for name in SOURCES:
                with gzip.open(data / name, "rt", encoding="utf-8") as f:
                    for line in f:
                        record = json.loads(line)
                        record["id"] = f"{record.get('id', documents)}#{copy}"
                        text = json.dumps(record, ensure_ascii=False) + "\n"
                        written += len(text.encode())
                        documents += 1
                        out.write(text)
            copy += 1
    return documents


def timed_run(folder: Path, corpus: Path, workers: int) -> float:
    """``prep run`` as a user starts it: a fresh process, which pays its imports, its
    workers' start and their kernels' loading (one process reused would hold all three
    for the 1-worker runs only, which run in it)."""
    config = folder / "run.toml"
    config.write_text(f'[sources.web]\npaths = ["{corpus}"]\n{STAGES}')
    with tempfile.TemporaryDirectory(dir=folder) as out:
        command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", f"{out}/o", "-w", str(workers), "-q"]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--mb", type=int, default=200, help="size of the file, in MB")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (the median is reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = folder / "web.jsonl"
        documents = build_file(args.data, corpus, args.mb)
        print(f"{corpus.stat().st_size / 1e6:.0f} MB of plain JSON lines, {documents:,} documents")
        timed_run(folder, corpus, 1)  # warm-up: page cache, imports, kernels
        rounds = [{workers: timed_run(folder, corpus, workers) for workers in (1, 2)} for _ in range(args.repeat)]
    print(f"\n{'workers':<8} {'seconds':>8}   (median of {args.repeat} rounds)")
    for workers in (1, 2):
        print(f"{workers:<8} {statistics.median(r[workers] for r in rounds):8.2f}")
    ratios = sorted(r[2] / r[1] for r in rounds)
    print(f"2 workers / 1: {statistics.median(ratios):.2f}x the time (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
