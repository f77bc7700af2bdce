"""Glob patterns for input paths, local and remote, that always terminate.

``glob.glob(..., recursive=True)`` follows every directory symlink under ``**``: two links
that point at each other (or one that points at an ancestor) make it walk forever. The
local walk here visits each real directory once (by device and inode), so a loop or a
link into an ancestor is entered at most once, and it stops with an error past
``MAX_WALK_ENTRIES`` entries. Matches are sorted, so the same inputs come in the same
order on every run; callers deduplicate them by real path.

One pattern language serves both: ``*`` and ``?`` within a name, ``[...]`` a character
class, ``**`` any number of folders. As in the shell, ``*`` does not match a name that
starts with a dot unless the pattern's part starts with one.
"""

from __future__ import annotations

import glob
import os
import re
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
    if "**" not in pattern:
        # Without ``**`` the walk is as deep as the pattern: no loop is possible.
        return sorted(Path(m) for m in glob.glob(pattern))
    parts = pattern.split("/")
    fixed = next(i for i, part in enumerate(parts) if has_magic(part))
    root = "/".join(parts[:fixed]) or "/"
    regex = re.compile(glob_regex(pattern))
    hidden_ok = any(part.startswith(".") for part in parts[fixed:])
    return sorted(Path(p) for p in _walk(root, hidden_ok) if regex.fullmatch(p))


def _walk(root: str, hidden_ok: bool) -> list[str]:
    """Every path below ``root`` (root itself included), each real folder entered once."""
    if not os.path.isdir(root):
        return []
    seen: set[tuple[int, int]] = set()
    found = [root.rstrip("/") or "/"]
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
        except OSError:
            continue  # unreadable: as glob does, it holds no matches
        for child in children:
            entries += 1
            if entries > MAX_WALK_ENTRIES:
                raise GlobError(f"{root}: the walk met more than {MAX_WALK_ENTRIES:,} entries; narrow the pattern")
            if child.name.startswith(".") and not hidden_ok:
                continue
            path = os.path.join(folder, child.name)
            found.append(path)
            try:
                if child.is_dir():  # follows a link, which the seen-set check bounds
                    stack.append(path)
            except OSError:
                pass
    return found
