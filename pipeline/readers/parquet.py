"""Parquet files, streamed a batch of rows at a time (locations are 0-based row numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.common import Chunk, InputSpec, to_documents
from pipeline.hashing import file_sha256


def read_parquet(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    size = path.stat().st_size
    parquet = pq.ParquetFile(path)
    rows = max(parquet.metadata.num_rows, 1)
    yield from iter_record_batches(parquet.iter_batches(batch_size=spec.batch_rows), spec, size, rows)
    yield Chunk(extra={"sha256": file_sha256(path), "bytes": size})


def iter_record_batches(batches, spec: InputSpec, size: int, rows: int) -> Iterator[Chunk]:
    """Documents from a stream of record batches; progress bytes are pro rata by rows."""
    row = 0
    for batch in batches:
        n = batch.num_rows
        lines = pa.array(np.arange(row, row + n, dtype=np.int64))
        docs, bad = to_documents(pa.Table.from_batches([batch]), lines, spec)
        yield Chunk(docs=docs, bad=bad, bytes_read=size * n // rows)
        row += n
