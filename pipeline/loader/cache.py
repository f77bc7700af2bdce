"""Loader index cache: numpy arrays kept beside the data, written atomically, read memory-mapped.

Why a cache: the loader's indexes (where each document's tokens live, the stream order of
documents and its cumulative sizes) cost seconds to build on a billion-token corpus and
would otherwise be rebuilt in every rank and every worker. Built once, saved as ``.npy``
and opened with ``mmap_mode="r"``, they open in milliseconds and every process on the
machine shares the same page-cache pages instead of holding a private copy. Data on a
read-only disk gets its cache in the machine's temporary folder (``temporary_cache_dir``).

A file's name carries a fingerprint of everything it depends on (shard files, seed,
epochs, ...) and nothing it does not (world size, batch size, workers), so any change to
the inputs selects a new file. Writers race safely: each writes a private temporary name
and ``os.replace``s it, and all writers produce the same bytes.

A file is still checked against the shards before it is used (``fits``): one left by
another version of prep, copied in with the data, or damaged in place held an index past
the end, and the loader served wrong samples or died on an IndexError deep in a worker.
One that does not fit is built again, with a one-line warning.
"""

from __future__ import annotations

import hashlib
import os
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from pipeline.formats.scratch import user_loader_cache
from pipeline.util.atomic import save_npy_atomic


def fingerprint(*parts: object) -> str:
    """A short stable hash of ``parts`` (their ``repr``), used in cache file names."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\x00")
    return h.hexdigest()[:20]


def temporary_cache_dir(name: str) -> Path | None:
    """``name`` in this user's own loader cache in the machine's temporary folder, for
    data on a read-only disk; ``None`` when there is no such folder to trust.

    Only a folder this user owns and nobody else may write is used: anyone can write to
    the temporary folder, and arrays planted there could send the kernels' reads anywhere.
    """
    folder = user_loader_cache()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return folder / name


def _load(path: Path, length: int | None) -> np.ndarray | None:
    """The 1-D integer array saved at ``path`` (of ``length`` items, if given), else None."""
    try:
        try:
            # A plain ndarray view of the map: indexing an np.memmap subclass costs
            # microseconds of Python per call, paid many times per batch.
            array = np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
        except ValueError:  # numpy cannot map an empty array; it is tiny anyway
            array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if array.ndim != 1 or array.dtype.kind not in "iu" or (length is not None and len(array) != length):
        return None
    return array


# Items checked at a time (``chunks``): a check holds a few temporaries of this size, not
# of the whole array (an order over many epochs is hundreds of millions of items).
CHUNK = 1 << 20


def chunks(n: int) -> Iterator[slice]:
    """``0..n`` in slices of ``CHUNK`` items, for checks that stream over a mapped array."""
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def outside(array: np.ndarray, low: int, high: int) -> int | None:
    """The first index whose value is outside ``low..high`` (inclusive), else None."""
    for part in chunks(len(array)):
        values = array[part]
        bad = np.flatnonzero((values < low) | (values > high))
        if len(bad):
            return part.start + int(bad[0])
    return None


def cached_array(
    cache_dir: Path | None,
    name: str,
    build: Callable[[], np.ndarray],
    length: int | None = None,
    fits: Callable[[np.ndarray], str | None] | None = None,
) -> np.ndarray:
    """Return the array cached as ``cache_dir/name``, building and saving it when missing.

    A cached file that does not read back as a 1-D integer array of ``length`` items (cut
    short by a crash before the page cache reached the disk, say) is built and saved
    again: it used to stop every loader on that data with numpy's "EOF: reading array
    header", naming no file, until someone found and deleted it. So is one that reads but
    that ``fits`` finds wrong (it says why, in words; None: it fits the shards), with a
    warning naming the file.

    Without a cache folder, or with one that cannot be written, the array is built in
    memory, again in each process that opens it (each rank, each spawned worker).
    """
    if cache_dir is None:
        return build()
    path = cache_dir / name
    cached = _load(path, length) if path.exists() else None
    if cached is not None and fits is not None and (why := fits(cached)) is not None:
        warnings.warn(f"loader cache {path} does not fit the shards ({why}): building it again", stacklevel=2)
        cached = None
    if cached is not None:
        return cached
    array = build()
    try:
        save_npy_atomic(path, array)
    except OSError:
        return array
    saved = _load(path, length)
    return array if saved is None else saved
