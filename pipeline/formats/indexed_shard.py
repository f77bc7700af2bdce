"""Opening a token shard, checked: ``IndexedShard``, through which every reader comes.

``IndexedShard`` checks a shard before any token is read, cheaply (the ``.idx`` arrays,
the ``.bin``'s size, the sidecar), and raises ``ShardError`` naming the file: a damaged
shard is refused, never read as garbage or out of bounds.

Apart from ``token_shards`` (the format, a shard's file names, its sidecar, the writer)
because validation is a job of its own and most of the reading code: every check, and
the message it gives, is here in one place.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.token_shards import (
    CODE_DTYPES,
    HEADER_BYTES,
    MAGIC,
    VERSION,
    ShardError,
    read_sidecar,
    shard_paths,
    sidecar_path,
)
from pipeline.util.file_kind import kind_of, refuse_special


def _read_header(idx_path: Path) -> tuple[np.dtype, int, int]:
    """Dtype, sequence count and document-index length of a ``.idx``.

    The counts are checked against the file's size before any array is mapped, so that
    garbage counts (huge, or a truncated file) fail here instead of reading past the end.
    """
    try:
        found = idx_path.stat()
    except FileNotFoundError:
        raise ShardError(f"{idx_path}: missing (the shard's index)") from None
    if not stat.S_ISREG(found.st_mode):  # a FIFO would block the open below for good
        raise ShardError(f"{idx_path}: {kind_of(found.st_mode)}, not a regular file (the shard's index)")
    size = found.st_size
    if size < HEADER_BYTES:
        raise ShardError(f"{idx_path}: truncated index ({size} bytes; the header alone takes {HEADER_BYTES})")
    with open(idx_path, "rb") as f:
        header = f.read(HEADER_BYTES)
    if header[:9] != MAGIC:
        raise ShardError(f"{idx_path}: not a Megatron indexed dataset index (bad magic {header[:9]!r})")
    (version,) = struct.unpack("<Q", header[9:17])
    if version != VERSION:
        raise ShardError(f"{idx_path}: unsupported index version {version} (expected {VERSION})")
    (code,) = struct.unpack("<B", header[17:18])
    if code not in CODE_DTYPES:
        raise ShardError(f"{idx_path}: unknown dtype code {code} (known: {sorted(CODE_DTYPES)})")
    sequences, entries = struct.unpack("<QQ", header[18:34])
    expected = HEADER_BYTES + 12 * sequences + 8 * entries  # Python ints: no overflow
    if size != expected:
        raise ShardError(
            f"{idx_path}: index is {size} bytes, but its header counts {sequences} sequences and {entries} "
            f"document-index entries ({expected} bytes): truncated or corrupt"
        )
    return CODE_DTYPES[code], sequences, entries


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _itemsize_hint(dtype: np.dtype, expected: np.ndarray, pointers: np.ndarray) -> str:
    """When the pointers are right for another token size, the dtype code is what is wrong."""
    for size in (1, 2, 4, 8):
        if size != dtype.itemsize and np.array_equal(expected // dtype.itemsize * size, pointers):
            return f" (they fit {size}-byte tokens: the dtype code, {dtype}, is wrong)"
    return ""


def _check_index(
    idx_path: str | os.PathLike, dtype: np.dtype, sizes: np.ndarray, pointers: np.ndarray, document_index: np.ndarray
) -> None:
    """Refuse an index whose arrays could send a reader to the wrong tokens.

    Lengths must be non-negative, each pointer the running byte offset of the lengths
    before it (so sequences lie back to back, exactly as the ``.bin`` size check assumes),
    and the document index must run from 0 to the sequence count without going back.
    Vectorised: a few passes over arrays of a few bytes per document.
    """
    if len(sizes) and sizes.min() < 0:
        i = _first(sizes < 0)
        raise ShardError(f"{idx_path}: sequence {i} has a negative length ({sizes[i]})")
    expected = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], dtype=np.int64, out=expected[1:])
    expected *= dtype.itemsize
    if not np.array_equal(pointers, expected):
        i = _first(pointers != expected)
        raise ShardError(
            f"{idx_path}: pointer of sequence {i} is {pointers[i]}, not the running byte offset {expected[i]} "
            f"of the lengths before it{_itemsize_hint(dtype, expected, pointers)}"
        )
    if len(document_index) == 0:
        raise ShardError(f"{idx_path}: empty document index (it needs at least its first entry, 0)")
    if document_index[0] != 0 or document_index[-1] != len(sizes):
        raise ShardError(
            f"{idx_path}: document index runs from {document_index[0]} to {document_index[-1]}, "
            f"not from 0 to the sequence count {len(sizes)}"
        )
    steps = np.diff(document_index)
    if len(steps) and steps.min() < 0:
        i = _first(steps < 0)
        raise ShardError(
            f"{idx_path}: document index is not monotone (entry {i + 1} = {document_index[i + 1]} "
            f"after {document_index[i]})"
        )


def _check_sidecar(idx_path: Path, meta: dict[str, Any] | None, **found: Any) -> None:
    """Refuse an index that disagrees with its sidecar on any of ``found`` (dtype, counts).

    A dtype code that disagrees with the sidecar (uint16 read over int32 data, say)
    yields tokens in range but wrong; only the sidecar can tell.
    """
    for key, value in found.items():
        if meta is not None and key in meta and meta[key] != value:
            raise ShardError(
                f"{idx_path}: {key} is {value!r} in the index but {meta[key]!r} in the sidecar "
                f"{sidecar_path(str(idx_path)[: -len('.idx')]).name}"
            )


def verify_bin(prefix: str | os.PathLike, meta: dict[str, Any] | None) -> None:
    """Hash the whole ``.bin`` and compare with the sidecar's sha256 (reads every byte).

    Catches what the size checks cannot: bytes changed in place. A shard without a
    sidecar checksum cannot be verified, and saying so beats passing it silently.
    """
    from pipeline.kernels.hashing import file_sha256

    bin_path = shard_paths(prefix)[0]
    expected = (meta or {}).get("bin_sha256")
    if not expected:
        problem = "has no bin_sha256" if meta else "missing"
        raise ShardError(f"{sidecar_path(prefix)}: {problem}, so {bin_path.name} has no checksum to verify against")
    actual = file_sha256(bin_path)
    if actual != expected:
        raise ShardError(f"{bin_path}: sha256 {actual} differs from {expected} in its sidecar: the tokens are corrupt")


CHANGED = " (it changed after the shard was opened)"


class ShardBin:
    """A shard's ``.bin``, mapped as a token array, refused whenever its size is not the index's.

    Why a size check before every read, not only at open: reading a mapped file past its
    current end raises SIGBUS, which kills the process (a loader worker, or the training
    script itself) with no exception and no message. A ``.bin`` cut short after it was
    mapped is therefore refused by ``check`` as a ``ShardError`` naming the file, before
    the read that would touch the missing pages. The size comes from the mapping's own
    descriptor (``mmap.size``: one fstat, about a microsecond), so it is the size of the
    mapped file even after a rename put another file at the path (the old one stays
    whole and is read on; a process mapping it later refuses the new one by ``identity``).
    A ``.bin`` that grew is refused too: it no longer is the file its index describes.

    What the check cannot close: a truncation by another process landing during one
    read's copy (microseconds). In a loader worker that SIGBUS is named all the same (the
    loader checks the shards when a worker dies); in the main process it is not. Reading
    with ``pread`` instead of the map would close it, at a system call per document piece:
    on real documents about 20 us more CPU per batch of 8 x 2048, whose work takes 34 us
    (this check: under 1 us), and several times that on short documents.
    """

    def __init__(
        self,
        bin_path: str | os.PathLike,
        dtype: np.dtype,
        tokens: int,
        index_name: str,
        identity: tuple[int, int, int] | None = None,
    ):
        """Open and map ``bin_path``; with ``identity`` (another ``ShardBin``'s, of this path),
        refuse a file that is not the one that was opened then (replaced, or written since)."""
        self.path = Path(bin_path)
        self.index_name = index_name
        self.dtype = np.dtype(dtype)
        self.count = tokens
        self._map: mmap.mmap | None = None
        try:
            refuse_special(self.path)  # a FIFO would block the open for good
            with open(self.path, "rb") as f:
                found = os.fstat(f.fileno())
                self._refuse_size(found.st_size, "" if identity is None else CHANGED)
                self.identity = (found.st_dev, found.st_ino, found.st_mtime_ns)
                if identity is not None and identity != self.identity:
                    raise ShardError(f"{self.path}: replaced or written since the shard was opened")
                if tokens:  # an empty file cannot be mapped, and nothing is read from it
                    self._map = mmap.mmap(f.fileno(), tokens * self.dtype.itemsize, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise ShardError(f"{self.path}: missing, though its index {index_name} lists {tokens} tokens") from None
        except OSError as error:
            raise ShardError(f"{self.path}: cannot read it ({error.strerror or error})") from None
        self.tokens = np.frombuffer(self._map, dtype=self.dtype) if self._map is not None else np.zeros(0, self.dtype)

    def check(self) -> None:
        """Refuse the mapped file unless it still holds exactly the index's tokens."""
        if self._map is not None:
            self._refuse_size(self._map.size(), CHANGED)

    def _refuse_size(self, size: int, when: str) -> None:
        expected = self.count * self.dtype.itemsize
        if size != expected:
            raise ShardError(
                f"{self.path}: {size} bytes, but its index {self.index_name} lists {self.count} {self.dtype} tokens "
                f"({expected} bytes): truncated, or not this index's .bin{when}"
            )


class IndexedShard:
    """Opens a shard written in Megatron's layout, checked, memory-mapped (no torch needed).

    This is the one place that opens shards: the loader, merge, inspect and the mixture
    code all come through here, so a shard is checked the same way wherever it is read.
    Opening checks, cheaply (the ``.idx`` arrays, the ``.bin``'s size by fstat, the
    sidecar): the header and the file size agree, lengths are non-negative, pointers are
    the running offsets, the document index runs 0..sequences, the ``.bin`` holds
    exactly the listed tokens, and the sidecar (when there is one) agrees on dtype and
    counts. ``verify=True`` also hashes the ``.bin`` against the sidecar's sha256. Any
    failure is a ``ShardError`` naming the file, raised before a token is read.

    ``sizes``, ``pointers`` and ``document_index`` are views into the mapped ``.idx``;
    ``tokens`` is the whole ``.bin`` as one array of ``dtype`` and ``bin`` its ``ShardBin``
    (``bin.check()`` before reading it later: see there); ``meta`` the sidecar or None.
    """

    def __init__(self, prefix: str | os.PathLike, verify: bool = False):
        self.prefix = str(prefix)
        bin_path, idx_path = shard_paths(prefix)
        self.dtype, sequences, entries = _read_header(idx_path)
        self.meta = read_sidecar(self.prefix)
        # The dtype first: a wrong code also mis-scales every pointer, but this says why.
        _check_sidecar(idx_path, self.meta, dtype=self.dtype.name)
        self._idx = np.memmap(idx_path, dtype=np.uint8, mode="r")
        offset = HEADER_BYTES
        self.sizes = np.frombuffer(self._idx, dtype="<i4", count=sequences, offset=offset)
        offset += 4 * sequences
        self.pointers = np.frombuffer(self._idx, dtype="<i8", count=sequences, offset=offset)
        offset += 8 * sequences
        self.document_index = np.frombuffer(self._idx, dtype="<i8", count=entries, offset=offset)
        _check_index(idx_path, self.dtype, self.sizes, self.pointers, self.document_index)
        _check_sidecar(idx_path, self.meta, documents=self.num_documents, tokens=self.num_tokens)
        self.bin = ShardBin(bin_path, self.dtype, self.num_tokens, idx_path.name)
        self.tokens = self.bin.tokens
        if verify:
            verify_bin(self.prefix, self.meta)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        self.bin.check()
        start = int(self.pointers[i]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.sizes[i])]

    @property
    def num_tokens(self) -> int:
        return int(self.sizes.sum(dtype=np.int64))

    @property
    def num_documents(self) -> int:
        return len(self.document_index) - 1
