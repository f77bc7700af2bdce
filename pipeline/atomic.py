"""Atomic writes: a file appears under its final name only once it is complete."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json(path: Path, value) -> None:
    """Write ``value`` as JSON (sorted keys, so equal values give equal bytes) and fsync."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: Path, value) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write_json(tmp, value)
    os.replace(tmp, path)
