"""Atomic writes: a file appears under its final name only once it is complete.

Every writer of a whole file goes through ``atomic_path``; the run's per-unit outputs
use ``UnitContext.atomic`` instead, which defers the rename to the unit's commit.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a private temporary path beside ``path``; it becomes ``path`` only if the
    block completes (a failure removes it). Concurrent writers never share a temporary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_npy_atomic(path: str | os.PathLike, array) -> None:
    """Write a numpy array as ``.npy`` (no pickles) atomically."""
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def write_json(path: Path, value) -> None:
    """Write ``value`` as JSON (sorted keys, so equal values give equal bytes) and fsync."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: str | os.PathLike, value) -> None:
    with atomic_path(path) as tmp:
        write_json(tmp, value)
