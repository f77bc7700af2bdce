"""An input while a unit reads it: the version the run planned, or a refusal.

A run records each input's version (``input_files.input_stat``) before it cuts the files in
pieces; every unit reads that version and no other (``planned_input``), or fails with
``InputChanged``. The rerun's side (a file that changed between two runs) is
``run_state.check_inputs``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pipeline.engine.input_files import input_stat
from pipeline.engine.storage import is_remote, local_input


class InputChanged(OSError):
    """An input that is not, or not throughout its read, the version the run planned (no
    errno: the message, which names the file and what changed, is all)."""


@contextmanager
def planned_input(path: str | Path, planned: Sequence[int | str], name: str) -> Iterator[Path]:
    """``local_input``, refused unless it holds the version of ``path`` the run planned
    (``planned``, from ``input_stat``); ``name`` names the file in the refusal.

    Why: a file rewritten while a unit reads it was read half old, half new (a 100 MB file
    cut to 30 MB and appended to gave half its documents, exit 0, and the new file's
    sha256 in the manifest), and the pieces of a file cut by ``split_bytes`` must all read
    the version whose line starts cut them. So the version is compared before the read
    and after it: equal both times, the read saw the planned bytes, since every write,
    truncation or rename of the file changes its change time or inode, and a replacement
    at the path its inode. A remote file is read from a copy, a snapshot: the source must
    be the planned version before and after the copy, and the copy its planned size.

    A change fails the unit (``InputChanged``), and the run with it, rather than reading
    the file again: a redo would read a version other than the one planned (whose
    pieces, cut at its line starts, and whose recorded version in the run's state no
    longer fit it), of a file that is likely still being written. Running the same
    command again plans from the file as it is then (or refuses, unless ``--force``, where
    pieces of the old version were kept or the file now cuts into other pieces)."""
    _require_version(path, planned, name, "before the run read it")
    with local_input(path) as local:
        if is_remote(path):
            _require_version(path, planned, name, "while the run copied it")
            _require_size(local, planned, name)
        yield local
    if not is_remote(path):
        _require_version(path, planned, name, "while the run read it")


def is_local_file(planned: Sequence[int | str]) -> bool:
    """Whether a version (``input_stat``) is a local regular file's: size, modification
    time, change time and inode."""
    return len(planned) == 4


def _require_version(path: str | Path, planned: Sequence[int | str], name: str, when: str) -> None:
    """Refused (``InputChanged``, saying ``when``) unless ``path`` is the planned version now."""
    try:
        now = input_stat(path)
    except FileNotFoundError:  # a remote file deleted (a local one's stat says so itself)
        now = [0]
    change = version_change(planned, now)
    if change is not None:
        raise changed(name, when, change)


def changed(name: str, when: str, change: str) -> InputChanged:
    """The refusal of input ``name``, which ``change`` (``version_change``) made ``when``."""
    return InputChanged(f"input {name} changed {when} ({change}): {_AGAIN}")


def _require_size(copy: Path, planned: Sequence[int | str], name: str) -> None:
    """A copy that ended short (or long) of the planned size, whatever the store says now."""
    size = copy.stat().st_size
    if size != planned[0]:
        copied = f"copied {size:,} of {planned[0]:,} bytes"
        raise InputChanged(f"input {name} changed while the run copied it ({copied}): {_AGAIN}")


_AGAIN = "nothing of it was kept; run the same command again once it is stable"

# What each field of ``input_stat`` is, by how many there are (local; remote; missing).
_VERSION_FIELDS = {
    4: ("size", "modification time", "change time", "inode"),
    2: ("size", "version on the store"),
}


def version_change(planned: Sequence[int | str], now: Sequence[int | str]) -> str | None:
    """What differs between two versions of a file (``input_stat``), in a few words; None
    when they are the same."""
    planned, now = list(planned), list(now)
    if planned == now:
        return None
    if len(now) == 1:
        return "it is gone or unreadable"
    if len(planned) == 1:
        return "it was missing when the run planned it"
    if planned[0] != now[0]:
        return f"size {planned[0]:,} -> {now[0]:,} bytes"
    names = _VERSION_FIELDS.get(len(now), ())
    differ = [name for name, a, b in zip(names, planned, now) if a != b]
    if "inode" in differ:
        return "replaced by another file of the same size"
    return f"rewritten with the same size ({', '.join(differ) or 'version'} changed)"
