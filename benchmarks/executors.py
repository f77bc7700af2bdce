"""Ray executor against the local executor: the same config over the same real corpus, on
one machine, with the same number of cores.

    python -m benchmarks.executors [--repeat 2] [--workers 2] [--data ../shared/data]

(Run it as a module from the repository root, like every benchmark here.)

Compared: `prep run CONFIG --executor ray` with Ray limited to `--workers` CPUs
(`ray.init(num_cpus=workers)`, the options RayExecutor itself passes) against
`prep run CONFIG --executor local --workers N`. Both call run_pipeline(config, out,
workers=N, executor=..., quiet=True), each run in a fresh Python process of its own (as
the CLI would be), writing into a fresh output folder.

Corpus: the shared web, code and math files, read in place (12 files, about 29 MB
gzipped), in the RedPajama-like layout of configs/redpajama.toml; web/web_html (raw HTML)
is left out. web/nltk_webtext keeps no document up to dedup (an empty unit there).
Stages: normalize, length, langid (web), quality (web / code / math rules), pii, dedup
(MinHash 5-grams, 14x8, min_similarity 0.7, 32 partitions), tokenize (cl100k_base), with
the options of configs/redpajama.toml plus the length limits of configs/sample.toml.

Order: one untimed warm-up run of each side first (numba's on-disk compile caches, the
page cache, Ray's first start), then `--repeat` rounds, alternating ABBA (local, ray;
ray, local; ...) so a drift in the machine's load hits both sides alike.

Ray's cluster start-up: the ray side calls ray.init itself before run_pipeline (so
RayExecutor finds Ray initialised and does not call it again) and ray.shutdown after;
both are timed apart. "wall" is the whole child process, start-up and imports included,
so Ray's wall includes ray.init and ray.shutdown; "pipeline" is run_pipeline alone, i.e.
Ray without its cluster start-up and shutdown (Ray's workers are started by ray.init, so
their process start-up and Python imports are still inside "pipeline").

Where the time goes: every executor.run call (one per phase: segment 0, dedup map, dedup
reduce, segment 1) is timed, with each task's own seconds, process id and start time
measured inside the worker: "busy" is the wall seconds spent inside tasks, "cpu" their CPU
seconds, "idle" the core-seconds of the phase spent outside any task, "first" the delay
from the phase's start to its first task starting (pool spawn or Ray dispatch). CPU
seconds of the whole process tree (driver, pool or Ray workers, Ray's raylet / gcs_server
and helpers) are sampled from /proc every 0.2 s, and the machine's other CPU use during
each run ("others CPU s", from /proc/stat) says how noisy the run was.

Outputs: the files under docs/, rejects/ and tokens/ of every run are compared by sha256.

Per-core rate: one more local run, of configs/c4.toml's stage chain (unchanged but for its
paths) over the C4-like shared web files (the five web files above), gives MB of gzipped
input and documents per core-second, for sizing a cluster. The headline divides by the
CPU seconds of the run's process tree; it also prints the rate per core-second of task
time and per wall second x workers. The last is lower: web_gold is 8 of the 10 MB, so one
worker idles while the other finishes it, and on a shared machine other processes' CPU
(printed) stretches the wall.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.proctree import wait_sampling

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

CORPUS = {
    "web": [
        "web/dolma_ccmain_20190717_00140.jsonl.gz",
        "web/nltk_webtext.jsonl.gz",
        "web/dolma_cc_en_head_and_provided.jsonl.gz",
        "web/datajuicer_redpajama_pile_samples.jsonl.gz",
        "web/olmo_paloma_c4_100_domains_guardian_val.jsonl.gz",
        "web/web_gold.jsonl.gz",
    ],
    "code": [
        "code/python_stdlib.jsonl.gz",
        "code/js_usr_lib_node_modules.jsonl.gz",
        "code/perl_usr_share_perl.jsonl.gz",
    ],
    "math": ["math/stacks_project_sections.jsonl.gz", "math/gsm8k.jsonl.gz", "math/datajuicer_arxiv_sample.jsonl.gz"],
}

STAGES = """
[[stages]]
name = "normalize"
[[stages]]
name = "length"
min_chars = 200
max_chars = 1_000_000
[stages.per_source.math]
min_chars = 50
[[stages]]
name = "langid"
languages = ["en"]
min_score = 0.65
sources = ["web"]
[[stages]]
name = "quality"
code_sources = ["code"]
math_sources = ["math"]
code_max_line_length = 1000
code_max_mean_line_length = 100
code_min_alnum_frac = 0.25
code_max_blob_chars = 1024
math_max_dup_line_char_frac = 0.5
[[stages]]
name = "pii"
public_ips_only = true
[[stages]]
name = "dedup"
ngram = 5
bands = 14
rows = 8
min_similarity = 0.7
partitions = 32
[[stages]]
name = "tokenize"
tokenizer = "cl100k_base"
"""

COMPARED = ("docs", "rejects", "tokens")
PHASES = {"segment_task": "segment", "map_task": "dedup map", "reduce_task": "dedup reduce"}


def corpus_config(data: Path) -> tuple[str, list[Path]]:
    files = [data / f for fs in CORPUS.values() for f in fs]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise SystemExit(f"missing input files: {', '.join(missing)}")
    text = "".join(
        f"[sources.{source}]\npaths = {json.dumps([str(data / f) for f in fs])}\n" for source, fs in CORPUS.items()
    )
    return text + STAGES, files


def c4_config(data: Path) -> tuple[str, list[Path]]:
    """configs/c4.toml as it is, its [sources.web] paths pointed at the shared web text."""
    files = [data / f for f in CORPUS["web"]]
    text = (REPO / "configs" / "c4.toml").read_text()
    paths = json.dumps([str(f) for f in files])
    text, n = re.subn(r"(?m)^(\[sources\.web\]\s*\npaths\s*=\s*)\[.*?\]", lambda m: m.group(1) + paths, text)
    if n != 1:
        raise SystemExit("configs/c4.toml: could not find [sources.web] paths to replace")
    return text, files


def input_documents(files: list[Path]) -> int:
    import gzip

    count = 0
    for path in files:
        with gzip.open(path, "rb") as f:
            count += sum(1 for line in f if line.strip())
    return count


# -- inside the child process -------------------------------------------------------------


def _timed_task(fn, args, progress=None):
    """Runs one real task inside the worker and says how long it took there."""
    start, cpu = time.time(), time.process_time()
    result = fn(*args, progress=progress)
    return result, {
        "pid": os.getpid(),
        "start": start,
        "seconds": time.time() - start,
        "cpu": time.process_time() - cpu,
        "threads": len(os.listdir("/proc/self/task")),
    }


def _instrument(executor_cls, phases: list[dict]) -> None:
    """Wrap executor_cls.run so every task reports its own time; record one row per call."""
    original = executor_cls.run

    def run(self, tasks, bar):
        name = PHASES.get(tasks[0][0].__name__, tasks[0][0].__name__) if tasks else "empty"
        if name == "segment":
            name += f" {tasks[0][1][2]}"  # segment_task(config, out, segment_index, ...)
        phase = {"phase": name, "tasks": len(tasks), "start": time.time()}
        wrapped = original(self, [(_timed_task, (fn, args)) for fn, args in tasks], bar)
        phase["wall"] = time.time() - phase["start"]
        timings = [t for _, t in wrapped]
        phase["busy"] = sum(t["seconds"] for t in timings)
        phase["task_cpu"] = sum(t["cpu"] for t in timings)
        phase["threads"] = max((t["threads"] for t in timings), default=0)
        phase["first"] = min((t["start"] for t in timings), default=phase["start"]) - phase["start"]
        phase["pids"] = len({t["pid"] for t in timings})
        phases.append(phase)
        return [r for r, _ in wrapped]

    executor_cls.run = run


def child(side: str, config: Path, out: Path, workers: int, result: Path) -> None:
    # The task wrapper must pickle by reference under a real module name, not __main__.
    from benchmarks.executors import _instrument as instrument
    from pipeline.engine.run import run_pipeline

    phases: list[dict] = []
    info: dict = {"side": side, "init": 0.0, "shutdown": 0.0}
    if side == "ray":
        import ray

        from pipeline.engine.ray_executor import RayExecutor

        instrument(RayExecutor, phases)
        start = time.perf_counter()
        ray.init(num_cpus=workers, log_to_driver=False, include_dashboard=False)  # RayExecutor's options
        info["init"] = time.perf_counter() - start
    else:
        from pipeline.engine.executor import LocalExecutor

        instrument(LocalExecutor, phases)
    start = time.perf_counter()
    manifest = run_pipeline(config, out, workers=workers, executor=side, quiet=True)
    info["pipeline"] = time.perf_counter() - start
    if side == "ray":
        noop = ray.remote(lambda: None)
        ray.get([noop.remote() for _ in range(20)])  # warm
        start = time.perf_counter()
        for _ in range(50):
            ray.get(noop.remote())
        info["noop_ms"] = (time.perf_counter() - start) / 50 * 1000
        start = time.perf_counter()
        ray.shutdown()
        info["shutdown"] = time.perf_counter() - start
    info["phases"] = phases
    info["documents"] = manifest["balance"]["input"]
    info["kept"] = manifest["balance"]["output"]
    result.write_text(json.dumps(info))


# -- in the parent ---------------------------------------------------------------------------


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if cmd.startswith("ray::") or "default_worker.py" in cmd:
        return "ray workers"
    if "raylet" in cmd or "gcs_server" in cmd or "/ray/" in cmd or "ray/_private" in cmd:
        return "ray system"
    if "multiprocessing" in cmd:
        return "pool workers"
    return "other"


def measure(side: str, config: Path, out: Path, workers: int) -> dict:
    """One run in its own process tree: wall, and CPU seconds of the tree by kind of process."""
    result = out.parent / f"{out.name}.result.json"
    machine_before = _machine_busy()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.executors",
            "--side",
            side,
            "--config",
            str(config),
            "--out",
            str(out),
            "--workers",
            str(workers),
            "--result",
            str(result),
        ],
        cwd=REPO,
    )
    ticks: dict[int, tuple[str, int]] = {}

    def sample(pids: list[int]) -> None:
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                kind = ticks[pid][0] if pid in ticks and ticks[pid][0] != "other" else _kind(pid, proc.pid)
                ticks[pid] = (kind, int(fields[11]) + int(fields[12]))
            except (OSError, IndexError, ValueError):
                pass

    exit_code = wait_sampling(proc, sample)
    wall = time.perf_counter() - start
    machine = _machine_busy() - machine_before
    if exit_code != 0:
        raise SystemExit(f"{side} run failed with exit code {exit_code}")
    info = json.loads(result.read_text())
    result.unlink()
    cpu: dict[str, float] = {}
    for kind, t in ticks.values():
        cpu[kind] = cpu.get(kind, 0.0) + t / os.sysconf("SC_CLK_TCK")
    others = max(0.0, machine - sum(cpu.values()))
    return {**info, "wall": wall, "cpu": cpu, "others": others}


def _machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (all processes), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def output_hashes(out: Path) -> dict[str, str]:
    hashes = {}
    for folder in COMPARED:
        for path in sorted((out / folder).rglob("*")):
            if path.is_file():
                digest = hashlib.sha256()
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
                hashes[str(path.relative_to(out))] = digest.hexdigest()
    return hashes


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each side (after one warm-up each)")
    parser.add_argument("--workers", type=int, default=2, help="local pool size and Ray's num_cpus")
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument("--no-c4", action="store_true", help="skip the per-core rate run of configs/c4.toml")
    parser.add_argument("--side", choices=["local", "ray"], help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # one run, inside its own process tree
        child(args.side, args.config, args.out, args.workers, args.result)
        return

    text, files = corpus_config(args.data)
    gz_bytes = sum(f.stat().st_size for f in files)
    documents = input_documents(files)
    cores = args.workers
    print(
        f"corpus: {len(files)} files, {gz_bytes / 1e6:.1f} MB gzipped, {documents:,} documents; "
        f"{cores} workers / Ray num_cpus={cores}; {os.cpu_count()} CPUs on this machine",
        flush=True,
    )
    runs: list[dict] = []
    reference: dict[str, str] | None = None
    mismatches: list[str] = []
    with tempfile.TemporaryDirectory(prefix="prep-executors-") as tmp:
        work = Path(tmp)
        config = work / "redpajama_like.toml"
        config.write_text(text)
        order = [("local", True), ("ray", True)]
        for k in range(args.repeat):
            pair = ["local", "ray"] if k % 2 == 0 else ["ray", "local"]
            order += [(side, False) for side in pair]
        for n, (side, warmup) in enumerate(order):
            out = work / f"out-{n}-{side}"
            r = measure(side, config, out, args.workers)
            hashes = output_hashes(out)
            if reference is None:
                reference = hashes
            elif hashes != reference:
                differ = sorted(k for k in set(hashes) | set(reference) if hashes.get(k) != reference.get(k))
                mismatches.append(f"run {n} ({side}): {len(differ)} files differ, e.g. {differ[:3]}")
            shutil.rmtree(out)
            r.update(n=n, warmup=warmup, files=len(hashes))
            runs.append(r)
            print(
                f"  {'warm-up' if warmup else 'timed'} {side:<5} wall {r['wall']:6.1f} s  "
                f"pipeline {r['pipeline']:6.1f} s"
                f"  ray.init {r['init']:4.1f} s  shutdown {r['shutdown']:4.1f} s",
                flush=True,
            )

        c4 = None
        if not args.no_c4:
            c4_text, c4_files = c4_config(args.data)
            c4_path = work / "c4_shared.toml"
            c4_path.write_text(c4_text)
            c4 = measure("local", c4_path, work / "out-c4", args.workers)
            c4.update(gz=sum(f.stat().st_size for f in c4_files), files=len(c4_files))

    timed = [r for r in runs if not r["warmup"]]
    print(
        f"\n{'run':<10} {'wall s':>7} {'pipeline s':>10} {'ray.init s':>10} {'shutdown s':>10} {'CPU s':>7}"
        f" {'others CPU s':>12} {'docs/s/core':>11} {'MB/s/core':>9}"
    )
    for r in timed:
        per_core = r["wall"] * cores
        print(
            f"{r['side'] + ' #' + str(r['n']):<10} {r['wall']:7.1f} {r['pipeline']:10.1f} {r['init']:10.1f}"
            f" {r['shutdown']:10.1f} {sum(r['cpu'].values()):7.1f} {r['others']:12.1f}"
            f" {documents / per_core:11,.0f} {gz_bytes / 1e6 / per_core:9.3f}"
        )

    def side_mean(side: str, key: str) -> float:
        return _mean(r[key] for r in timed if r["side"] == side)

    print("\nCPU seconds of the process tree, by process (mean of the timed runs):")
    for side in ("local", "ray"):
        kinds: dict[str, float] = {}
        for r in (r for r in timed if r["side"] == side):
            for kind, seconds in r["cpu"].items():
                kinds[kind] = kinds.get(kind, 0.0) + seconds / args.repeat
        print(f"  {side:<6} " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))

    print(
        f"\nper phase (mean of the timed runs): wall s; busy = seconds inside tasks (summed over tasks); cpu = CPU"
        f" seconds inside tasks; idle = {cores} x wall - busy; first = s until the first task started; thr = threads"
        " in a worker"
    )
    head = f"{'wall':>6} {'busy':>6} {'cpu':>6} {'idle':>6} {'first':>6} {'thr':>4}"
    print(f"{'':<14} {'':>5} | {'local':^39} | {'ray':^39}")
    print(f"{'phase':<14} {'tasks':>5} | {head} | {head}")
    n_phases = len(timed[0]["phases"])
    for i in range(n_phases):
        rows = {side: [r["phases"][i] for r in timed if r["side"] == side] for side in ("local", "ray")}
        cells = []
        for side in ("local", "ray"):
            wall = _mean(p["wall"] for p in rows[side])
            busy = _mean(p["busy"] for p in rows[side])
            cells.append(
                f"{wall:6.1f} {busy:6.1f} {_mean(p['task_cpu'] for p in rows[side]):6.1f}"
                f" {cores * wall - busy:6.1f} {_mean(p['first'] for p in rows[side]):6.2f}"
                f" {max(p['threads'] for p in rows[side]):4d}"
            )
        print(f"{rows['local'][0]['phase']:<14} {rows['local'][0]['tasks']:>5} | {cells[0]} | {cells[1]}")
    for side in ("local", "ray"):
        outside = _mean(r["pipeline"] - sum(p["wall"] for p in r["phases"]) for r in timed if r["side"] == side)
        print(f"  {side}: {outside:.1f} s of run_pipeline outside executor.run (planning, dedup finalize, manifest)")
    print(f"  ray: a no-op task's round trip {side_mean('ray', 'noop_ms'):.2f} ms (measured after the run)")

    local_wall, ray_wall = side_mean("local", "wall"), side_mean("ray", "wall")
    local_pipe, ray_pipe = side_mean("local", "pipeline"), side_mean("ray", "pipeline")
    print(
        f"\nray / local wall: {ray_wall / local_wall:.2f}x with ray.init and shutdown "
        f"({ray_wall:.1f} s vs {local_wall:.1f} s), {ray_pipe / local_pipe:.2f}x without "
        f"({ray_pipe:.1f} s vs {local_pipe:.1f} s); issue target <= 1.2x"
    )

    def best(side: str, key: str) -> float:
        return min(r[key] for r in timed if r["side"] == side)

    print(
        f"  best runs: {best('ray', 'wall') / best('local', 'wall'):.2f}x with, "
        f"{best('ray', 'pipeline') / best('local', 'pipeline'):.2f}x without"
    )
    files = runs[0]["files"]
    if mismatches:
        print(f"outputs byte-identical: NO ({len(runs)} runs, {files} files under {', '.join(COMPARED)})")
        for line in mismatches:
            print(f"  {line}")
    else:
        print(
            f"outputs byte-identical: yes ({len(runs)} runs incl. warm-ups, {files} files under "
            f"{'/, '.join(COMPARED)}/ by sha256)"
        )
    if c4 is not None:
        cpu = sum(c4["cpu"].values())
        busy = sum(p["busy"] for p in c4["phases"])
        core_seconds = c4["wall"] * cores
        print(
            f"per-core rate: {c4['gz'] / 1e6 / cpu:.3f} MB/s, {c4['documents'] / cpu:,.0f} docs/s "
            f"(config configs/c4.toml"
            f" stages over {c4['files']} shared web files, {c4['gz'] / 1e6:.1f} MB gzipped, "
            f"{c4['documents']:,} documents;"
            f" local executor, {cores} workers; per CPU-second of the process tree, {cpu:.1f} s)"
        )
        print(
            f"  per core-second of task time ({busy:.1f} s): {c4['gz'] / 1e6 / busy:.3f} MB/s, "
            f"{c4['documents'] / busy:,.0f}"
            f" docs/s; per core-second of wall x {cores} ({c4['wall']:.1f} s x {cores}): "
            f"{c4['gz'] / 1e6 / core_seconds:.3f}"
            f" MB/s, {c4['documents'] / core_seconds:,.0f} docs/s (one large file leaves a core idle; "
            f"others' CPU during"
            f" the run {c4['others']:.1f} s)"
        )


if __name__ == "__main__":
    main()
