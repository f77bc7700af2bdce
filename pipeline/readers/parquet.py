"""Parquet files, streamed a batch of rows at a time (locations are 0-based row numbers).

Each row group is a ``Block``: the footer says how many rows it holds, and it decodes on
its own, so a damaged row group costs only its own rows (see ``batches``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.batches import Block, read_batches
from pipeline.readers.common import Chunk, InputSpec


def read_parquet(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    return read_batches(path, spec, _open_parquet)


@contextmanager
def _open_parquet(path: Path, spec: InputSpec) -> Iterator[tuple[pa.Schema, Iterator[Block]]]:
    size = path.stat().st_size
    with pq.ParquetFile(path) as parquet:
        yield parquet.schema_arrow, _row_groups(parquet, size, spec)


def _row_groups(parquet: pq.ParquetFile, size: int, spec: InputSpec) -> Iterator[Block]:
    """The row groups, each read in batches of at most ``spec.batch_rows`` rows; progress
    bytes are pro rata by rows."""
    meta = parquet.metadata
    total = max(meta.num_rows, 1)
    for group in range(meta.num_row_groups) if spec.span is None else range(*spec.span[:2]):
        rows = meta.row_group(group).num_rows
        batches = parquet.iter_batches(batch_size=spec.batch_rows, row_groups=[group])
        yield Block(f"row group {group}", rows, size * rows // total, batches)
