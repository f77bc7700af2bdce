"""Many small input files: how prep's time, memory and resume grow with the number of
files, against datatrove over the same files.

    python -m benchmarks.many_files [--files 1000,4000,16000] [--workers 2] [--data ../shared/data]
                                    [--stage normalize]

Corpus: the first N documents of the shared web files (``web/*.jsonl.gz`` in
../shared/data, in name order, repeated if N needs more), one document per file, each
file plain JSON lines with its own id: the shape of RedPajama-V2's or a crawl's many
small shards. The documents are the corpus's own, of any length, so the time grows with
the bytes too (``MB in``: 20,000 files hold 2.6 times the bytes of 10,000).

Sides, each in a fresh process tree, wall, CPU and peak PSS of the whole tree
(``proctree``):
  prep       ``prep run`` of one stage (``--stage``: normalize unless named; ``none``, the
             sources alone, is prep's own reading and writing, what datatrove's side does)
             over the N files into a fresh --out
             (its own process runs the command line, so the driver's own peak RSS is
             read too: the workers' memory does not grow with the files, the driver's may);
  resume     the same command again over the finished folder (finds every unit done);
  datatrove  JsonlReader -> JsonlWriter, ``tasks = workers``, on LocalPipelineExecutor.
Planning alone (listing and the input versions, in this process) is timed too, and the
size of the run's state (.prep/), markers (stats/) and manifest, and the number of units
and output files, are read from the folder.

The last two columns are datatrove's time over prep's, wall and CPU (the whole tree's
CPU seconds, the steadier of the two where other work shares the machine).

The growth exponent is the slope of log(time) against log(files) between the smallest
and the largest N; 1 is linear. A million files is projected from the per-file slope
between the last two N (none where the figure fell).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.e2e import prep_command
from benchmarks.proctree import cpu_and_peak_memory

CONFIG = '[sources.web]\npaths = ["{folder}/*.jsonl"]\n\n[[stages]]\nname = "{stage}"\n'


def build_files(data: Path, folder: Path, files: int) -> None:
    """``files`` one-document JSON-lines files from the shared web files, repeated as needed."""
    sources = sorted((data / "web").glob("*.jsonl.gz"))
    if not sources:
        raise SystemExit(f"no gzipped web JSON lines under {data / 'web'}")

    def lines():
        for path in itertools.cycle(sources):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                yield from f

    folder.mkdir(parents=True)
    for i, line in zip(range(files), lines()):
        text = json.loads(line)["text"]
        (folder / f"part-{i:07d}.jsonl").write_text(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")


def timed(command: list[str]) -> dict:
    import subprocess

    start = time.perf_counter()
    code, cpu, peak = cpu_and_peak_memory(subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1]))
    if code != 0:
        raise SystemExit(f"{command[:4]} failed with exit code {code}")
    return {"wall": time.perf_counter() - start, "cpu": cpu, "peak_mb": peak / 2**20}


def planning_seconds(config: Path) -> float:
    from pipeline.engine.config import load_config
    from pipeline.engine.run import _planned_units

    start = time.perf_counter()
    _planned_units(load_config(config))
    return time.perf_counter() - start


def state_sizes(out: Path) -> dict:
    def size(path: Path) -> float:
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20 if path.exists() else 0.0

    return {
        "state_mb": size(out / ".prep"),
        "markers_mb": size(out / "stats"),
        "manifest_mb": (out / "manifest.json").stat().st_size / 2**20,
        "units": sum(1 for _ in (out / "stats" / "segment-0").rglob("*.json")),
        "output_files": sum(1 for p in out.rglob("*") if p.is_file()),
    }


def run_prep(config: Path, out: Path, workers: int, driver_rss: Path) -> None:
    """``prep run`` in this process, which writes its own peak RSS (the driver's, not
    its workers') to ``driver_rss`` as it exits."""
    import atexit
    import resource

    from pipeline.commands.main import program

    atexit.register(lambda: driver_rss.write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
    sys.argv = ["prep", "run", str(config), "--out", str(out), "-w", str(workers), "-q"]
    program()  # ends the process, after the atexit handlers


def run_datatrove(folder: Path, out: Path, workers: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    steps = [JsonlReader(str(folder), glob_pattern="*.jsonl"), JsonlWriter(str(out / "kept"), compression=None)]
    LocalPipelineExecutor(steps, tasks=workers, workers=workers, logging_dir=str(out / "logs")).run()


def measure(data: Path, files: int, workers: int, stage: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "in"
        build_files(data, folder, files)
        config = work / "many.toml"
        text = CONFIG.format(folder=folder, stage=stage)
        config.write_text(text.split("[[stages]]")[0] if stage == "none" else text)
        row = {"files": files, "input_mb": sum(p.stat().st_size for p in folder.iterdir()) / 2**20}
        row["plan_s"] = planning_seconds(config)
        out = work / "out"
        driver = [sys.executable, "-m", __spec__.name, "--side", "prep", "--work", str(work), "--workers", str(workers)]
        row["prep"] = timed(driver)
        row["driver_mb"] = int((work / "driver_rss").read_text()) / 1024
        row["resume"] = timed(prep_command(config, out, workers))
        row.update(state_sizes(out))
        read = json.loads((out / "manifest.json").read_text())["balance"]["input"]
        if read != files:
            raise SystemExit(f"prep read {read} documents from {files} one-document files")
        shutil.rmtree(out)
        command = [sys.executable, "-m", __spec__.name, "--side", "datatrove", "--work", str(work)]
        row["datatrove"] = timed([*command, "--workers", str(workers)])
    return row


def exponent(rows: list[dict], key) -> float:
    first, last = rows[0], rows[-1]
    return math.log(key(last) / key(first)) / math.log(last["files"] / first["files"])


def report(rows: list[dict]) -> None:
    print(
        f"{'files':>8} {'MB in':>6} {'units':>6} {'plan s':>7} {'prep s':>7} {'cpu s':>6} {'MB':>6} {'driver MB':>9} "
        f"{'resume s':>8} {'datatrove s':>11} {'cpu s':>6} {'MB':>6} {'state MB':>8} {'markers MB':>10} "
        f"{'manifest MB':>11} {'out files':>9} {'dt/prep':>7} {'cpu':>6}"
    )
    for r in rows:
        prep, dt = r["prep"], r["datatrove"]
        print(
            f"{r['files']:>8} {r['input_mb']:>6.0f} {r['units']:>6} {r['plan_s']:>7.2f} {prep['wall']:>7.1f} "
            f"{prep['cpu']:>6.1f} {prep['peak_mb']:>6.0f} {r['driver_mb']:>9.0f} {r['resume']['wall']:>8.2f} "
            f"{dt['wall']:>11.1f} {dt['cpu']:>6.1f} {dt['peak_mb']:>6.0f} "
            f"{r['state_mb']:>8.2f} {r['markers_mb']:>10.2f} {r['manifest_mb']:>11.2f} {r['output_files']:>9} "
            f"{dt['wall'] / prep['wall']:>7.2f}x {dt['cpu'] / prep['cpu']:>5.2f}x"
        )
    if len(rows) > 1:
        for name, key in [
            ("plan", lambda r: r["plan_s"]),
            ("prep", lambda r: r["prep"]["wall"]),
            ("resume", lambda r: r["resume"]["wall"]),
            ("datatrove", lambda r: r["datatrove"]["wall"]),
            ("prep peak MB", lambda r: r["prep"]["peak_mb"]),
            ("driver MB", lambda r: r["driver_mb"]),
        ]:
            print(f"growth exponent, {name}: {exponent(rows, key):.2f}")
        a, b = rows[-2], rows[-1]
        for name, key in [
            ("prep s", lambda r: r["prep"]["wall"]),
            ("resume s", lambda r: r["resume"]["wall"]),
            ("prep peak MB", lambda r: r["prep"]["peak_mb"]),
            ("driver MB", lambda r: r["driver_mb"]),
            ("plan s", lambda r: r["plan_s"]),
        ]:
            # A figure that fell between the last two N (noise: peak memory) is held flat,
            # not projected below zero.
            slope = max((key(b) - key(a)) / (b["files"] - a["files"]), 0.0)
            print(f"projected at 1,000,000 files, {name}: {key(b) + slope * (1_000_000 - b['files']):,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="1000,4000,16000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--stage", default="normalize", help="the one stage prep runs, with its default options; none: no stage"
    )
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "datatrove":
        run_datatrove(args.work / "in", args.work / "datatrove", args.workers)
        return
    if args.side == "prep":
        run_prep(args.work / "many.toml", args.work / "out", args.workers, args.work / "driver_rss")
        return
    rows = [measure(args.data, int(n), args.workers, args.stage) for n in args.files.split(",")]
    report(rows)


if __name__ == "__main__":
    main()
