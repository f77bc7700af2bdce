"""Kernels compiled by the project and shipped with it, so that a fresh install's first run
loads them instead of compiling: compiling was 15-16 of a first run's 18-20 CPU-seconds.

``BUNDLE`` holds numba's cache files of every kernel that the bundled configs' chains, a
mixture and the DataLoader compile, each under its source folder, and ``KEY``: what they
were compiled from and for (``bundle_key``): the kernel sources' digest
(``numba_cache.sources_digest``), numba's version, Python's cache tag, the machine and
the CPU level (``portable_cpu``). When ``clear_stale_caches`` finds the caches out of date
(a fresh clone has none) and the key is this install's, it copies them where numba looks
for them. numba checks each file again when it loads it (its own version, the function's
bytecode, the CPU, the source file's contents), so a file that does not fit is compiled
as before, never loaded wrong. ``python -m pipeline.compile.prebuilt_build`` writes the
bundle; ``tests/test_prebuilt.py`` fails when the kernel sources moved on without it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import zipfile
import zlib
from importlib import metadata
from pathlib import Path

from pipeline.util.atomic import atomic_path

BUNDLE = Path("pipeline/compile/prebuilt/kernels.zip")  # under the root holding pipeline/
KEY = "key.json"
CACHE_SUFFIXES = (".nbi", ".nbc")  # numba's index and data files


def bundle_key(sources_digest: str) -> dict[str, str | None]:
    """What compiled kernels depend on besides their sources' digest, for this process."""
    try:
        numba_version = metadata.version("numba")
    except metadata.PackageNotFoundError:
        numba_version = None
    return {
        "sources": sources_digest,
        "numba": numba_version,
        "python": sys.implementation.cache_tag,
        "machine": platform.machine(),
        "cpu": os.environ.get("NUMBA_CPU_NAME"),
        "cpu_features": os.environ.get("NUMBA_CPU_FEATURES"),
    }


def read_key(bundle: Path) -> dict | None:
    """The bundle's key; None where there is no readable bundle."""
    try:
        with zipfile.ZipFile(bundle) as archive:
            return json.loads(archive.read(KEY))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


def install_prebuilt(root: Path, files: list[Path], sources_digest: str, cache_folder) -> int:
    """Copies the bundle's cache files where numba looks for them, if its key is this
    install's. ``files``: the kernel sources; an entry is taken only for one of their
    folders, each copied to ``cache_folder(source_folder)``. Returns how many files it
    wrote; 0 where the bundle is absent, damaged or not for this install (nothing is
    lost: the kernels compile as they would have)."""
    bundle = root / BUNDLE
    if read_key(bundle) != bundle_key(sources_digest):
        return 0
    folders = {path.parent.relative_to(root).as_posix(): path.parent for path in files}
    written = 0
    try:
        with zipfile.ZipFile(bundle) as archive:
            for name in archive.namelist():
                folder, _, file = name.rpartition("/")
                if folder not in folders or not file.endswith(CACHE_SUFFIXES):
                    continue
                with atomic_path(cache_folder(folders[folder]) / file) as tmp:
                    tmp.write_bytes(archive.read(name))
                written += 1
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error):  # what was written loads; the rest compiles
        pass
    return written
