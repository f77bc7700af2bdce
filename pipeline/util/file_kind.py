"""Whether a path is a regular file, asked before it is opened.

Opening a FIFO for reading blocks until something writes to it (no timeout, and a
blocked ``open`` is past the reach of SIGTERM's handler), and a device such as
``/dev/zero`` never ends. So every file prep reads back (a run's records and Parquet
files, a token shard's ``.idx``, ``.bin`` and sidecar) is asked this first, from ``stat``,
which opens nothing.
"""

from __future__ import annotations

import errno
import os
import stat

# What a path that is not a regular file is, in an error's words (``stat``'s file types).
KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """The words for a ``stat`` mode that is no regular file."""
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


class NotARegularFile(OSError):
    """A path that exists but is no file to read; an ``OSError``, so that whatever names an
    unreadable file names this one too, its ``strerror`` saying what it is."""


def refuse_special(path: str | os.PathLike) -> None:
    """Raise ``NotARegularFile`` unless ``path`` is a regular file (or missing, or not ours
    to stat: the open that follows says so in its own words)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(errno.EINVAL, f"{kind_of(mode)}, not a regular file", os.fspath(path))
