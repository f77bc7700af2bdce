"""A fresh machine's first run: the bundled sample's whole chain (configs/sample.toml:
normalize, length, langid, quality, pii, dedup, tokenize), three ways. First from a fresh
copy of the repository's files, as a clone has them: no bytecode, no numba cache, only
the kernels prep ships compiled (``pipeline/compile/prebuilt.py``), which is what a user
sees after installing. Then from an empty numba cache, nothing prebuilt: the compile a
fresh install would pay without them (and pays where they do not fit: another numba,
another CPU level). Then again with that cache warm. ``--chain redpajama`` runs
configs/redpajama.toml's longer chain (fix_text and paragraph_dedup too) on the same
sample. ``--steps`` also compiles the run's warm-up steps one after another in one fresh
process, each step's CPU seconds apart: the compile's own cost, which two workers' wall
time hides behind the host's scheduling.

The empty cache is a new ``NUMBA_CACHE_DIR``, stamped current for the repository's kernel
sources (``empty_cache``) so that nothing prebuilt is copied into it. Wall time
of the whole ``prep run`` command, as a user sees it, with the CPU seconds of each run
(the command and its workers) beside it, and the load average before: on a shared
machine wall time says more about the neighbours than about prep.

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
from pipeline.compile.numba_cache import stamp_current
from pipeline.compile.prebuilt_build import on_sample

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 10.0


def chain_config(chain: str, root: Path, folder: Path) -> Path:
    """The config to time, for the repository at ``root``: the sample's own, or
    redpajama.toml's stages over the sample's sources."""
    config = root / "configs" / f"{chain}.toml"
    return config if chain == "sample" else on_sample(config, folder, root)


def fresh_copy(folder: Path) -> Path:
    """The repository's files as a clone has them (tracked and new ones, no ``__pycache__``)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if "__pycache__" in source.parts or not source.is_file():
            continue
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    return folder


def empty_cache(folder: Path) -> Path:
    """A new ``NUMBA_CACHE_DIR`` stamped current for the repository's kernel sources: prep
    copies nothing prebuilt into it and compiles every kernel, as a machine does that the
    shipped kernels do not fit."""
    saved = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    try:
        stamp_current()
    finally:
        if saved is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = saved
    return folder


def timed_run(
    config: Path, out: Path, workers: int, root: Path = REPO, cache: Path | None = None
) -> tuple[float, float]:
    """Wall and CPU seconds of one ``prep run`` of the repository at ``root`` (its whole
    process tree), with numba's cache in ``cache`` (default: beside the sources)."""
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = str(root)
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out)]
    start = time.perf_counter()
    popen = subprocess.Popen([*command, "-q", "-w", str(workers)], env=env, cwd=root)
    code, cpu, _ = cpu_and_peak_memory(popen)
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
        copy = fresh_copy(root / "clone")
        fresh, fresh_cpu = timed_run(chain_config(args.chain, copy, root), root / "fresh", args.workers, copy)
        config = chain_config(args.chain, REPO, root)
        cache = empty_cache(root / "numba-cache")
        cold, cold_cpu = timed_run(config, root / "cold", args.workers, cache=cache)
        warm, warm_cpu = timed_run(config, root / "warm", args.workers, cache=cache)
        steps = step_seconds(config, empty_cache(root / "steps-cache")) if args.steps else []
    print(f"configs/{args.chain}.toml on the sample, {args.workers} workers (load average {load:.2f} before)")
    print(f"  first run, fresh install       {fresh:6.1f} s   {fresh_cpu:5.1f} CPU-s   (the kernels prep ships)")
    print(f"  first run, empty numba cache   {cold:6.1f} s   {cold_cpu:5.1f} CPU-s   (nothing prebuilt)")
    print(f"  second run, warm cache         {warm:6.1f} s   {warm_cpu:5.1f} CPU-s")
    print(f"  compiling, without prebuilt    {cold - warm:6.1f} s   {cold_cpu - warm_cpu:5.1f} CPU-s")
    print(f"  first run / {TARGET_SECONDS:.0f} s target       {fresh / TARGET_SECONDS:6.2f}x (fresh install)")
    if steps:
        print(f"  warm-up steps in one process: {sum(s for _, s in steps):.1f} CPU-s")
        for name, seconds in steps:
            print(f"    {name:<24} {seconds:5.2f}")


if __name__ == "__main__":
    main()
