"""A fresh machine's first run: the bundled sample's whole chain (configs/sample.toml:
normalize, length, langid, quality, pii, dedup, tokenize) from an empty numba cache, then
the same run again with the cache warm. ``--chain redpajama`` runs configs/redpajama.toml's
longer chain (fix_text and paragraph_dedup too) on the same sample. ``--steps`` also
compiles the run's warm-up steps one after another in one fresh process, each step's CPU
seconds apart: the compile's own cost, which two workers' wall time hides behind the
host's scheduling.

The cache is emptied by pointing ``NUMBA_CACHE_DIR`` at a new folder, so nothing compiled
before counts. Wall time of the whole ``prep run`` command, as a user sees it; the
difference between the two runs is the compile time a fresh install pays once. The CPU
seconds of each run (the command and its workers) come beside it, and the load average
before: on a shared machine wall time says more about the neighbours than about prep.

    python -m benchmarks.first_run [--workers 2] [--chain sample|redpajama] [--steps]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.proctree import cpu_and_peak_memory

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "configs" / "sample.toml"
TARGET_SECONDS = 10.0


def chain_config(chain: str, folder: Path) -> Path:
    """The config to time: the sample's own, or redpajama.toml's stages over the sample's
    sources (both name them web, code and math), written with absolute paths."""
    if chain == "sample":
        return SAMPLE
    sources = SAMPLE.read_text().split("[[stages]]", 1)[0].replace('"../data/', f'"{REPO}/data/')
    stages = (REPO / "configs" / f"{chain}.toml").read_text().split("[[stages]]", 1)[1]
    config = folder / f"{chain}-on-sample.toml"
    config.write_text(f"{sources}[[stages]]{stages}")
    return config


def timed_run(config: Path, out: Path, cache: Path, workers: int) -> tuple[float, float]:
    """Wall and CPU seconds of one ``prep run`` (its whole process tree)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out)]
    start = time.perf_counter()
    code, cpu, _ = cpu_and_peak_memory(subprocess.Popen([*command, "-q", "-w", str(workers)], env=env))
    if code != 0:
        raise SystemExit(f"prep run failed with exit code {code}")
    return time.perf_counter() - start, cpu


# Run in a fresh process: the config's warm-up steps in the order a run takes them.
STEPS_SCRIPT = """
import json, sys, time
from pipeline.engine.config import load_config
from pipeline.engine.input_files import input_stat
from pipeline.engine.plan import plan_units
from pipeline.engine.warmup import warmup_plan
config = load_config(sys.argv[1])
steps, _ = warmup_plan(config, plan_units(config, lambda path: tuple(input_stat(path))), {})
seconds = []
for step in steps:
    start = time.process_time()
    step()
    seconds.append([getattr(step, "func", step).__name__, time.process_time() - start])
print(json.dumps(seconds))
"""


def step_seconds(config: Path, cache: Path) -> list[tuple[str, float]]:
    """Each warm-up step's CPU seconds, compiled in one process from an empty cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", STEPS_SCRIPT, str(config)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compiling the warm-up steps failed:\n{done.stderr}")
    return [tuple(step) for step in json.loads(done.stdout)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chain", choices=("sample", "redpajama"), default="sample")
    parser.add_argument("--steps", action="store_true", help="also each warm-up step's CPU seconds, one process")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="prep-first-run-") as folder:
        root = Path(folder)
        config = chain_config(args.chain, root)
        cold, cold_cpu = timed_run(config, root / "cold", root / "numba-cache", args.workers)
        warm, warm_cpu = timed_run(config, root / "warm", root / "numba-cache", args.workers)
        steps = step_seconds(config, root / "steps-cache") if args.steps else []
    print(f"configs/{args.chain}.toml on the sample, {args.workers} workers (load average {load:.2f} before)")
    print(f"  first run, empty numba cache   {cold:6.1f} s   {cold_cpu:5.1f} CPU-s")
    print(f"  second run, warm cache         {warm:6.1f} s   {warm_cpu:5.1f} CPU-s")
    print(f"  compiling, paid once           {cold - warm:6.1f} s   {cold_cpu - warm_cpu:5.1f} CPU-s")
    print(f"  first run / {TARGET_SECONDS:.0f} s target       {cold / TARGET_SECONDS:6.2f}x")
    if steps:
        print(f"  warm-up steps in one process: {sum(s for _, s in steps):.1f} CPU-s")
        for name, seconds in steps:
            print(f"    {name:<24} {seconds:5.2f}")


if __name__ == "__main__":
    main()
