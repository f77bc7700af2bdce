"""A Hugging Face ``datasets`` ``save_to_disk`` folder: which files it holds, in order.

A ``Dataset`` folder holds ``state.json`` (its Arrow files in the dataset's order, under
``_data_files``) beside the ``data-*.arrow`` files; a ``DatasetDict`` folder holds
``dataset_dict.json`` (its split names) and one such folder per split. The readers read
each Arrow file (``readers/arrow_files.py``); the engine's input listing expands a folder
into them here.
"""

from __future__ import annotations

import json
from pathlib import Path

STATE = "state.json"
DATASET_DICT = "dataset_dict.json"


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and ((path / STATE).exists() or (path / DATASET_DICT).exists())


def expand_hf_folder(path: Path, splits: bool = True) -> list[Path]:
    """The Arrow files of a ``save_to_disk`` folder, in the dataset's own order.

    A ``state.json`` or ``dataset_dict.json`` that cannot be read (damaged, not what
    ``datasets`` writes) must not stop the run: the folder's own files are taken
    instead, in name order, which is the dataset's order (``data-00000-of-00003.arrow``,
    ...; splits by folder name). Each file is then read, or quarantined, on its own.
    Names in those files are data: one that is not a plain file name (``../x``, ``/etc``)
    counts as damage, so no path outside the folder is ever read. Splits hold no splits
    (``splits``), so a split that links back to its parent cannot recurse.
    """
    try:
        if splits and (path / DATASET_DICT).exists():
            names = _plain_names(json.loads((path / DATASET_DICT).read_text())["splits"])
            return [f for split in names for f in expand_hf_folder(path / split, splits=False)]
        state = json.loads((path / STATE).read_text())
        return [path / name for name in _plain_names([entry["filename"] for entry in state["_data_files"]])]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested too deep
        return _arrow_files_by_name(path, splits)


def _plain_names(names: list) -> list[str]:
    if not all(isinstance(n, str) and n not in ("", ".", "..") and "/" not in n and "\\" not in n for n in names):
        raise ValueError("a name that is not a plain file name")
    return names


def _arrow_files_by_name(path: Path, splits: bool) -> list[Path]:
    """The Arrow files of a folder and (``splits``) of its split folders, in name order."""
    files = sorted(path.glob("*.arrow"))
    if splits:
        for split in sorted(p for p in path.iterdir() if is_hf_folder(p)):
            files.extend(expand_hf_folder(split, splits=False))
    return files
