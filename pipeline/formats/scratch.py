"""A machine's own folders, outside any run folder: the scratch folder, where a remote run
keeps its mirror and the copies of remote inputs being read, and the loader's caches.

``PREP_SCRATCH`` names the scratch folder (default: ``prep-scratch`` in the system temp
folder); the engine reads it and hands it here. A loader's cache sits beside its shards,
or for data on a read-only disk in this user's own folder of the temp folder.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

LOADER_CACHE = ".loader_cache"  # a loader's index cache, beside the shards it indexes


class Scratch:
    """The scratch folder of this machine: ``root`` if given, else the temp folder's."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else Path(tempfile.gettempdir()) / "prep-scratch"

    @property
    def inputs(self) -> Path:
        """Copies of remote input files while a unit reads them."""
        return self.root / "inputs"

    def mirror(self, name: str) -> Path:
        """A remote run's mirror on this machine (``name``: of the run and its fingerprint)."""
        return self.root / "mirrors" / name


def user_loader_cache() -> Path:
    """This user's loader cache folder in the temp folder, for data on a read-only disk."""
    return Path(tempfile.gettempdir()) / f"prep-loader-cache-{os.getuid()}"
