"""Atomic writes: a file appears under its final name only once it is complete.

Every writer of a whole file goes through ``atomic_path``; the run's per-unit outputs
use ``UnitContext.atomic`` instead, which defers the rename to the unit's commit.

Every temporary file, whoever writes it, is named ``.<final name>.<tag>.tmp`` (a dot,
so listings and uploads pass it over; ``.tmp`` last, so ``is_temporary`` and a run's
start-up cleanup recognise what a killed run left behind). Outside a run's folder, the
tag starts with the writer (``writer_tag``: ``<pid>@<host>``, so
``.<final name>.<pid>@<host>[.<more>].tmp``), so that the next writer of the same file
can tell what a killed one left (``remove_dead_temporaries``) from what a live one is
writing, even where the folder is shared by several machines (a cluster's file system).
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A file written in place gets 0o666 less the umask; mkstemp's private 0o600 must not
# outlive the rename (a team's shared run folder would be readable by its writer alone).
# Read once, at import, before any thread could race the two umask calls.
FILE_MODE = 0o666 & ~_current_umask()


# A temporary of another machine, or of an older prep that did not name its machine, is
# removed once it has not been written to for this long (see ``remove_dead_temporaries``).
FOREIGN_STALE_SECONDS = 30 * 24 * 3600

# The host in a temporary's name: a file name's letters (no dot, which parts the name),
# at most this long, a longer one cut and told apart by a hash of the whole. Short: a
# temporary's name is its final name's and this tag's, and a name has 255 bytes at most.
HOST_CHARS = 16


@cache
def _host() -> str:
    """This machine's name as a temporary's name carries it."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
    if len(name) <= HOST_CHARS:
        return name
    return f"{name[: HOST_CHARS - 9]}-{zlib.crc32(name.encode()):08x}"


def writer_tag() -> str:
    """``<pid>@<host>``: who writes a temporary. The pid alone named a process on any of
    the machines that share a folder, and the writer's own machine is the only one that
    can tell whether that process still runs."""
    return f"{os.getpid()}@{_host()}"


def temp_path(final: str | os.PathLike) -> Path:
    """The temporary name of ``final`` for this process (the pid and host keep two
    processes that write the same file, such as a retried task and its first try, on
    one machine or two, apart)."""
    final = Path(final)
    return final.with_name(f".{final.name}.{writer_tag()}.tmp")


def is_temporary(name: str) -> bool:
    """Whether a file name is a temporary of this convention."""
    return name.startswith(".") and name.endswith(".tmp")


def remove_dead_temporaries(finals: list[Path]) -> None:
    """Remove the temporaries of ``finals`` whose writer is dead (a process killed, even
    by SIGKILL, before its rename): whole models and token files that nothing else
    removes.

    Only this machine can tell whether one of its processes runs: a temporary of this
    host whose pid runs no process is removed at once. One of another host (a folder
    shared by a cluster's nodes), or of an older prep, whose name gives a pid but no
    host, may be a live writer's: it is left until it has not been written to for
    ``FOREIGN_STALE_SECONDS``. A live writer keeps its temporary younger than that (a
    merge writes as it goes; a model trainer holds an empty one while it reads and
    trains, hours at most), and a month is far beyond any skew of the machines' clocks,
    so only a dead node's leftovers go, late rather than never. One that names no pid
    is kept."""
    here = _host()
    for final in finals:
        for path in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
            pid, _, host = path.name[len(final.name) + 2 : -len(".tmp")].split(".")[0].partition("@")
            if not pid.isdigit():
                continue
            if host == here:
                dead = not _running(int(pid))
            else:
                dead = _untouched_for(path, FOREIGN_STALE_SECONDS)
            if dead:
                path.unlink(missing_ok=True)


def _untouched_for(path: Path, seconds: float) -> bool:
    """Whether ``path`` was last written more than ``seconds`` ago."""
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:  # gone since it was listed
        return False


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a private temporary path beside ``path``; it becomes ``path`` only if the
    block completes (a failure removes it). Concurrent writers never share a temporary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{writer_tag()}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_npy(path: str | os.PathLike, array) -> None:
    """Write a numpy array as ``.npy`` (no pickles) to ``path`` as it is."""
    import numpy as np

    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def save_npy_atomic(path: str | os.PathLike, array) -> None:
    """Write a numpy array as ``.npy`` (no pickles) atomically."""
    with atomic_path(path) as tmp:
        save_npy(tmp, array)


def write_json(path: Path, value) -> None:
    """Write ``value`` as JSON (sorted keys, so equal values give equal bytes).

    Not fsynced, as no file of a run is: a killed run's files are all in the kernel's
    hands, whole or under a temporary name, and resume relies on nothing more. Syncing
    the JSON alone (markers, costs) promised what the data files beside them did not
    keep after a power cut, and cost 1 ms per file: a fifth of dedup's finalize on the
    bundled sample, whose tasks each write two."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def write_json_atomic(path: str | os.PathLike, value) -> None:
    with atomic_path(path) as tmp:
        write_json(tmp, value)
