"""Partitioned record files: how global stages' phases (dedup, paragraph_dedup) hand data
to each other.

Why: clustering must not need the corpus in memory. Every producer (a unit's map, a
partition's reduce, a round of connected components) writes *one* file holding its
records grouped by destination partition, with a header of offsets; every consumer reads
just its partition's slice from each producer's file. Memory is one partition's worth.

Layout: magic ``PREPPART`` (8 bytes), version, number of partitions ``P`` and a free
``count`` field (int64 each), then ``P + 1`` int64 record offsets, then the records (a
numpy structured dtype known to both sides), partition after partition. Rows of variable
length (strings, lists) travel as *blobs*: records of one byte, each partition one opaque
byte string the two sides agree on (``write_blobs``; ``read`` with ``np.uint8`` gives it
back), so slices work unchanged.

A *slice* is one partition of such a file on its own: the same layout, the other
partitions empty, under a hidden name beside the file (``slice_path``). When the file
lives on an object store, a task that reads one partition fetches the header and that
partition's byte range into a slice (``pipeline.engine.slices``) rather than the whole
file; ``read`` and ``header`` use the slice where the file itself is absent.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import numpy as np

from pipeline.util.atomic import temp_path

_MAGIC = b"PREPPART"
_VERSION = 1
_HEADER = 8 + 3 * 8


def _write_header(f, count: int, offsets: np.ndarray) -> None:
    """Magic, version, partitions (one fewer than ``offsets``), ``count``, then ``offsets``."""
    f.write(_MAGIC)
    np.array([_VERSION, len(offsets) - 1, count], np.int64).tofile(f)
    np.asarray(offsets, np.int64).tofile(f)


def write(path: Path, records: np.ndarray, partition: np.ndarray, partitions: int, count: int = 0) -> None:
    """Write ``records`` grouped by ``partition`` (stable: order within a partition is kept)."""
    order = np.argsort(partition, kind="stable")
    sizes = np.bincount(partition, minlength=partitions) if len(partition) else np.zeros(partitions, np.int64)
    offsets = np.zeros(partitions + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    with open(path, "wb") as f:
        _write_header(f, count, offsets)
        np.ascontiguousarray(records[order]).tofile(f)


def write_blobs(path: Path, blobs: list[bytes], count: int = 0) -> None:
    """Write one byte string per partition (``b""`` for an empty one) as a file of one-byte records."""
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    with open(path, "wb") as f:
        _write_header(f, count, offsets)
        for blob in blobs:
            f.write(blob)


class Writer:
    """Accumulates records batch by batch, spilling to per-partition side files past ``limit``
    bytes so that one huge input never holds all its records in memory; ``close`` writes
    the final file."""

    def __init__(self, path: Path, dtype: np.dtype, partitions: int, limit: int = 256 << 20):
        self.path, self.dtype, self.partitions, self.limit = Path(path), np.dtype(dtype), partitions, limit
        self.chunks: list[list[np.ndarray]] = [[] for _ in range(partitions)]
        self.buffered = 0
        self.spills: list[Path | None] = [None] * partitions

    def add(self, records: np.ndarray, partition: np.ndarray) -> None:
        order = np.argsort(partition, kind="stable")
        records, partition = records[order], partition[order]
        bounds = np.searchsorted(partition, np.arange(self.partitions + 1))
        for p in range(self.partitions):
            if bounds[p + 1] > bounds[p]:
                self.chunks[p].append(records[bounds[p] : bounds[p + 1]])
        self.buffered += records.nbytes
        if self.buffered > self.limit:
            self._spill()

    def _spill(self) -> None:
        for p, chunks in enumerate(self.chunks):
            if not chunks:
                continue
            first = self.spills[p] is None
            if first:  # a temporary by the common convention: a killed run's is cleaned up
                self.spills[p] = temp_path(self.path.with_name(f"{self.path.name}.spill{p}"))
            with open(self.spills[p], "wb" if first else "ab") as f:
                for c in chunks:
                    c.tofile(f)
            chunks.clear()
        self.buffered = 0

    def close(self, count: int = 0) -> None:
        sizes = np.zeros(self.partitions, np.int64)
        for p in range(self.partitions):
            spilled = os.path.getsize(self.spills[p]) // self.dtype.itemsize if self.spills[p] else 0
            sizes[p] = spilled + sum(len(c) for c in self.chunks[p])
        offsets = np.zeros(self.partitions + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        with open(self.path, "wb") as f:
            _write_header(f, count, offsets)
            for p in range(self.partitions):
                if self.spills[p] is not None:
                    with open(self.spills[p], "rb") as s:
                        while block := s.read(16 << 20):
                            f.write(block)
                    os.unlink(self.spills[p])
                for c in self.chunks[p]:
                    np.ascontiguousarray(c).tofile(f)
        self.chunks = [[] for _ in range(self.partitions)]


def _fixed(head: bytes, name: object) -> tuple[int, int]:
    """(partitions, count) from the fixed part of a header, checked."""
    if len(head) < _HEADER or head[:8] != _MAGIC:
        raise ValueError(f"{name} is not a partitioned record file")
    version, partitions, count = np.frombuffer(head[8:_HEADER], np.int64)
    if version != _VERSION:
        raise ValueError(f"{name}: unknown version {version}")
    if partitions < 0:
        raise ValueError(f"{name}: {partitions} partitions")
    return int(partitions), int(count)


def parse_header(head: bytes, name: object = "") -> tuple[int, int, np.ndarray]:
    """(partitions, count, offsets) from the first bytes of a partitioned file (at least
    ``header_size`` of them; ``name`` is for the error)."""
    partitions, count = _fixed(head, name)
    if len(head) < header_size(partitions):
        raise ValueError(f"{name}: header cut short")
    return partitions, count, np.frombuffer(head[_HEADER : header_size(partitions)], np.int64)


def header_size(partitions: int) -> int:
    """Bytes before the first record."""
    return _HEADER + (partitions + 1) * 8


def partitions_in(head: bytes, name: object = "") -> int:
    """How many partitions the file starting with ``head`` has (``_HEADER`` bytes suffice)."""
    return _fixed(head, name)[0]


def record_size(offsets: np.ndarray, file_size: int) -> int:
    """Bytes per record of a file of ``file_size`` bytes (0 when it holds none)."""
    records = int(offsets[-1])
    return (file_size - header_size(len(offsets) - 1)) // records if records else 0


def byte_range(offsets: np.ndarray, partition: int, itemsize: int) -> tuple[int, int]:
    """Where partition ``partition``'s records lie in the file: (start, end) in bytes."""
    if not 0 <= partition < len(offsets) - 1:
        raise ValueError(f"asked for partition {partition} of a file of {len(offsets) - 1}")
    base = header_size(len(offsets) - 1)
    return base + int(offsets[partition]) * itemsize, base + int(offsets[partition + 1]) * itemsize


