"""Partitioned record files: the only way dedup's phases hand data to each other.

Why: clustering must not need the corpus in memory. Every producer (a unit's map, a
partition's reduce, a round of connected components) writes *one* file holding its
records grouped by destination partition, with a header of offsets; every consumer reads
just its partition's slice from each producer's file. Memory is one partition's worth.

Layout: magic ``PREPPART`` (8 bytes), version, number of partitions ``P`` and a free
``count`` field (int64 each), then ``P + 1`` int64 record offsets, then the records (a
numpy structured dtype known to both sides), partition after partition.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pipeline.util.atomic import temp_path

_MAGIC = b"PREPPART"
_VERSION = 1
_HEADER = 8 + 3 * 8


def write(path: Path, records: np.ndarray, partition: np.ndarray, partitions: int, count: int = 0) -> None:
    """Write ``records`` grouped by ``partition`` (stable: order within a partition is kept)."""
    order = np.argsort(partition, kind="stable")
    sizes = np.bincount(partition, minlength=partitions) if len(partition) else np.zeros(partitions, np.int64)
    offsets = np.zeros(partitions + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    with open(path, "wb") as f:
        f.write(_MAGIC)
        np.array([_VERSION, partitions, count], np.int64).tofile(f)
        offsets.tofile(f)
        np.ascontiguousarray(records[order]).tofile(f)


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
            f.write(_MAGIC)
            np.array([_VERSION, self.partitions, count], np.int64).tofile(f)
            offsets.tofile(f)
            for p in range(self.partitions):
                if self.spills[p] is not None:
                    with open(self.spills[p], "rb") as s:
                        while block := s.read(16 << 20):
                            f.write(block)
                    os.unlink(self.spills[p])
                for c in self.chunks[p]:
                    np.ascontiguousarray(c).tofile(f)
        self.chunks = [[] for _ in range(self.partitions)]


def header(path: Path) -> tuple[int, int, np.ndarray]:
    """(partitions, count, offsets) of a partitioned file."""
    with open(path, "rb") as f:
        head = f.read(_HEADER)
        if head[:8] != _MAGIC:
            raise ValueError(f"{path} is not a partitioned record file")
        version, partitions, count = np.frombuffer(head[8:], np.int64)
        if version != _VERSION:
            raise ValueError(f"{path}: unknown version {version}")
        offsets = np.fromfile(f, np.int64, count=int(partitions) + 1)
    return int(partitions), int(count), offsets


def read(path: Path, partition: int, dtype: np.dtype) -> np.ndarray:
    """The records of one partition."""
    partitions, _, offsets = header(path)
    if not 0 <= partition < partitions:
        raise ValueError(f"{path} has {partitions} partitions, asked for {partition}")
    dtype = np.dtype(dtype)
    start = _HEADER + (partitions + 1) * 8 + int(offsets[partition]) * dtype.itemsize
    return np.fromfile(path, dtype, count=int(offsets[partition + 1] - offsets[partition]), offset=start)


def publish(tmp: Path, final: Path) -> None:
    """Atomic rename for files written outside a unit (reduce, finalize)."""
    os.replace(tmp, final)


def temp_for(final: Path) -> Path:
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return temp_path(final)
