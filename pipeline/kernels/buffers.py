"""Arrow string arrays <-> the (UTF-8 bytes, int64 offsets) pairs the kernels read.

No copy of the text on the way in: the numpy views alias Arrow's buffers, and a sliced
array is handled by taking its window of the offsets (they still point into the shared
data buffer, which the kernels index directly). Row ``i`` is
``data[offsets[i]:offsets[i + 1]]`` whether the array is ``string`` (int32 offsets) or
``large_string`` (int64), so a kernel is compiled once for both.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def is_string(typ: pa.DataType) -> bool:
    """Whether ``typ`` is Arrow's ``string`` or ``large_string``."""
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def string_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(data, offsets) of a string-like array; nulls read as empty strings.

    Another type is cast to ``large_string`` first (so it reads as its text form). A null
    costs one copy of the text (``fill_null``): a null slot may span bytes."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not is_string(arr.type):
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
