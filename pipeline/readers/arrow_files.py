"""Arrow IPC files, as Hugging Face ``datasets`` writes them with ``save_to_disk``.

A ``save_to_disk`` folder is expanded into its Arrow files by the format that owns its
layout (``formats/hf_dataset_folder.py``); each file is then read memory-mapped, without
importing ``datasets`` at all, one record batch at a time: a batch that decodes but cannot be
trusted costs only its rows (``batches``); one that cannot be decoded at all ends the file,
the documents before it kept (its row count, and so where the next batch's rows start, is
in its own damaged header).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from pipeline.readers.batches import Block, read_batches
from pipeline.readers.common import Chunk, InputSpec


def read_arrow_file(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    return read_batches(path, spec, _open_arrow)


@contextmanager
def _open_arrow(path: Path, spec: InputSpec) -> Iterator[tuple[pa.Schema, Iterator[Block]]]:
    """The stream format ``datasets`` writes, or the file format; each record batch a
    ``Block`` with the bytes of the file it stands for."""
    with pa.memory_map(str(path)) as source:
        try:
            stream = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            yield reader.schema, _file_format_blocks(reader, source.size(), spec)
        else:
            yield stream.schema, _stream_blocks(stream, source, spec)


def _stream_blocks(stream: pa.ipc.RecordBatchStreamReader, source: pa.MemoryMappedFile, spec: InputSpec):
    """One message at a time (the mapped file's position says how many bytes each took):
    a stream truncated or damaged part-way fails at its first bad message, not at open.
    A stream has no index: the batches before a span are stepped over (mapped, not read)."""
    start, end = (0, None) if spec.span is None else spec.span[:2]
    position = 0
    for i, batch in enumerate(stream):
        if i >= start:
            yield _block(i, batch, source.tell() - position, spec)
        position = source.tell()
        if i + 1 == end:
            return


def _file_format_blocks(reader: pa.ipc.RecordBatchFileReader, size: int, spec: InputSpec):
    count = reader.num_record_batches
    for i in range(count) if spec.span is None else range(*spec.span[:2]):
        yield _block(i, reader.get_batch(i), size * (i + 1) // count - size * i // count, spec)


def _block(i: int, batch: pa.RecordBatch, nbytes: int, spec: InputSpec) -> Block:
    """A decoded record batch as a block of pieces of at most ``spec.batch_rows`` rows: it
    is validated piece by piece, so a piece that fails costs the rows from it on."""
    pieces = (batch.slice(start, spec.batch_rows) for start in range(0, batch.num_rows, spec.batch_rows))
    return Block(f"record batch {i}", batch.num_rows, nbytes, pieces)
