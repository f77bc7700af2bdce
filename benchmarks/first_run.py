"""A fresh machine's first run: the bundled sample's whole chain (configs/sample.toml:
normalize, length, langid, quality, pii, dedup, tokenize) from an empty numba cache, then
the same run again with the cache warm. ``--chain redpajama`` runs configs/redpajama.toml's
longer chain (fix_text and paragraph_dedup too) on the same sample.

The cache is emptied by pointing ``NUMBA_CACHE_DIR`` at a new folder, so nothing compiled
before counts. Wall time of the whole ``prep run`` command, as a user sees it; the
difference between the two runs is the compile time a fresh install pays once. The CPU
seconds of each run (the command and its workers) come beside it, and the load average
before: on a shared machine wall time says more about the neighbours than about prep.

    python -m benchmarks.first_run [--workers 2] [--chain sample|redpajama]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chain", choices=("sample", "redpajama"), default="sample")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="prep-first-run-") as folder:
        root = Path(folder)
        config = chain_config(args.chain, root)
        cold, cold_cpu = timed_run(config, root / "cold", root / "numba-cache", args.workers)
        warm, warm_cpu = timed_run(config, root / "warm", root / "numba-cache", args.workers)
    print(f"configs/{args.chain}.toml on the sample, {args.workers} workers (load average {load:.2f} before)")
    print(f"  first run, empty numba cache   {cold:6.1f} s   {cold_cpu:5.1f} CPU-s")
    print(f"  second run, warm cache         {warm:6.1f} s   {warm_cpu:5.1f} CPU-s")
    print(f"  compiling, paid once           {cold - warm:6.1f} s   {cold_cpu - warm_cpu:5.1f} CPU-s")
    print(f"  first run / {TARGET_SECONDS:.0f} s target       {cold / TARGET_SECONDS:6.2f}x")


if __name__ == "__main__":
    main()
