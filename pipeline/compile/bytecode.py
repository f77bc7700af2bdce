"""prep's own modules compiled to bytecode once per install: a warm-up step every run
declares beside the kernels' (``warm_steps.py``).

Why: Python keeps a module's bytecode (``__pycache__/*.pyc``) when it first imports it,
unless told not to: ``PYTHONDONTWRITEBYTECODE``, which container images and CI machines
commonly set. Then every process parses every module it imports from source, every
time. A run's first unit waits for two processes that import most of prep side by side
(the command, and the server its workers fork from), and parsing prep's sources was
about 0.2 s of each: the e2e benchmark's first unit started 0.17 s later without the
bytecode (median of six alternating runs). pip compiles bytecode when it installs a
package, but not for an editable install (README's), whose modules stay in the clone.

So the warm-up, which already fills numba's cache in these folders' ``__pycache__``,
writes the bytecode of prep's packages there as well, as pip would have. Files whose
bytecode is current are left alone; a folder that cannot be written is skipped quietly
(the modules then load from source, as before). The step carries a stamp of the sources'
names, sizes and times, so an edit gives the step another warm-up mark and it runs again.
"""

from __future__ import annotations

import compileall
import hashlib
from pathlib import Path

from pipeline.compile.numba_cache import ROOT
from pipeline.compile.warm_marks import files_key
from pipeline.compile.warm_steps import EVERY_RUN, warms

PACKAGES = ("pipeline", "stages")


def sources_stamp(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> str:
    """A digest of every module's path, size and modification time under ``packages``."""
    paths = [path for package in packages for path in sorted((root / package).rglob("*.py"))]
    return hashlib.sha256(files_key(paths)).hexdigest()


@warms(EVERY_RUN, seconds=0.3, uses=lambda options, source, input_bytes: (sources_stamp(),))
def compile_bytecode(stamp: str, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> None:
    """Writes the missing or outdated bytecode of ``packages`` (atomically, as ``py_compile``
    writes). ``stamp``: the sources' ``sources_stamp``, for the warm-up mark only."""
    for package in packages:
        compileall.compile_dir(root / package, quiet=2)
