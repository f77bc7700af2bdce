"""The kernels prep ships compiled: built from these very sources, copied where numba looks
on a fresh install, loaded there without compiling, and never where they do not fit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from pipeline.compile.numba_cache import ROOT, clear_stale_caches, kernel_sources, sources_digest
from pipeline.compile.portable_cpu import LEVEL, LEVEL_FLAGS, use_portable_cpu
from pipeline.compile.prebuilt import BUNDLE, bundle_key, read_key
from pipeline.compile.prebuilt_build import pack

HELPER = "from numba import njit\n\n@njit(cache=True)\ndef step(x):\n    return x + {}\n"
CALLER = "from numba import njit\nfrom helper import step\n\n@njit(cache=True)\ndef kernel(x):\n    return step(x)\n"


def test_the_shipped_kernels_were_built_from_these_sources():
    key = read_key(ROOT / BUNDLE)
    assert key is not None, f"{BUNDLE} is missing or damaged: python -m pipeline.compile.prebuilt_build"
    assert key["sources"] == sources_digest(kernel_sources()), (
        "a kernel folder changed since the kernels were built: run python -m pipeline.compile.prebuilt_build"
    )


def _tree(root: Path, addend: int = 1) -> Path:
    """A root with one kernel folder: a caller and the helper compiled into it."""
    package = root / "pipeline" / "kernels"
    package.mkdir(parents=True)
    (package / "helper.py").write_text(HELPER.format(addend))
    (package / "caller.py").write_text(CALLER)
    (root / "stages").mkdir()
    return package


def _call(package: Path) -> tuple[int, int]:
    """``kernel(1)`` in a fresh process, and how many of its signatures came from the cache
    (numba's, in ``NUMBA_CACHE_DIR`` where that is set, else beside the sources)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(package)!r})
        import caller
        print(caller.kernel(1), sum(caller.kernel.stats.cache_hits.values()))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    value, hits = done.stdout.split()
    return int(value), int(hits)


def _built(tmp_path: Path) -> Path:
    """A bundle compiled from a tree at one path, as the project builds it."""
    built = tmp_path / "built"
    package = _tree(built)
    assert _call(package) == (2, 0)  # compiled, into the tree's __pycache__
    key = bundle_key(sources_digest(kernel_sources(built), built))
    pack(built / BUNDLE, key, {"pipeline/kernels": package / "__pycache__"})
    return built / BUNDLE


@pytest.mark.parametrize("user_cache", [False, True])
def test_a_fresh_tree_loads_the_shipped_kernels_without_compiling(tmp_path, monkeypatch, user_cache):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    bundle = _built(tmp_path)
    fresh = tmp_path / "fresh"  # another path, as a user's clone: no cache, no stamp
    package = _tree(fresh)
    (fresh / BUNDLE).parent.mkdir(parents=True)
    shutil.copy(bundle, fresh / BUNDLE)
    if user_cache:  # the user keeps numba's caches in a folder of their own
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "user-cache"))
    assert clear_stale_caches(fresh)
    cached = (tmp_path / "user-cache").rglob("*.nb?") if user_cache else (package / "__pycache__").glob("*.nb?")
    assert sorted(path.suffix for path in cached) == [".nbc", ".nbc", ".nbi", ".nbi"]
    assert _call(package) == (2, 1)  # loaded, not compiled


def test_shipped_kernels_of_other_sources_are_not_copied(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    bundle = _built(tmp_path)
    edited = tmp_path / "edited"
    package = _tree(edited, addend=10)  # the helper changed: the caller's compiled code holds the old one
    (edited / BUNDLE).parent.mkdir(parents=True)
    shutil.copy(bundle, edited / BUNDLE)
    assert clear_stale_caches(edited)
    assert not (package / "__pycache__").exists() or not list((package / "__pycache__").glob("*.nb?"))
    assert _call(package) == (11, 0)


def test_a_damaged_or_hostile_bundle_copies_nothing_and_breaks_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    bundle = _built(tmp_path)
    fresh = tmp_path / "fresh"
    package = _tree(fresh)
    (fresh / BUNDLE).parent.mkdir(parents=True)
    (fresh / BUNDLE).write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])  # truncated
    assert clear_stale_caches(fresh)
    assert _call(package) == (2, 0)

    hostile = tmp_path / "hostile"
    package = _tree(hostile)
    key = bundle_key(sources_digest(kernel_sources(hostile), hostile))
    pack(hostile / BUNDLE, key, {})
    with zipfile.ZipFile(hostile / BUNDLE, "a") as archive:  # entries aimed outside the kernel folders
        archive.writestr("../../escaped.nbi", b"x")
        archive.writestr("/tmp/absolute.nbi", b"x")
        archive.writestr("pipeline/escaped.nbc", b"x")
    assert clear_stale_caches(hostile)
    assert (
        not (tmp_path / "escaped.nbi").exists() and not (hostile / "pipeline" / "__pycache__" / "escaped.nbc").exists()
    )
    assert _call(package) == (2, 0)


def test_numba_compiles_for_the_portable_level_only_where_the_cpu_has_it(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # as before numba's first import
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        monkeypatch.delenv(name, raising=False)

    cpuinfo.write_text("processor\t: 0\nflags\t\t: " + " ".join(sorted(LEVEL_FLAGS - {"avx2"})) + "\n")
    assert not use_portable_cpu(cpuinfo) and "NUMBA_CPU_NAME" not in os.environ
    assert not use_portable_cpu(tmp_path / "absent") and "NUMBA_CPU_NAME" not in os.environ

    cpuinfo.write_text("processor\t: 0\nflags\t\t: " + " ".join(sorted(LEVEL_FLAGS | {"avx512f"})) + "\n")
    assert use_portable_cpu(cpuinfo)
    assert (os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"]) == (LEVEL, "")

    monkeypatch.setenv("NUMBA_CPU_NAME", "skylake")  # the user's choice stands
    monkeypatch.delenv("NUMBA_CPU_FEATURES")
    assert not use_portable_cpu(cpuinfo) and os.environ["NUMBA_CPU_NAME"] == "skylake"
