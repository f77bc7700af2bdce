"""Glob patterns for input paths, local and remote, that always terminate.

``glob.glob(..., recursive=True)`` follows every directory symlink under ``**``: two links
that point at each other (or one that points at an ancestor) make it walk forever. The
local walk here visits each real directory once (by device and inode), so a loop or a
link into an ancestor is entered at most once, and it stops with an error past
``MAX_WALK_ENTRIES`` entries. Matches are sorted, so the same inputs come in the same
order on every run; callers deduplicate them by real path. Unlike glob, the walk also
says which folders it could not list (``glob_reporting``), so no input vanishes unseen.

One pattern language serves both: ``*`` and ``?`` within a name, ``[...]`` a character
class, ``**`` any number of folders. As in the shell, ``*`` does not match a name that
starts with a dot unless the pattern's part starts with one.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from pathlib import Path

# A walk that meets more entries than this is stopped: a pattern this broad is a mistake
# (or a file system loop that device/inode checks cannot see, such as some FUSE mounts).
MAX_WALK_ENTRIES = 2_000_000


class GlobError(ValueError):
    """A pattern that cannot be expanded; the message says why."""


def glob_regex(pattern: str) -> str:
    """A regular expression for a glob pattern over '/'-separated paths."""
    tokens = re.findall(r"\*\*/|\*\*|\*|\?|\[[^\]]*\]|[^*?\[]+|\[", pattern)
    special = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return "".join(special.get(t) or (t if t.startswith("[") and len(t) > 1 else re.escape(t)) for t in tokens)


def has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


def glob_local(pattern: str) -> list[Path]:
    """The paths matching ``pattern`` (absolute), sorted; files and folders alike."""
    return glob_reporting(pattern)[0]


def glob_reporting(pattern: str) -> tuple[list[Path], list[Path]]:
    """``glob_local``'s matches, and the folders the pattern reaches that could not be
    listed (permission denied): any of their files could have matched, so a caller that
    must account for every input reports them rather than pass over them as glob does."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if has_magic(part)), len(parts))
    root = walk_root(pattern)
    if "**" not in pattern:
        # Without ``**`` the walk is as deep as the pattern: no loop is possible.
        unlisted = [Path(root)] if fixed < len(parts) and not _listable(root) else []
        return _sorted(glob.glob(pattern)), unlisted
    regex = re.compile(glob_regex(pattern))
    hidden_ok = any(part.startswith(".") for part in parts[fixed:])
    found, unlisted = _walk(root, hidden_ok)
    return _sorted(p for p in found if regex.fullmatch(p)), _sorted(unlisted)


def _sorted(paths: Iterable[str]) -> list[Path]:
    """The paths as Paths, in Paths' order (name by name): ``Path.__lt__``, in Python, was
    a third of listing 10,000 files. The text split at each ``/`` is the list of names a
    Path compares, for paths that start alike, as one pattern's matches do (``parts`` would
    keep a tuple on each Path the config holds, 150 bytes a file)."""
    return [Path(path) for path in sorted(paths, key=lambda path: path.split("/"))]


def walk_root(pattern: str) -> str:
    """The folder a pattern's wildcards start from: its parts before the first one. A
    relative pattern that starts with one (``**/*.jsonl``, from a config in the current
    folder) starts from the current folder: it was "/", so the walk read the whole disk."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if has_magic(part)), len(parts))
    if fixed == 0:
        return "."
    return "/".join(parts[:fixed]) or "/"


def _listable(folder: str) -> bool:
    """False for a folder whose entries may not be read; True for anything else (a
    missing folder holds no matches, and that is the caller's "matches no file")."""
    return not os.path.isdir(folder) or os.access(folder, os.R_OK | os.X_OK)


def _walk(root: str, hidden_ok: bool) -> tuple[list[str], list[str]]:
    """Every path below ``root`` (root itself included), each real folder entered once;
    and the folders that could not be listed."""
    if not os.path.isdir(root):
        return [], []
    seen: set[tuple[int, int]] = set()
    found = [root.rstrip("/") or "/"]
    unlisted = []
    stack = [root]
    entries = 0
    while stack:
        folder = stack.pop()
        try:
            info = os.stat(folder)
        except OSError:
            continue  # a dangling link or a folder removed meanwhile
        if (info.st_dev, info.st_ino) in seen:
            continue  # a loop, or a second link to a folder already walked
        seen.add((info.st_dev, info.st_ino))
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            unlisted.append(folder)
            continue
        except OSError:
            continue  # removed meanwhile
        for child in children:
            entries += 1
            if entries > MAX_WALK_ENTRIES:
                raise GlobError(f"{root}: the walk met more than {MAX_WALK_ENTRIES:,} entries; narrow the pattern")
            if child.name.startswith(".") and not hidden_ok:
                continue
            path = child.name if folder == "." else os.path.join(folder, child.name)  # as glob writes it
            found.append(path)
            try:
                if child.is_dir():  # follows a link, which the seen-set check bounds
                    stack.append(path)
            except OSError:
                pass
    return found, unlisted
