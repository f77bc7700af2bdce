"""Parquet outputs written atomically: each file goes to a temporary name registered with
the unit's context and is renamed only when the whole unit commits."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.documents import COMPRESSION, LONG_COLUMNS
from pipeline.formats.layout import part_name
from pipeline.stage import UnitContext


class ParquetSink:
    """Writes batches to ``<stem>.parquet`` (and ``<stem>.<k>.parquet`` after a schema change).

    Inputs drift: a field that was all null in one block is a string in the next. A batch
    that cannot be cast to the open file's schema starts a new part file instead of failing.
    Nothing is written for a sink that received no rows.

    Encoding and zstd compression run on a background thread (Arrow releases the GIL
    there), overlapping the next block's decompression and parsing; a bounded queue keeps
    at most a couple of batches in flight, so memory stays bounded.
    """

    QUEUE_DEPTH = 2

    def __init__(self, unit: UnitContext, folder: Path, stem: str, schema: pa.Schema | None = None):
        self.unit, self.folder, self.stem = unit, folder, stem
        self.fixed_schema = schema
        self.writer: pq.ParquetWriter | None = None
        self.parts = 0
        self.rows = 0
        self._queue: queue.Queue = queue.Queue(maxsize=self.QUEUE_DEPTH)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def write(self, batch: pa.RecordBatch | None) -> None:
        if batch is None or batch.num_rows == 0:
            return
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name=f"parquet-{self.stem}", daemon=True)
            self._thread.start()
        self.rows += batch.num_rows
        self._queue.put(batch)

    def _drain(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._write_now(batch)
                except BaseException as error:  # surfaced by the next write() or close()
                    self._error = error

    def _write_now(self, batch: pa.RecordBatch) -> None:
        if self.writer is not None:
            conformed = _conform(batch, self.writer.schema)
            if conformed is None:
                self.writer.close()
                self.writer = None
            else:
                batch = conformed
        if self.writer is None:
            path = self.unit.atomic(self.folder / part_name(self.stem, self.parts))
            schema = self.fixed_schema or batch.schema
            short = [name for name in schema.names if name not in LONG_COLUMNS]
            self.writer = pq.ParquetWriter(
                path, schema, compression=COMPRESSION, use_dictionary=short, write_statistics=short
            )
            self.parts += 1
        self.writer.write_batch(batch, row_group_size=1 << 20)

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self._error is not None:
            raise self._error


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | None:
    """``batch`` with ``schema``'s columns and types, or None when that would lose data."""
    if batch.schema.equals(schema):
        return batch
    if set(batch.schema.names) - set(schema.names):
        return None
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(index)
        if column.type != field.type:
            try:
                column = pc.cast(column, field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return None
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
