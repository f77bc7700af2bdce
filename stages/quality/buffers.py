"""Arrow string arrays <-> the (UTF-8 bytes, int64 offsets) pairs the kernels read.

No copy of the text on the way in: the numpy views alias Arrow's buffers, and a sliced
array is handled by taking its window of the offsets (they still point into the shared
data buffer, which the kernels index directly).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def text_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of a string-like array; nulls read as empty strings."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    _, off_buf, data_buf = arr.buffers()
    off_type = np.int32 if pa.types.is_string(arr.type) else np.int64
    n = len(arr)
    if off_buf is None:
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    offsets = np.frombuffer(off_buf, off_type)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def string_array(data: np.ndarray, offsets: np.ndarray, like: pa.DataType) -> pa.Array:
    """A string array of type ``like`` (string or large_string) over data/offsets (from 0)."""
    if pa.types.is_string(like) and offsets[-1] < 2**31:
        typ, offsets = pa.string(), offsets.astype(np.int32)
    else:
        typ, offsets = pa.large_string(), offsets.astype(np.int64)
    n = len(offsets) - 1
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
