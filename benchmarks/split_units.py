"""One large plain JSON lines file on 1 and 2 workers: units smaller than a file.

    python -m benchmarks.split_units [--mb 200] [--repeat 3] [--data ../shared/data]

Corpus: the shared web pages (web_gold, then web_html: real text and real HTML), written
as one plain JSON lines file in a temporary folder; when they hold less than ``--mb``
they are written again, each copy's ids made unique (``<id>#<copy>``), which only
adds volume. The chain is normalize and length, a light per-document load.

Each round runs the file with ``split_bytes`` = 64 MB (the default: a few units) on 1
and on 2 workers, and with ``split_bytes`` = 0 (one unit: a second worker has nothing
to do) on 2 workers; ratios are taken within each round (a shared machine's load
drifts) and the median round is reported, after one untimed run that loads everything.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

from pipeline.engine.run import run_pipeline

SOURCES = ["web/web_gold.jsonl.gz", "web/web_html.jsonl.gz"]
STAGES = '[[stages]]\nname = "normalize"\n[[stages]]\nname = "length"\nmin_chars = 50\n'


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


def timed_run(folder: Path, corpus: Path, split_bytes: int, workers: int) -> float:
    config = folder / f"split{split_bytes}.toml"
    config.write_text(f'[run]\nsplit_bytes = {split_bytes}\n[sources.web]\npaths = ["{corpus}"]\n{STAGES}')
    with tempfile.TemporaryDirectory(dir=folder) as out:
        start = time.perf_counter()
        run_pipeline(config, Path(out) / "out", workers=workers, quiet=True)
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
        cases = {"64 MB units, 1 worker": (64 << 20, 1), "64 MB units, 2 workers": (64 << 20, 2)}
        cases["one unit, 2 workers"] = (0, 2)
        timed_run(folder, corpus, 64 << 20, 1)  # warm-up: page cache, imports, kernels
        rounds = [{name: timed_run(folder, corpus, *case) for name, case in cases.items()} for _ in range(args.repeat)]
    print(f"\n{'run':<26} {'seconds':>8}   (median of {args.repeat} rounds)")
    for name in cases:
        print(f"{name:<26} {statistics.median(r[name] for r in rounds):8.2f}")
    for name in ("64 MB units, 2 workers", "one unit, 2 workers"):
        ratios = sorted(r[name] / r["64 MB units, 1 worker"] for r in rounds)
        print(
            f"{name} / 1 worker: {statistics.median(ratios):.2f}x the time "
            f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    main()
