"""The round between connected components and ``decide``: each cluster's members, with
what ``decide`` needs of them, shipped to the decide task its centre hashes to.

Why: ``decide`` ranks a cluster's members by their attributes (quality, id, exact hash,
stored signature, with ``verify`` the shingles), which live in the units' docs files. A
decide task per cluster would touch documents of any unit, so on an object store
every task would download every docs file whole. Instead ``ship`` task ``r`` reads the
labels of document range ``r`` (each clustered document of the range and its centre,
from ``clusters.label_nodes``), opens only the docs files of the units overlapping range
``r``, and writes its clustered documents' rows to one file partitioned by decide task
(a hash range of the centre, ``clusters.hash_partition``); decide task ``q`` reads
partition ``q`` of every such file. Singletons,
most of a corpus, are never shipped, and each docs file is read only by the tasks whose
range its unit overlaps (one or two where a range holds several units).

Why the labels, not the fixed point's adjacency: the component steps keep nodes in hash
ranges, so a document range's nodes are in every one of them, and a centre's adjacency
holds its whole cluster; the labels round regroups one (gid, centre) record per node by
document range, so task ``r`` reads just its own documents' labels.

Why a hash of the centre, not its range: a centre is its cluster's smallest gid, so where
a corpus repeats itself (copies of a crawl, the same pages in several dumps) every centre
lies in the first copy, the first range or two, and one decide task by range would hold
every member of the run. A well-mixed hash spreads clusters over the tasks evenly
whatever their gids; which task decides a cluster changes nothing it decides.

Rows with variable-length columns (ids, shingles) travel as one Arrow IPC stream per
partition, stored as the blobs of a partitioned file (``partfile.write_blobs``), so an
object store's slices fetch one partition's bytes as for any partitioned file.
``decide`` hands its decisions to ``regroup`` the same way, survivor ids included.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats import partfile
from pipeline.formats.unit_table import DocStore
from stages.dedup import clusters
from stages.dedup.store import docs_schema


def member_schema(stored_width: int, verify: bool) -> pa.Schema:
    """A shipped member: its gid, its cluster's centre (``comp``) and its docs file row."""
    fields = [pa.field("gid", pa.int64()), pa.field("comp", pa.int64())]
    return pa.schema(fields + list(docs_schema(stored_width, verify)))


def ship(labels: list[Path], r: int, store: DocStore, out: Path, partitions: int, schema: pa.Schema) -> int:
    """Document range ``r``'s clustered documents, from partition ``r`` of the label files
    ``labels``, written to ``out`` partitioned by their centre's decide task; returns how many."""
    labelled = clusters.read_labels(labels, r)
    gids, comp = labelled["gid"], labelled["comp"]
    if len(gids):
        rows = store.gather(gids, schema.names[2:]).add_column(0, "comp", pa.array(comp))
        rows = rows.add_column(0, "gid", pa.array(gids)).cast(schema)
    else:
        rows = schema.empty_table()
    write_tables(out, rows, clusters.hash_partition(comp, partitions), partitions)
    return len(gids)


def write_tables(final: Path, rows: pa.Table, partition: np.ndarray, partitions: int) -> None:
    """``rows`` grouped by ``partition`` (order kept within one), a partition an IPC stream."""
    order = np.argsort(partition, kind="stable")
    bounds = np.searchsorted(partition[order], np.arange(partitions + 1))
    blobs = []
    for p in range(partitions):
        if bounds[p + 1] == bounds[p]:
            blobs.append(b"")
            continue
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows.take(pa.array(order[bounds[p] : bounds[p + 1]])))
        blobs.append(sink.getvalue())
    tmp = partfile.temp_for(final)
    partfile.write_blobs(tmp, blobs)
    os.replace(tmp, final)


def read_tables(files: list[Path], partition: int, schema: pa.Schema) -> pa.Table:
    """Partition ``partition`` of every file of ``write_tables``, one after another."""
    parts = []
    for path in files:
        data = partfile.read(path, partition, np.uint8)
        if len(data):
            parts.append(pa.ipc.open_stream(pa.py_buffer(data)).read_all())
    return pa.concat_tables(parts) if parts else schema.empty_table()
