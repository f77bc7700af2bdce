"""A fresh machine's first run: the bundled sample's whole chain (configs/sample.toml:
normalize, length, langid, quality, pii, dedup, tokenize) from an empty numba cache, then
the same run again with the cache warm.

The cache is emptied by pointing ``NUMBA_CACHE_DIR`` at a new folder, so nothing compiled
before counts. Wall time of the whole ``prep run`` command, as a user sees it; the
difference between the two runs is the compile time a fresh install pays once.

    python -m benchmarks.first_run [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 15.0


def timed_run(out: Path, cache: Path, workers: int) -> float:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "pipeline", "run", str(REPO / "configs" / "sample.toml"), "--out", str(out)]
    start = time.perf_counter()
    subprocess.run([*command, "-q", "-w", str(workers)], env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prep-first-run-") as folder:
        root = Path(folder)
        cold = timed_run(root / "cold", root / "numba-cache", args.workers)
        warm = timed_run(root / "warm", root / "numba-cache", args.workers)
    print(f"configs/sample.toml, whole chain, {args.workers} workers")
    ratio = cold / TARGET_SECONDS
    print(f"  first run, empty numba cache   {cold:6.1f} s   ({ratio:.2f}x the {TARGET_SECONDS:.0f} s target)")
    print(f"  second run, warm cache         {warm:6.1f} s")
    print(f"  compiling, paid once           {cold - warm:6.1f} s")


if __name__ == "__main__":
    main()
