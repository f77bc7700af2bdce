"""Dedup's work folder: the files its phases hand each other, and the records in them.

Documents are referred to by their global id (``pipeline.formats.unit_table``: the
imported index's documents first, then this run's units by name).

Per unit, ``map_unit`` writes two files under ``work_dir/map/<source>/``:

* ``<unit>.bands``: the unit's band keys as a partitioned record file (see ``partfile``),
  its ``count`` field holding the number of documents;
* ``<unit>.docs.arrow``: an Arrow IPC file, one row per document: ``id``, ``quality``
  (the survivor signal, null when absent), ``exact`` (normalised-text hash), ``sig``
  (16-bit stored signature) and, with ``verify``, ``shingles`` (sorted unique 64-bit
  shingle hashes). Read back memory-mapped, so a lookup touches only the rows it needs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.unit_table import WorkStateError
from pipeline.formats.work_files import OneFile, PerIndex, PerUnit
from pipeline.util.printable import error_line

BAND_RECORD = np.dtype([("key", "<u8"), ("row", "<u4")])

# The work folder's files, in the order the phases write them (``unit_table.UNITS`` too).
BANDS = PerUnit("map", ".bands")  # a unit's band keys, partitioned by key
DOCS = PerUnit("map", ".docs.arrow")  # a unit's per-document state
FOREST = PerIndex("reduce", "p", ".forest")  # a key partition's forest of candidate edges
INDEX = PerIndex("reduce", "p", ".index.npy")  # a key partition's unique keys: what a later run imports
# A document range's removals, sorted by gid, with their survivor's id resolved so that
# the filter phase reads only its own unit's files.
DECISIONS = PerIndex("decisions", "r", ".arrow")
DONE = OneFile("done.json")  # the counters, written last


def read_index(path: Path, dtype: np.dtype) -> np.ndarray:
    """A partition's band index (``reduce/p<p>.index.npy``), checked: a run importing it must
    be told which file is missing, cut short or not an index, not numpy's bare complaint."""
    try:
        index = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise WorkStateError(f"{path} is missing: dedup's reduce has not run there") from None
    except (OSError, ValueError, EOFError) as error:
        raise WorkStateError(f"{path}: not a dedup band index ({error_line(error)})") from None
    if index.dtype != dtype or index.ndim != 1:
        raise WorkStateError(f"{path}: not a dedup band index ({index.dtype}, shape {index.shape})")
    return index


def docs_schema(stored_width: int, verify: bool) -> pa.Schema:
    fields = [
        pa.field("id", pa.string()),
        pa.field("quality", pa.float64()),
        pa.field("exact", pa.uint64()),
        pa.field("sig", pa.binary(2 * stored_width)),
    ]
    if verify:
        fields.append(pa.field("shingles", pa.large_list(pa.uint64())))
    return pa.schema(fields)


def fixed_binary_matrix(column: pa.ChunkedArray | pa.Array, dtype=np.uint16) -> np.ndarray:
    """A fixed_size_binary column as a [rows, width] numpy matrix (no per-row objects)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = arr.type.byte_width
    data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width : (arr.offset + len(arr)) * width]
    return data.view(dtype).reshape(len(arr), width // np.dtype(dtype).itemsize)


def list_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list<uint64> column as (values, int64 offsets rebased to 0)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(arr.offsets.to_numpy(), np.int64)
    values = np.asarray(pc.list_flatten(arr).to_numpy(), np.uint64)
    return values, offsets - offsets[0]
