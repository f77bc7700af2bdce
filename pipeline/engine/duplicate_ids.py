"""Ids must be unique within a run; this finds the ones that are not, with bounded memory.

Every later tool names documents by id (``prep show``, the ledger, dedup's survivors),
so two documents with one id are ambiguous everywhere after. Inputs from many crawls
repeat ids more often than one would think. The run does not drop such documents (both
are real text); it counts them and names a few at the end.

Each unit of the first segment writes the sorted 64-bit hashes of its input ids
(``work/ids/<source>/<unit>.npy``, 8 bytes a document). At the end, the hash space is
cut into ranges of about ``RANGE_IDS`` hashes; each range is gathered from every unit's
file (a binary search finds the slice) and checked on its own, so memory is bounded
by the range, not by the corpus. A repeated hash is confirmed on the id strings for
the examples; at over a billion ids, the count may include a rare 64-bit collision.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq

from pipeline.formats.layout import Layout
from pipeline.kernels.hashing import id_hashes

RANGE_IDS = 8 << 20
EXAMPLES = 3


def find_duplicates(layout: Layout, units: list, output_files) -> dict | None:
    """``{"ids", "extra_copies", "examples"}`` for ids seen more than once, else None.

    ``units`` have ``source`` and ``name``; ``output_files(unit)`` lists the Parquet
    files (kept and rejected) that hold a unit's ids, read only for the examples."""
    arrays = [_unit_hashes(layout, unit, output_files) for unit in units]
    total = sum(len(a) for a in arrays)
    if total == 0:
        return None
    ranges = max(1, math.ceil(total / RANGE_IDS))
    edges = [np.uint64(min(2**64 - 1, (2**64 * k) // ranges)) for k in range(ranges)] + [None]
    repeated, copies = [], 0
    for low, high in zip(edges, edges[1:]):
        parts = [a[np.searchsorted(a, low) : (len(a) if high is None else np.searchsorted(a, high))] for a in arrays]
        hashes = np.sort(np.concatenate(parts))
        same = hashes[1:] == hashes[:-1]
        if same.any():
            copies += int(same.sum())
            repeated.append(np.unique(hashes[1:][same]))
    if not repeated:
        return None
    repeated = np.concatenate(repeated)
    return {
        "ids": len(repeated),
        "extra_copies": copies,
        "examples": _examples(repeated[:EXAMPLES], arrays, units, output_files),
    }


def _unit_hashes(layout: Layout, unit, output_files) -> np.ndarray:
    """A unit's sorted id hashes: its file in ``work/ids``, or, where that file is missing
    or damaged (deleted or cut short while the run was stopped), the same hashes again
    from its output files, whose documents and ledger rows hold every id it read. A
    missing file was passed over (a count too low, silently) and a cut one failed every
    rerun on "mmap length is greater than file size"."""
    try:
        return np.load(layout.unit_ids(unit.source, unit.name), mmap_mode="r")
    except (OSError, ValueError, EOFError):
        hashes = [_file_ids(path)[1] for path in output_files(unit)]
        return np.sort(np.concatenate(hashes)) if hashes else np.empty(0, np.uint64)


def _file_ids(path) -> tuple:
    """An output file's ``id`` column and the hashes of its ids."""
    # ParquetFile, not read_table: read_table imports pyarrow.dataset, and with it
    # pandas (0.4 s at the end of every run that has a repeated id).
    ids = pq.ParquetFile(path).read(columns=["id"]).column("id").combine_chunks()
    return ids, id_hashes(ids)


def _examples(hashes: np.ndarray, arrays: list, units: list, output_files) -> list[dict]:
    """The id strings behind a few repeated hashes, and the input files they came from."""
    found: dict[int, dict] = {}
    for array, unit in zip(arrays, units):
        positions = np.searchsorted(array, hashes)
        wanted = {int(h) for h, p in zip(hashes, positions) if p < len(array) and array[p] == h}
        if not wanted:
            continue
        wanted_hashes = np.array(sorted(wanted), dtype=np.uint64)
        for path in output_files(unit):
            ids, file_hashes = _file_ids(path)
            # Python objects only for the few matches; pa.array(mask) would import pandas
            for row in np.flatnonzero(np.isin(file_hashes, wanted_hashes)):
                h, doc_id = file_hashes[row], ids[int(row)].as_py()
                entry = found.setdefault(int(h), {"id": doc_id, "copies": 0, "files": []})
                entry["copies"] += 1
                if unit.files_label not in entry["files"]:
                    entry["files"].append(unit.files_label)
    return [found[int(h)] for h in hashes if int(h) in found]
