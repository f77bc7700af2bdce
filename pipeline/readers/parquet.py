"""Parquet files, streamed a batch of rows at a time (locations are 0-based row numbers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.batches import read_batches
from pipeline.readers.common import Chunk, InputSpec


def read_parquet(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    return read_batches(path, spec, _parquet_batches)


def _parquet_batches(path: Path, spec: InputSpec) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Batches of at most ``spec.batch_rows`` rows; progress bytes are pro rata by rows.

    Row groups are read one at a time, so that no batch spans two: a damaged row group
    then costs only itself and what follows, not the end of the one before it."""
    size = path.stat().st_size
    with pq.ParquetFile(path) as parquet:
        rows = max(parquet.metadata.num_rows, 1)
        groups = range(parquet.num_row_groups) if spec.span is None else range(*spec.span[:2])
        for group in groups:
            for batch in parquet.iter_batches(batch_size=spec.batch_rows, row_groups=[group]):
                yield batch, size * batch.num_rows // rows
