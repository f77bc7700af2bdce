"""numba's on-disk cache, kept honest when the code it compiled in changes.

Why: ``@njit(cache=True)`` keys a cached kernel on its own source file's contents only.
A kernel that calls a helper from another file has that helper compiled into it, so after
the helper's file changes (an edit, a ``git checkout``, a ``git pull``) the caller's cache
still loads, with the old helper inside: the quality signals were once silently wrong that
way. The same holds for a module-level constant a kernel reads (the column numbers of
``stages/quality/signals.py``), which numba freezes into the compiled code. So
``clear_stale_caches`` runs when ``pipeline`` is imported, before any kernel loads: it
hashes the contents of every source file in the folders that hold kernels and what they
read (``KERNEL_FOLDERS``; about 100 files, a few milliseconds; this room's among them, as
``jit`` decides what every kernel compiles to), and when that hash differs
from the one stamped beside the caches, deletes every cached kernel of those folders
(``*.nbi``, ``*.nbc``), so each recompiles once on first use, unless the kernels prep
ships compiled for these very sources fit this install (``prebuilt``): those are copied
in instead. A fresh clone has no stamp, so its first import takes that path. An edit to
the engine or a command leaves the caches alone; ``tests/test_architecture.py`` checks
that no kernel lives outside these folders.

It looks where numba keeps caches for these files: each folder's ``__pycache__``, or the
mirror under ``NUMBA_CACHE_DIR`` when that is set, and stamps each place apart
(``stamp_path``): one stamp beside the sources once vouched for both, so caches compiled
before an edit, in the place not used since, loaded as current. A read-only install (no writable
``__pycache__``) is skipped: numba then caches in the user's folder, keyed by the installed
files, which a reinstall replaces together. No numba import here unless
``NUMBA_CACHE_DIR`` is set, so a command that compiles nothing pays a few milliseconds.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.compile.prebuilt import install_prebuilt
from pipeline.util.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[2]  # the folder holding pipeline/ and stages/
KERNEL_FOLDERS = (
    "pipeline/compile",
    "pipeline/kernels",
    "pipeline/loader",
    "pipeline/readers",
    "pipeline/text",
    "stages",
)
STAMP = "prep-numba-sources.sha256"
MARKS = "prep-warm-marks"  # ``warm_marks``' folder beside the caches


def marks_folder() -> Path:
    """Where ``warm_marks`` keeps its marks: beside the caches of the kernels' files."""
    user_dir = os.environ.get("NUMBA_CACHE_DIR")
    return Path(user_dir) / MARKS if user_dir else ROOT / "pipeline" / "__pycache__" / MARKS


def kernel_sources(root: Path = ROOT) -> list[Path]:
    """Every source file of the kernel folders under ``root``, sorted: a kernel may read any."""
    return [path for folder in KERNEL_FOLDERS for path in sorted((root / folder).rglob("*.py"))]


def sources_digest(files: list[Path], root: Path = ROOT) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def cache_folder(source_folder: Path) -> Path:
    """Where numba keeps the cached kernels of the source files in ``source_folder``."""
    user_dir = os.environ.get("NUMBA_CACHE_DIR")
    if not user_dir:
        return source_folder / "__pycache__"
    from numba.core.caching import _CacheLocator

    return Path(user_dir) / _CacheLocator.get_suitable_cache_subpath(str(source_folder / "any.py"))


def cache_folders(files: list[Path]) -> list[Path]:
    """Where numba keeps the cached kernels of ``files``."""
    return sorted({cache_folder(folder) for folder in {path.parent for path in files}})


def stamp_path(root: Path = ROOT) -> Path:
    """Where the digest of ``root``'s kernel sources is stamped: beside the caches it vouches
    for, so that the caches of each place numba keeps them (beside the sources, or under
    ``NUMBA_CACHE_DIR``, set or unset again) are checked on their own. Source trees sharing
    one ``NUMBA_CACHE_DIR`` stamp apart."""
    user_dir = os.environ.get("NUMBA_CACHE_DIR")
    if not user_dir:
        return root / "pipeline" / "__pycache__" / STAMP
    tree = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(user_dir) / f"{tree}-{STAMP}"


def stamp_current(root: Path = ROOT, digest: str | None = None) -> None:
    """Stamps the caches of ``root``'s kernels as compiled from its sources as they are."""
    stamp = stamp_path(root)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(stamp) as tmp:
        tmp.write_text(digest or sources_digest(kernel_sources(root), root))


def clear_stale_caches(root: Path = ROOT) -> bool:
    """Delete the cached kernels if any source file changed since they were stamped; True if it did."""
    try:
        files = kernel_sources(root)
        digest = sources_digest(files, root)
        stamp = stamp_path(root)
        if stamp.is_file() and stamp.read_text() == digest:
            return False
        for folder in cache_folders(files):
            for cached in [*folder.glob("*.nbi"), *folder.glob("*.nbc")]:
                cached.unlink(missing_ok=True)
        for mark in marks_folder().glob("*"):  # the warm-up marks of the caches just deleted
            mark.unlink(missing_ok=True)
        install_prebuilt(root, files, digest, cache_folder)
        stamp_current(root, digest)
        return True
    except OSError:  # a read-only install: numba caches elsewhere, keyed by files replaced together
        return False
