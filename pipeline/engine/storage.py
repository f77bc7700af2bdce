"""Where a run's files live: a local folder, or an object store (``s3://...``, any URI
that ``pyarrow.fs.FileSystem.from_uri`` opens).

Every stage and writer works on local files: memory maps, numba over buffers, renames.
A run whose ``--out`` is remote therefore works in a *mirror*: a folder on each machine
with the run's layout, which a task fills with the files it reads (``pull``) and from
which it uploads the files it wrote (``push``). The object store is the truth; a mirror
is a cache named after the run's fingerprint, so a changed run never reads a stale one.

Why this is as safe as local renames: an object appears on S3 whole or not at all, so an
uploaded file is complete; a unit's files go up before its completion marker, so a marker
in the store still means "all of this unit is there". Before deciding what is left to do,
the runner makes the mirror's markers equal to the store's (``sync``): a marker written
locally by a task killed before its upload does not count.

Inputs on an object store (``paths = ["s3://bucket/c4/*.json.gz"]``) are listed with the
same file system and copied to scratch space while a unit reads them; so are inputs on the
Hugging Face Hub (``hf://datasets/...``), through huggingface_hub's file system (``hub``).

Credentials and endpoints come from the usual AWS settings (``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL`` for MinIO or other S3-compatible stores, ...). ``PREP_SCRATCH``
names the local folder for mirrors and input copies (default: the system temp folder;
its layout: ``formats/scratch.py``).
Every request to the store is retried on throttling, server errors and dropped
connections, within a bound, and counted (``retry``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs

from pipeline.engine import hub
from pipeline.engine.retry import (
    RangedFile,
    download,
    files_under,
    retrying,
    sdk_untried,
    uninterrupted,
    upload,
)
from pipeline.formats.layout import file_in
from pipeline.formats.scratch import Scratch
from pipeline.util.atomic import atomic_path
from pipeline.util.globbing import glob_regex, has_magic

TRANSFER_THREADS = 8


def is_remote(path: str | os.PathLike) -> bool:
    """True for a URI with a scheme (``s3://``, ``gs://``, ...), False for a local path."""
    text = str(path)
    return _SCHEME.match(text) is not None and not text.startswith("file://")


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # asked of every input several times: compiled once


@cache
def _filesystem(scheme_and_bucket: str) -> pafs.FileSystem:
    return sdk_untried(pafs.FileSystem.from_uri(scheme_and_bucket)[0])


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system of ``uri`` (one per scheme and bucket per process) and the path in it."""
    if hub.is_hub(uri):  # inputs only: the functions below send hf:// paths to ``hub``
        raise OSError("the Hugging Face Hub is read-only here (hf:// paths are inputs): write to a local folder or S3")
    scheme, rest = uri.split("://", 1)
    try:
        return _filesystem(f"{scheme}://{rest.split('/', 1)[0]}"), rest.rstrip("/")
    except (OSError, ValueError) as error:
        raise OSError(f"cannot open {uri}: {error}") from None


def scratch() -> Scratch:
    return Scratch(os.environ.get("PREP_SCRATCH"))


# -- inputs -------------------------------------------------------------------------------


def glob_remote(pattern: str) -> list[str]:
    """The files matching a glob URI (``*``, ``?``, ``[...]`` within a folder name, ``**``
    across folders), sorted. A URI without wildcards matches itself if it is a file.
    Nothing matched in a bucket that does not exist, or a match that cannot be read, is
    refused naming it (``_readable``)."""
    if hub.is_hub(pattern):
        return hub.glob(pattern)
    scheme = pattern.split("://", 1)[0]
    fs, path = filesystem(pattern)
    parts = path.split("/")
    fixed = next((i for i, part in enumerate(parts) if has_magic(part)), len(parts))
    if fixed == len(parts):
        found = [path] if retrying(fs, path, fs.get_file_info, path).type == pafs.FileType.File else []
    else:
        regex = re.compile(glob_regex(path))
        found = sorted(i.path for i in files_under(fs, "/".join(parts[:fixed])) if regex.fullmatch(i.path))
    if not found and retrying(fs, parts[0], fs.get_file_info, parts[0]).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{scheme}://{parts[0]}: no such bucket")
    return [_readable(f"{scheme}://{key}") for key in found]


def _readable(uri: str) -> str:
    """``uri``, a key a listing gave, refused where pyarrow cannot read it: a key with an
    empty folder name (``a//b``) is listed, but every request for it fails on "Empty path
    component", which ended the run naming neither the key nor a way out."""
    if "//" in uri.split("://", 1)[1]:
        raise OSError(
            f"{uri}: prep cannot read a key with an empty folder name ('//'); copy it to a key "
            "without one, or leave it out of the pattern"
        )
    return uri


@contextmanager
def local_input(path: str | Path) -> Iterator[Path]:
    """A local file with the contents of ``path``: itself, or a scratch copy of a remote
    file (removed afterwards, so scratch holds only the inputs being read)."""
    if not is_remote(path):
        yield Path(path)
        return
    folder = scratch().inputs
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="input.", suffix="." + PurePosixPath(str(path)).name, dir=folder)
    os.close(fd)
    try:
        if hub.is_hub(path):
            hub.download(str(path), Path(tmp))
        else:
            download(*filesystem(str(path)), Path(tmp))
        yield Path(tmp)
    finally:
        os.unlink(tmp)


# -- a run's output folder ---------------------------------------------------------------


@dataclass(frozen=True)
class RunStore:
    """A run's output folder, as tasks see it (picklable: it travels with Ray tasks).

    ``root`` is the local folder every writer uses. For a local run it is the folder
    itself and every other method does nothing; for a remote run it is this machine's
    mirror, and ``pull``/``push``/``sync`` move files between it and the store.
    """

    uri: str
    run_key: str = ""  # names the mirror: the run's fingerprint

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    @property
    def root(self) -> Path:
        if not self.remote:
            return Path(self.uri)
        name = hashlib.sha256(f"{self.uri}\0{self.run_key}".encode()).hexdigest()[:20]
        return scratch().mirror(name)

    def _key(self, rel: str) -> str:
        fs, base = filesystem(self.uri)
        return file_in(base, rel)

    def _rel(self, local: Path) -> str:
        return local.relative_to(self.root).as_posix()

    def pull(self, rel: str, keep: Callable[[str], bool] | None = None) -> None:
        """Download the files under ``rel`` (a file or folder; ``keep`` filters their paths
        relative to the root) that the mirror lacks or holds at another size."""
        if not self.remote:
            return
        fs, _ = filesystem(self.uri)
        wanted = []
        for rel_path, info in self.listing(rel, keep or (lambda _: True)):
            local = self.root / rel_path
            if not (local.is_file() and local.stat().st_size == info.size):
                wanted.append((info.path, local))

        def fetch(item: tuple[str, Path]) -> None:
            key, local = item
            with atomic_path(local) as tmp:
                download(fs, key, tmp)

        in_threads(fetch, wanted)

    def listing(self, rel: str, keep: Callable[[str], bool]) -> list[tuple[str, pafs.FileInfo]]:
        """The stored files under ``rel`` that ``keep`` takes: (path relative to the root, info)."""
        fs, _ = filesystem(self.uri)
        start = len(self._key("")) + 1
        return [(i.path[start:], i) for i in files_under(fs, self._key(rel)) if keep(i.path[start:])]

    def sizes(self, rel: str, keep: Callable[[str], bool]) -> dict[str, int]:
        """The size of each stored file under ``rel`` that ``keep`` takes, by its path
        relative to the root (as ``listing`` names them)."""
        if self.remote:
            return {path: info.size for path, info in self.listing(rel, keep)}
        folder = self.root / rel
        files = [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
        return {path: p.stat().st_size for p in files if keep(path := self._rel(p))}

    def open_ranged(self, info: pafs.FileInfo) -> RangedFile:
        """A stored file ``listing`` gave, open for ranged reads (``read_at``: a request each)."""
        return RangedFile(filesystem(self.uri)[0], info)

    def push(self, files: Iterable[Path], marker: Path | None = None) -> None:
        """Upload ``files`` (then ``marker``, last), and drop the uploaded files from the
        mirror: a machine's disk keeps only what its tasks read, not what they wrote."""
        if not self.remote:
            return
        fs, _ = filesystem(self.uri)
        files = list(files)
        in_threads(lambda local: upload(local, fs, self._key(self._rel(local))), files)
        for local in files:
            local.unlink()
        if marker is not None:
            upload(marker, fs, self._key(self._rel(marker)))

    def push_tree(self, rel: str) -> None:
        """Upload the files under ``rel`` that the store lacks or holds at another size
        (for global stages, which write their files themselves)."""
        if not self.remote:
            return
        fs, _ = filesystem(self.uri)
        stored = {i.path: i.size for i in files_under(fs, self._key(rel))}
        folder = self.root / rel
        local_files = (
            [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")] if folder.exists() else []
        )
        todo = [p for p in local_files if stored.get(self._key(self._rel(p))) != p.stat().st_size]
        in_threads(lambda local: upload(local, fs, self._key(self._rel(local))), todo)

    def sync(self, rel: str) -> None:
        """Make the mirror's ``rel`` folder hold exactly the store's files there."""
        if not self.remote:
            return
        fs, _ = filesystem(self.uri)
        stored = {i.path for i in files_under(fs, self._key(rel))}
        folder = self.root / rel
        for local in folder.rglob("*") if folder.exists() else []:
            if local.is_file() and self._key(self._rel(local)) not in stored:
                local.unlink()
        self.pull(rel)

    def names(self) -> list[str]:
        """The entries at the top of the output folder (empty if it does not exist)."""
        if not self.remote:
            root = self.root
            return sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        fs, base = filesystem(self.uri)
        infos = retrying(fs, base, fs.get_file_info, pafs.FileSelector(base, allow_not_found=True))
        return sorted(PurePosixPath(i.path).name for i in infos)

    def exists(self, rel: str) -> bool:
        """Whether the folder holds a file (or folder) at ``rel``."""
        if not self.remote:
            return (self.root / rel).exists()
        fs, _ = filesystem(self.uri)
        return retrying(fs, self._key(rel), fs.get_file_info, self._key(rel)).type != pafs.FileType.NotFound

    def read_text(self, rel: str) -> str | None:
        if not self.remote:
            path = self.root / rel
            return path.read_text() if path.is_file() else None
        fs, _ = filesystem(self.uri)
        return retrying(fs, self._key(rel), _read_text, fs, self._key(rel))

    def write_text(self, rel: str, text: str) -> None:
        """Write a small file of the run whole: atomically here, as one object remotely."""
        if not self.remote:
            with atomic_path(self.root / rel) as tmp:
                tmp.write_text(text)
            return
        fs, _ = filesystem(self.uri)
        uninterrupted(retrying, fs, self._key(rel), _write_text, fs, self._key(rel), text)

    def remove(self, rel: str) -> None:
        """Delete a file or folder of the run (in the store and in this mirror)."""
        self.forget(rel)
        if self.remote:
            fs, _ = filesystem(self.uri)
            retrying(fs, self._key(rel), _delete, fs, self._key(rel))

    def forget(self, rel: str) -> None:
        """Delete a file or folder from this machine's mirror only (for a local run: the
        folder itself): what the store no longer holds, another machine's mirror may.
        Tasks on one machine share its mirror, so another may be deleting the same."""
        local = self.root / rel
        while local.is_dir():
            with contextlib.suppress(FileNotFoundError):  # a file the other deleter took first
                shutil.rmtree(local)
        local.unlink(missing_ok=True)

    def size(self, folders: Iterable[str]) -> int:
        """Bytes stored under ``folders``."""
        return sum(size for _, size, _ in self._files(folders))

    def fixed_size(self, folders: Iterable[str]) -> int:
        """Bytes under ``folders`` that a file holds however few documents it has: each
        Parquet file's footer (schema, statistics) and magic numbers, and each JSON sidecar.
        A sampled run writes the files the full run writes, so this part does not scale."""
        if not self.remote:
            return sum(_fixed_bytes(*file) for file in self._files(folders))
        fs, _ = filesystem(self.uri)
        return sum(retrying(fs, file[0], _fixed_bytes, *file) for file in self._files(folders))

    def _files(self, folders: Iterable[str]) -> list[tuple[str, int, Callable]]:
        """Each file under ``folders``: its path, its size and how to open it. Not those in
        a hidden folder: ``tokens/.loader_cache``, the index a DataLoader writes beside the
        shards it reads, is none of the run's (a source's folder name is never hidden)."""
        if not self.remote:
            return [
                (str(p), p.stat().st_size, partial(p.open, "rb"))
                for f in folders
                for p in (self.root / f).rglob("*")
                if p.is_file() and not _in_hidden_folder(p.relative_to(self.root / f).as_posix())
            ]
        fs, _ = filesystem(self.uri)
        return [
            (i.path, i.size, partial(fs.open_input_file, i.path))
            for f in folders
            for i in files_under(fs, self._key(f))
            if not _in_hidden_folder(i.path.removeprefix(self._key(f)).lstrip("/"))
        ]

    def drop_mirror(self) -> None:
        """Remove this machine's mirror (a remote run's local cache) once the run is done."""
        if self.remote:
            shutil.rmtree(self.root, ignore_errors=True)


def _in_hidden_folder(relative: str) -> bool:
    """Whether the file at ``relative`` (a POSIX path) lies in a folder whose name starts with a dot."""
    return any(part.startswith(".") for part in relative.split("/")[:-1])


def _fixed_bytes(name: str, size: int, open_file: Callable) -> int:
    """The part of a file of ``size`` bytes that does not grow with its documents (``fixed_size``)."""
    if name.endswith(".json"):
        return size
    if not name.endswith(".parquet") or size < 12:
        return 0
    with open_file() as f:  # a Parquet file ends with its footer's length and b"PAR1"
        f.seek(size - 8)
        footer = int.from_bytes(f.read(4), "little")
    return min(footer + 12, size)


def _read_text(fs: pafs.FileSystem, key: str) -> str | None:
    if fs.get_file_info(key).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(key, compression=None) as f:
        return f.read().decode()


def _write_text(fs: pafs.FileSystem, key: str, text: str) -> None:
    with fs.open_output_stream(key, compression=None, metadata={}) as sink:
        sink.write(text.encode())


def _delete(fs: pafs.FileSystem, key: str) -> None:
    """Delete a file or folder; a retry after a delete whose answer was lost finds nothing."""
    kind = fs.get_file_info(key).type
    if kind == pafs.FileType.Directory:
        fs.delete_dir(key)
    elif kind == pafs.FileType.File:
        fs.delete_file(key)


def in_threads(action: Callable, items: list, threads: int = TRANSFER_THREADS) -> None:
    """Run ``action`` over ``items`` on a few threads (transfers wait on the network).
    The first failure, or a Ctrl-C, ends it at once: the transfers not started are
    dropped, those under way finish whole on their threads unwaited (``uninterrupted``).
    Waiting for every queued one, each trying for up to PREP_STORE_RETRY_SECONDS, held
    a run whose store kept failing for minutes after its first error."""
    if len(items) <= 1:
        for item in items:
            action(item)
        return
    pool = ThreadPoolExecutor(min(threads, len(items)))
    try:
        for _ in pool.map(action, items):
            pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
