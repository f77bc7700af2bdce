"""numba's cache after an edit: a kernel compiled with a since-changed helper is not loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pipeline.compile.numba_cache import STAMP, clear_stale_caches

HELPER = "from numba import njit\n\n@njit(cache=True)\ndef step(x):\n    return x + {}\n"
CALLER = "from numba import njit\nfrom helper import step\n\n@njit(cache=True)\ndef kernel(x):\n    return step(x)\n"


def _tree(root: Path) -> Path:
    """A root with a kernel folder holding a numba caller and the helper compiled into it."""
    package = root / "pipeline" / "kernels"
    package.mkdir(parents=True)
    (package / "helper.py").write_text(HELPER.format(1))
    (package / "caller.py").write_text(CALLER)
    (package / "plain.py").write_text("VALUE = 1\n")
    (root / "stages").mkdir()
    return package


def _kernel(package: Path, guard_root: Path | None, cache_dir: Path | None = None) -> int:
    """``kernel(1)`` in a fresh process, after ``clear_stale_caches(guard_root)`` if given,
    with numba's caches in ``cache_dir`` if given (``NUMBA_CACHE_DIR``), else beside the sources."""
    guard = (
        "from pathlib import Path; from pipeline.compile.numba_cache import clear_stale_caches; "
        f"clear_stale_caches(Path({str(guard_root)!r}))"
    )
    code = textwrap.dedent(f"""
        import sys
        {guard if guard_root else ""}
        sys.path.insert(0, {str(package)!r})
        import caller
        print(caller.kernel(1))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout.strip())


def test_an_edited_helper_is_not_served_from_the_callers_cache(tmp_path):
    package = _tree(tmp_path)
    assert _kernel(package, None) == 2
    (package / "helper.py").write_text(HELPER.format(10))
    assert _kernel(package, None) == 2  # numba alone: the caller's cache still holds the old helper
    assert _kernel(package, Path(tmp_path)) == 11  # the guard saw the change and cleared it


def test_each_place_numba_caches_in_is_checked_on_its_own(tmp_path):
    """An edit seen with NUMBA_CACHE_DIR set clears that folder's caches, not those beside
    the sources: those are checked again when the variable is unset."""
    package = _tree(tmp_path)
    assert _kernel(package, tmp_path) == 2  # compiled beside the sources
    (package / "helper.py").write_text(HELPER.format(10))
    assert _kernel(package, tmp_path, tmp_path / "user-cache") == 11
    assert _kernel(package, tmp_path) == 11  # not the caller compiled with the old helper


def test_caches_are_cleared_only_when_a_source_changes(tmp_path):
    package = _tree(tmp_path)
    cache = package / "__pycache__"
    cache.mkdir()

    def cached() -> list[str]:
        return sorted(p.name for p in cache.iterdir() if p.suffix in (".nbi", ".nbc"))

    (cache / "caller.kernel-4.py311.nbi").write_bytes(b"index")
    (cache / "caller.kernel-4.py311.1.nbc").write_bytes(b"code")
    assert clear_stale_caches(tmp_path) and cached() == [] and (tmp_path / "pipeline" / "__pycache__" / STAMP).is_file()
    (cache / "caller.kernel-4.py311.nbi").write_bytes(b"index")
    assert not clear_stale_caches(tmp_path) and cached() == ["caller.kernel-4.py311.nbi"]
    (package / "plain.py").write_text("VALUE = 2\n")  # no numba in it, but a kernel may read VALUE
    assert clear_stale_caches(tmp_path) and cached() == []
    (cache / "caller.kernel-4.py311.nbi").write_bytes(b"index")
    assert not clear_stale_caches(tmp_path) and cached() == ["caller.kernel-4.py311.nbi"]
    (package / "helper.py").write_text(HELPER.format(3))
    assert clear_stale_caches(tmp_path) and cached() == []


def test_a_read_only_tree_is_left_alone(tmp_path):
    package = _tree(tmp_path)
    package.chmod(0o555)
    try:
        if os.access(package, os.W_OK):  # root ignores permissions: nothing to check then
            return
        assert clear_stale_caches(tmp_path) is False
    finally:
        package.chmod(0o755)
