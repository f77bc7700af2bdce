"""What an input file is, before a unit reads it: whether it is a regular file at all
(``not_a_file``: a FIFO or a device would block or never end), its size and version
(``input_stat``), and its checksum (``input_sha256``), for local files and files on an
object store alike. Planning asks this of every input, so it asks the file system as
little as it can: a folder is resolved once (``RealPaths``), a regular file takes one stat.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pyarrow.fs as pafs

from pipeline.engine import hub
from pipeline.engine.retry import COPY_BLOCK, retrying
from pipeline.engine.storage import filesystem, is_remote
from pipeline.kernels.hashing import file_sha256
from pipeline.util.file_kind import kind_of


def not_a_file(path: str | Path) -> str | None:
    """Why a local input is no file to read (None: a regular file, or a remote one).

    Opening a FIFO blocks until someone writes to it, and a device such as ``/dev/zero``
    never ends: neither may ever be opened for reading. A folder or a dangling link fails
    on open with the OS's terse words. So the planner and each unit ask this first (from
    ``stat``, which opens nothing), and such an input is one ``unreadable-file`` row that
    says what it is. A link is named with its target, since the link is what the user sees."""
    if is_remote(path):
        return None
    path = Path(path)
    target = f"a link to {os.readlink(path)}, which is " if path.is_symlink() else ""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"a link to {os.readlink(path)}, which does not exist" if target else None  # gone: the reader says so
    except OSError as error:
        if error.errno == errno.ELOOP:  # links that lead to each other: resolving one raises, opening one fails
            return f"{target}part of a loop of links, not a file"
        return None  # not ours to stat (a folder above it is locked): the reader's open says why
    if stat.S_ISREG(mode):
        return None
    kind = kind_of(mode)
    if stat.S_ISDIR(mode) and not os.access(path, os.R_OK | os.X_OK):
        return f"{target}a folder prep may not list (permission denied), so none of its files are read"
    return f"{target}{kind}, not a regular file"


class RealPaths:
    """``realpath`` of the many local files of one listing, each at the cost of one
    ``lstat``: a regular file that is no link is its folder's real path and its name,
    and each folder is resolved once. Resolving each file on its own walked every folder
    of its path (at 20,000 files, four resolves a file were 3 s of a resume's planning).
    One per listing: a folder may be relinked between two runs in one process."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def regular(self, file: Path) -> str | None:
        """The real path of ``file`` if it is a regular file and no link; None for anything
        else (a link, a folder, a FIFO, a missing file), which the caller resolves itself."""
        found = self.regular_version(file)
        return None if found is None else found[0]

    def regular_version(self, file: Path) -> tuple[str, list[int]] | None:
        """``regular``, with the file's ``input_stat`` from the same ``lstat`` (a file that
        is no link is what ``stat`` would read)."""
        try:
            info = os.lstat(file)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        folder, name = os.path.split(os.fspath(file))
        if folder not in self._folders:  # the real folder's path and a "/": a Path's text, without building one
            self._folders[folder] = os.path.realpath(folder or ".").rstrip("/") + "/"
        return self._folders[folder] + name, _local_version(info)


def input_stat(path: str | Path) -> list[int | str]:
    """What tells one version of an input file from another without reading it; size first.

    Locally: size, modification time, change time and inode. ``touch -r`` or a copy
    that keeps times can fake the modification time, but the change time is set by the
    kernel on every write and a rewrite by rename brings a new inode. On an object
    store: size and the store's own modification time, which it sets on every upload.
    One request per remote file. On the Hub: size and content hash, from the listing.
    """
    if not is_remote(path):
        try:
            info = os.stat(path)
        except OSError:
            info = None
        if info is not None and stat.S_ISREG(info.st_mode):  # one call for what nearly every input is
            return _local_version(info)
        special = not_a_file(path)
        if special is not None:
            return [0, special]  # never read, so never hashed: what it is, is its version
        return [0]  # gone or unreadable: its reader quarantines it as unreadable-file
    if hub.is_hub(path):
        return hub.stat(str(path))
    fs, key = filesystem(str(path))
    info = retrying(fs, key, fs.get_file_info, key)
    if info.type == pafs.FileType.Directory:  # listed as a file: its key ends in "/", a folder's mark
        raise FileNotFoundError(
            f"{path}/: prep cannot read an object whose key ends in '/', which the store takes for a "
            "folder; copy it to a key without the '/', or leave it out of the pattern"
        )
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{path} does not exist")
    return [info.size, info.mtime_ns or 0]


def _local_version(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def input_sha256(path: str | Path) -> str:
    """sha256 of an input file's bytes, local or remote (streamed, never held whole)."""
    if not is_remote(path):
        return file_sha256(path)
    if hub.is_hub(path):
        return hub.sha256(str(path))
    fs, key = filesystem(str(path))
    return retrying(fs, key, _sha256, fs, key)


def _sha256(fs: pafs.FileSystem, key: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(key, compression=None) as source:
        while block := source.read(COPY_BLOCK):
            digest.update(block)
    return digest.hexdigest()
