"""Read throughput: `prep run` with no filtering stage, and prep's reader alone, against
a plain gzip + json loop and pyarrow's own JSON reader, over the same real files, in the
same run.

    python -m benchmarks.read_throughput [--data ../shared/data] [--codec gzip|zstd] [--reader-only]

``--codec zstd`` first recompresses the same files as ``.jsonl.zst`` (DCLM's and
SlimPajama's format, level 3) into a temporary folder; pyarrow then inflates zstd too.

(Run benchmarks as modules from the repository root, as README says.)

prep's number includes everything a run does besides filtering: decompression, parsing,
the bad-input checks, ids, writing zstd Parquet, checksums, markers and the manifest.
The peers only parse (they keep the result in memory and write nothing). All three use
one core, then pyarrow with its threads and prep with 2 workers (both use every core of
a 2-core machine). The like-for-like row is prep's reader alone (``read_input`` over
each file, every chunk consumed: decompression, the scans, the parse, ids and the
bad-input checks, nothing written) against pyarrow's decompressing reader on one thread
(``read_json`` over ``pa.input_stream(path, compression="detect")``); each reads on a
second thread while it parses (pyarrow's read-ahead, prep's prefetch). ``--reader-only``
times just these two.

Each reader runs once untimed (page cache, imports, kernels loaded from numba's cache),
then ``--repeat`` rounds run every reader in turn; a shared machine's load drifts, so
the ratios are taken within each round and the median round is reported.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson

from pipeline.engine.run import run_pipeline
from pipeline.readers import InputSpec, read_input

FILES = [
    "web/web_gold.jsonl.gz",
    "web/web_html.jsonl.gz",
    "web/dolma_ccmain_20190717_00140.jsonl.gz",
    "web/nltk_webtext.jsonl.gz",
    "code/c_headers_usr_include.jsonl.gz",
    "code/python_stdlib.jsonl.gz",
    "code/perl_usr_share_perl.jsonl.gz",
    "code/js_usr_lib_node_modules.jsonl.gz",
]


def uncompressed_bytes(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with pa.input_stream(str(path), compression="detect") as f:
            while chunk := f.read(1 << 24):
                total += len(chunk)
    return total


def recompressed_as_zstd(paths: list[Path], folder: Path) -> list[Path]:
    """The same JSON lines as ``.jsonl.zst``, under ``folder/<source>/`` as in ``paths``."""
    copies = []
    for path in paths:
        copy = folder / path.parent.name / path.name.replace(".jsonl.gz", ".jsonl.zst")
        copy.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "rb") as f, pa.CompressedOutputStream(str(copy), "zstd") as out:
            while chunk := f.read(1 << 24):
                out.write(chunk)
        copies.append(copy)
    return copies


def open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return io.TextIOWrapper(pa.input_stream(str(path), compression="detect"), encoding="utf-8")


def plain_loop(paths: list[Path]) -> int:
    documents = 0
    for path in paths:
        with open_text(path) as f:
            for line in f:
                if line.strip():
                    json.loads(line)["text"]
                    documents += 1
    return documents


def pyarrow_reader(paths: list[Path], threads: bool) -> int:
    """pyarrow's reader, decompressing as it reads (16 MB blocks: its 1 MB default cannot
    hold the longest documents, and the block size barely moves its parse time)."""
    options = pajson.ReadOptions(use_threads=threads, block_size=16 << 20)
    total = 0
    for path in paths:
        with pa.input_stream(str(path), compression="detect") as stream:
            total += pajson.read_json(stream, read_options=options).num_rows
    return total


def prep_reader(paths: list[Path]) -> int:
    """prep's reader alone: every chunk of every file consumed; documents and quarantined
    rows counted (the inputs hold a few dozen rows that prep quarantines and pyarrow keeps)."""
    rows = 0
    for path in paths:
        for chunk in read_input(path, InputSpec(source=path.parent.name, file_key=path.name)):
            rows += sum(batch.num_rows for batch in (chunk.docs, chunk.bad) if batch is not None)
    return rows


def prep_run(paths: list[Path], workers: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        web = [str(p) for p in paths if p.parent.name == "web"]
        code = [str(p) for p in paths if p.parent.name == "code"]
        config.write_text(f"[sources.web]\npaths = {json.dumps(web)}\n[sources.code]\npaths = {json.dumps(code)}\n")
        manifest = run_pipeline(config, Path(tmp) / "out", workers=workers, quiet=True)
        return manifest["balance"]["input"]


LOOP = "decompress + json loop (1 core)"


def timed(fn, *args) -> tuple[float, int]:
    start = time.perf_counter()
    documents = fn(*args)
    return time.perf_counter() - start, documents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (the median is reported)")
    parser.add_argument("--codec", choices=("gzip", "zstd"), default="gzip", help="how the files are compressed")
    parser.add_argument("--reader-only", action="store_true", help="time only prep's reader and pyarrow's (one core)")
    args = parser.parse_args()
    paths = [args.data / f for f in FILES if (args.data / f).exists()]
    if not paths:
        raise SystemExit(f"no input files under {args.data}")
    with tempfile.TemporaryDirectory() as folder:
        inputs = recompressed_as_zstd(paths, Path(folder)) if args.codec == "zstd" else paths
        compare(inputs, args.codec, args.repeat, args.reader_only)


READER = "prep read_input alone (1 worker)"
PYARROW = "pyarrow.json.read_json (1 thread)"


def compare(paths: list[Path], codec: str, repeat: int, reader_only: bool) -> None:
    raw = uncompressed_bytes(paths)
    print(
        f"{len(paths)} files, {sum(p.stat().st_size for p in paths) / 1e6:.1f} MB {codec}, "
        f"{raw / 1e6:.1f} MB of JSON lines"
    )
    readers = {PYARROW: (pyarrow_reader, (paths, False)), READER: (prep_reader, (paths,))}
    if not reader_only:
        readers |= {
            LOOP: (plain_loop, (paths,)),
            "prep run, no stages (1 worker)": (prep_run, (paths, 1)),
            "pyarrow.json.read_json (threads)": (pyarrow_reader, (paths, True)),
            "prep run, no stages (2 workers)": (prep_run, (paths, 2)),
        }
    documents = {name: fn(*fn_args) for name, (fn, fn_args) in readers.items()}  # warm-up
    rounds = [{name: timed(fn, *fn_args)[0] for name, (fn, fn_args) in readers.items()} for _ in range(repeat)]
    print(f"\n{'reader':<40} {'seconds':>8} {'docs/s':>10} {'MB/s':>8}   (median of {repeat} rounds)")
    for name in readers:
        seconds = statistics.median(r[name] for r in rounds)
        print(f"{name:<40} {seconds:8.2f} {documents[name] / seconds:10,.0f} {raw / seconds / 1e6:8.1f}")
    ratios = sorted(r[PYARROW] / r[READER] for r in rounds)
    print(
        f"reader alone: prep read_input at {statistics.median(ratios):.2f}x pyarrow's speed "
        f"(target 0.90x; rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
    )
    if reader_only:
        return
    for cores, pyarrow_name, prep_name in (
        ("one core", PYARROW, "prep run, no stages (1 worker)"),
        ("all cores", "pyarrow.json.read_json (threads)", "prep run, no stages (2 workers)"),
    ):
        ratios = sorted(r[prep_name] / r[pyarrow_name] for r in rounds)
        loop = statistics.median(r[LOOP] / r[prep_name] for r in rounds)
        print(
            f"{cores}: prep / pyarrow reader time {statistics.median(ratios):.2f}x "
            f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}); prep vs the decompress + json loop {loop:.2f}x faster"
        )


if __name__ == "__main__":
    main()
