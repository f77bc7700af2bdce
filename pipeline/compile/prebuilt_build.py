"""Writes the kernels prep ships compiled (``prebuilt.BUNDLE``): run after changing any file
of the kernel folders (``numba_cache.KERNEL_FOLDERS``), on an x86-64 Linux machine with
the Python and numba a fresh install gets; ``tests/test_prebuilt.py`` says when it is due.

    python -m pipeline.compile.prebuilt_build

It compiles into an empty ``NUMBA_CACHE_DIR`` for the portable CPU level
(``portable_cpu``), by running what a new user runs first: every config of ``configs/`` (on
its own inputs where they are here, else its stages on the bundled sample's sources), a
``prep mix`` of the sample's run and a few DataLoader batches of both. Then it packs the
cache files by the source folder they belong to, with the key they fit
(``prebuilt.bundle_key``), into one zip written atomically. The zip is deterministic
for the same compiled files: entries sorted, times fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pipeline.compile.numba_cache import ROOT, cache_folder, kernel_sources, sources_digest
from pipeline.compile.portable_cpu import LEVEL, LEVEL_FLAGS, cpu_flags
from pipeline.compile.prebuilt import BUNDLE, CACHE_SUFFIXES, KEY, bundle_key
from pipeline.util.atomic import atomic_path

CONFIGS = ROOT / "configs"
SAMPLE = CONFIGS / "sample.toml"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the same bytes for the same files
LOADER_SCRIPT = """
import sys
from pipeline.loader import TokenDataset
for path in sys.argv[1:]:
    dataset = TokenDataset(path, seq_len=2048, seed=0)
    for batch in range(4):
        dataset.__getitems__([batch * 8 + i for i in range(8)])
"""


def on_sample(config: Path, folder: Path, root: Path = ROOT) -> Path:
    """``config``'s stages over the sources of the sample bundled at ``root`` (web, code and
    math), written to ``folder`` with absolute paths: for a config whose inputs are not here."""
    sample = root / SAMPLE.relative_to(ROOT)
    sources = sample.read_text().split("\n[[stages]]", 1)[0].replace('"../data/', f'"{root}/data/')
    stages = config.read_text().split("\n[[stages]]", 1)[1]
    written = folder / f"{config.stem}-on-sample.toml"
    written.write_text(f"{sources}\n[[stages]]{stages}")
    return written


def _prep(arguments: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pipeline", *arguments]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)


def compile_everything(work: Path, env: dict[str, str]) -> None:
    """Runs the configs, a mixture and the loader, each compiling into ``env``'s cache."""
    for config in sorted(CONFIGS.glob("*.toml")):
        out = work / config.stem
        done = _prep(["run", str(config), "--out", str(out), "-q"], env)
        if done.returncode != 0:  # its own inputs are elsewhere: its stages on the sample
            done = _prep(["run", str(on_sample(config, work)), "--out", str(out), "-q"], env)
        if done.returncode != 0:
            raise SystemExit(f"prep run {config.name} failed:\n{done.stderr}")
        print(f"compiled {config.name}'s chain", flush=True)
    done = _prep(["mix", str(work / "sample"), "--code", "0.3", "--out", str(work / "mix")], env)
    if done.returncode != 0:
        raise SystemExit(f"prep mix failed:\n{done.stderr}")
    runs = [str(work / "sample"), str(work / "mix")]
    done = subprocess.run(
        [sys.executable, "-c", LOADER_SCRIPT, *runs], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the DataLoader failed:\n{done.stderr}")
    print("compiled the mixture's and the DataLoader's kernels", flush=True)


def pack(bundle: Path, key: dict, folders: dict[str, Path]) -> int:
    """Zips the cache files of each source folder (its path under the root, and where its
    cache files are) with ``key``; returns how many files it packed."""
    entries = sorted(
        (f"{name}/{path.name}", path)
        for name, cache in folders.items()
        if cache.is_dir()
        for path in cache.iterdir()
        if path.suffix in CACHE_SUFFIXES
    )
    with atomic_path(bundle) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(zipfile.ZipInfo(KEY, FIXED_TIME), json.dumps(key, indent=1, sort_keys=True))
        for name, path in entries:
            archive.writestr(zipfile.ZipInfo(name, FIXED_TIME), path.read_bytes(), zipfile.ZIP_DEFLATED)
    return len(entries)


def main() -> None:
    if os.uname().machine != "x86_64" or not LEVEL_FLAGS <= cpu_flags(Path("/proc/cpuinfo")):
        raise SystemExit(f"the kernels are built on an x86-64 Linux machine with every {LEVEL} feature")
    with tempfile.TemporaryDirectory(prefix="prep-prebuilt-") as folder:
        work = Path(folder)
        env = {
            **os.environ,
            "NUMBA_CACHE_DIR": str(work / "numba-cache"),
            "NUMBA_CPU_NAME": LEVEL,
            "NUMBA_CPU_FEATURES": "",
        }
        compile_everything(work, env)
        os.environ.update(env)  # the key and the cache folders as the runs saw them
        key = bundle_key(sources_digest(kernel_sources()))
        sources = {path.parent for path in kernel_sources()}
        folders = {str(source.relative_to(ROOT)): cache_folder(source) for source in sorted(sources)}
        count = pack(ROOT / BUNDLE, key, folders)
    print(f"wrote {BUNDLE}: {count} files, {(ROOT / BUNDLE).stat().st_size / 1e6:.1f} MB, for numba {key['numba']}")


if __name__ == "__main__":
    main()