def header(path: Path) -> tuple[int, int, np.ndarray]:
    """(partitions, count, offsets) of a partitioned file (or of any slice of it)."""
    path = _present(Path(path))
    with open(path, "rb") as f:
        head = f.read(_HEADER)
        partitions, _ = _fixed(head, path)
        return parse_header(head + f.read(header_size(partitions) - _HEADER), path)


def read(path: Path, partition: int, dtype: np.dtype) -> np.ndarray:
    """The records of one partition (from the file, or from its slice when only that is here)."""
    return read_range(path, range(partition, partition + 1), dtype)


def read_range(path: Path, partitions: range, dtype: np.dtype) -> np.ndarray:
    """The records of consecutive partitions: one read where the whole file is here (a
    finalize task over a range of several partitions), else from each one's slice."""
    path = Path(path)
    if path.exists():
        return _records(path, partitions, np.dtype(dtype))
    parts = [_records(slice_path(path, p), range(p, p + 1), np.dtype(dtype)) for p in partitions]
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def _records(path: Path, partitions: range, dtype: np.dtype) -> np.ndarray:
    _, _, offsets = header(path)
    try:
        start = byte_range(offsets, partitions.start, dtype.itemsize)[0]
        end = byte_range(offsets, partitions.stop - 1, dtype.itemsize)[1]
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return np.fromfile(path, dtype, count=(end - start) // dtype.itemsize, offset=start)


def slice_path(path: Path, partition: int) -> Path:
    """Where partition ``partition`` of ``path`` lives on its own (a hidden name beside it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.p{partition:05d}")


def sliced_name(name: str) -> str | None:
    """The file a slice's name belongs to (None for any other name)."""
    match = re.fullmatch(r"\.(.+)\.p\d{5}", name)
    return match.group(1) if match else None


def write_slice(path: Path, head: bytes, partition: int, records: bytes) -> None:
    """Write partition ``partition`` of the file whose header is ``head`` on its own, with
    the same partitions and count, as ``path`` (a temporary the caller renames)."""
    partitions, count, offsets = parse_header(head)
    start, end = byte_range(offsets, partition, 1)
    size = end - start
    own = np.zeros(partitions + 1, np.int64)
    own[partition + 1 :] = size
    with open(path, "wb") as f:
        _write_header(f, count, own)
        f.write(records)


def _present(path: Path) -> Path:
    """``path``, or where it is absent, any slice of it."""
    if path.exists():
        return path
    return next(iter(sorted(path.parent.glob(f".{glob.escape(path.name)}.p[0-9]*"))), path)


def publish(tmp: Path, final: Path) -> None:
    """Atomic rename for files written outside a unit (reduce, finalize)."""
    os.replace(tmp, final)


def temp_for(final: Path) -> Path:
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return temp_path(final)
