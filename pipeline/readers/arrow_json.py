"""What Arrow's JSON parser leaves to its caller, for a block of JSON lines: whether the
bytes are valid UTF-8 (it passes invalid bytes on into string columns), the line of each
row it read (it skips blank lines), and whether an id column, cast to text, gives each id
as written (its inferred types do not always)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.kernels.buffers import is_string


def is_valid_utf8(data: bytes) -> bool:
    """Arrow's UTF-8 validator over the bytes as they are (no copy): about 15 GB/s, a
    small fraction of the parse; ``bytes.decode`` would build a string at a tenth of that."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def row_lines(block: bytes | memoryview, first_line: int, newlines: int, rows: int) -> pa.Array | None:
    """Line number of each parsed row: Arrow skips blank lines, so count them out; None
    when the rows are not one per nonblank line."""
    lines = newlines + (0 if block[-1:] == b"\n" else 1)
    if lines == rows:
        return pa.array(np.arange(first_line, first_line + rows, dtype=np.int64))
    data = np.frombuffer(block, dtype=np.uint8)
    newlines = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    content = np.cumsum(np.concatenate(([0], ~np.isin(data, (9, 10, 13, 32)))))
    nonblank = np.flatnonzero(content[ends] - content[starts] > 0)
    return pa.array(first_line + nonblank.astype(np.int64)) if len(nonblank) == rows else None


def printed_exactly(ids: pa.ChunkedArray) -> bool:
    """Whether casting the id column to text gives each id as written, so that the raw
    bytes need not be read again: strings; true and false; integers, which Arrow keeps
    as int64 only when all fit (JSON writes them one way, but for ``-0``); nested and
    null columns, which give no id."""
    type_ = ids.type
    if pa.types.is_integer(type_):
        return not pc.any(pc.equal(ids, 0)).as_py()
    return is_string(type_) or pa.types.is_boolean(type_) or pa.types.is_nested(type_) or pa.types.is_null(type_)
