"""The work folder of ``paragraph_dedup``: the files its phases hand each other, and the
two whole-run steps (first occurrences per hash partition, decisions per document range).

Global order: every document has a *gid*, its position among this run's documents with
units sorted by (source, unit) name and rows in order: it depends only on unit names, so
every decision is the same whatever ran where. A unit of text is identified by
(gid, index within the document); its first occurrence is the smallest such pair.

Files (all written atomically; memory is one partition's records, never the run's):

* ``map/<source>/<unit>.paras``: ``PARA`` records of the unit's counted units, grouped
  by hash partition (``pipeline.formats.partfile``), its ``count`` the unit's documents;
* ``map/<source>/<unit>.docs.arrow``: per document its id and counted characters;
* ``reduce/p<p>.part``: ``REMOVED`` records (the occurrences of each hash of partition
  ``p`` outside the document of its first occurrence), grouped by document range;
* ``units.json``: the unit table finalize used (``formats.unit_table``; the filter reads it back);
* ``decisions/r<r>.arrow``: per document of range ``r`` with a removed unit: its gid,
  removed unit indexes, seen and counted characters, whether it is dropped, and the id
  of the document where its largest removed unit first occurred;
* ``done.json``: the run's counters, written last.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.formats import partfile
from pipeline.formats.unit_table import DocStore
from pipeline.formats.work_files import OneFile, PerIndex, PerUnit
from pipeline.phases import Numbering

PARA = np.dtype([("hash", "<u8"), ("row", "<u4"), ("para", "<u4"), ("chars", "<u4")])
REMOVED = np.dtype([("gid", "<i8"), ("para", "<u4"), ("chars", "<u4"), ("first", "<i8")])
DOCS_SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("chars", pa.int64())])
DECISIONS_SCHEMA = pa.schema(
    [
        pa.field("gid", pa.int64()),
        pa.field("paras", pa.list_(pa.uint32())),
        pa.field("seen", pa.int64()),
        pa.field("chars", pa.int64()),
        pa.field("drop", pa.bool_()),
        pa.field("first_id", pa.string()),
    ]
)

# The work folder's files, in the order the phases write them (``unit_table.UNITS`` too).
PARAS = PerUnit("map", ".paras")
DOCS = PerUnit("map", ".docs.arrow")
REDUCED = PerIndex("reduce", "p", ".part")
DECISIONS = PerIndex("decisions", "r", ".arrow")
DONE = OneFile("done.json")


def numbering() -> Numbering:
    """The global order of the run's documents: by the units' ``PARAS`` files."""
    return Numbering("paragraph_dedup", PARAS, DOCS, {})


def hash_partition(hashes: np.ndarray, partitions: int) -> np.ndarray:
    return ((hashes >> np.uint64(32)) % np.uint64(partitions)).astype(np.int64)


def document_range(gids: np.ndarray, total: int, partitions: int) -> np.ndarray:
    """Contiguous gid ranges: a unit's documents sit in one or a few."""
    return (np.asarray(gids, np.int64) * partitions // max(total, 1)).astype(np.int64)


def read_arrow(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def write_arrow(final: Path, table: pa.Table) -> None:
    tmp = partfile.temp_for(final)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, final)


def first_occurrences(work_dir: Path, partition: int, partitions: int) -> dict[str, int]:
    """The occurrences of each hash of ``partition`` outside the document where it first
    occurs, grouped by document range.

    The units' files are read in numbering order, and each holds its records in (row,
    unit index) order, so the records arrive in global order: one pass over an
    open-addressing table (``first_document``) finds every hash's first document, no sort."""
    table = numbering().table(work_dir)
    parts = [partfile.read(PARAS.path(work_dir, s, u), partition, PARA) for s, u in zip(table.sources, table.units)]
    records = np.concatenate(parts) if parts else np.empty(0, PARA)
    gids = np.concatenate([p["row"].astype(np.int64) + table.starts[u] for u, p in enumerate(parts)] or [[]])
    gids = gids.astype(np.int64)
    later, first = first_document(records["hash"], gids)
    removed = np.empty(int(later.sum()), REMOVED)
    removed["gid"], removed["para"] = gids[later], records["para"][later]
    removed["chars"], removed["first"] = records["chars"][later], first[later]
    final = REDUCED.path(work_dir, partition)
    tmp = partfile.temp_for(final)
    partfile.write(tmp, removed, document_range(removed["gid"], table.total, partitions), partitions)
    os.replace(tmp, final)
    return {"paragraph_dedup.hashed": len(records), "paragraph_dedup.duplicates": len(removed)}


def first_document(hashes: np.ndarray, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_later`` of these records, with a table at most half full."""
    slots = 1 << max(4, (2 * len(hashes)).bit_length())
    return _later(np.ascontiguousarray(hashes, np.uint64), gids, slots)


@njit
def _later(hashes, gids, slots):
    """Per record (in global order): whether its hash first occurred in another, earlier
    document, and that document's gid. Repeats inside the first document stay: they are
    no copy of another one."""
    n = len(hashes)
    keys = np.empty(slots, np.uint64)
    owner = np.full(slots, -1, np.int64)
    later = np.zeros(n, np.bool_)
    first = np.empty(n, np.int64)
    mask = np.uint64(slots - 1)
    for k in range(n):
        if k and gids[k] < gids[k - 1]:
            raise ValueError("paragraph_dedup: map records out of global order")
        h = hashes[k]
        slot = np.int64(h & mask)  # the hashes are mixed: their low bits are as good as any
        while owner[slot] != -1 and keys[slot] != h:
            slot = (slot + 1) & (slots - 1)
        if owner[slot] == -1:
            keys[slot], owner[slot] = h, gids[k]
        first[k] = owner[slot]
        later[k] = owner[slot] != gids[k]
    return later, first


def decide(work_dir: Path, partitions: int, max_seen_fraction: float) -> dict[str, int]:
    """Per document range: which units each document loses, and whether it is dropped."""
    table = numbering().table(work_dir)
    table.save(work_dir)
    store = DocStore(table)
    counters = {"paragraph_dedup.documents": table.total, "paragraph_dedup.documents_changed": 0}
    counters["paragraph_dedup.partial_copies"] = 0
    for r in range(partitions):
        rows = np.concatenate([partfile.read(path, r, REMOVED) for path in REDUCED.paths(work_dir, partitions)])
        rows = rows[np.lexsort((rows["para"], rows["gid"]))]
        gid, starts = np.unique(rows["gid"], return_index=True)
        seen = np.add.reduceat(rows["chars"].astype(np.int64), starts) if len(rows) else np.zeros(0, np.int64)
        # Each document's largest removed unit (then its smallest index): where it first occurred.
        by_size = np.lexsort((rows["para"], -rows["chars"].astype(np.int64), rows["gid"]))
        largest_first = rows["first"][by_size][starts]
        chars = np.asarray(_gathered(store, gid, "chars").to_numpy(zero_copy_only=False), np.int64)
        drop = seen > max_seen_fraction * chars
        first_id = np.full(len(gid), None, object)
        first_id[drop] = _gathered(store, largest_first[drop], "id").to_pylist()
        paras = pa.ListArray.from_arrays(pa.array(np.append(starts, len(rows)), pa.int32()), pa.array(rows["para"]))
        columns = [pa.array(gid, pa.int64()), paras, pa.array(seen), pa.array(chars), pa.array(drop)]
        columns.append(pa.array(first_id, pa.string()))
        write_arrow(DECISIONS.path(work_dir, r), pa.Table.from_arrays(columns, schema=DECISIONS_SCHEMA))
        counters["paragraph_dedup.documents_changed"] += int((~drop).sum())
        counters["paragraph_dedup.partial_copies"] += int(drop.sum())
    return counters


def _gathered(store: DocStore, gids: np.ndarray, column: str) -> pa.Array:
    """``column`` of the docs files at ``gids`` (any order), typed as ``DOCS_SCHEMA`` says."""
    values = store.gather(gids, [column]).column(column).combine_chunks()
    return values if len(values) else pa.array([], DOCS_SCHEMA.field(column).type)
