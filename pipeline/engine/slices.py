"""One partition of partitioned record files, fetched from an object store by byte range.

Why: a reduce task (or a finalize task of a range) reads partition ``p`` of every unit's
file; downloading whole files would move every file to every node, ``partitions`` times
the data over the run. Here a task asks for the first bytes of each file (the header
holds where each partition lies, and a small file is all there), then for ``p``'s byte
range if it was not in them, and keeps it as the file's slice in this machine's mirror
(``pipeline.formats.partfile``), which the stage reads as if it were the file.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.engine.storage import RunStore, in_threads
from pipeline.formats import partfile
from pipeline.util.atomic import atomic_path

PROBE_BYTES = 64 << 10  # the first request: a header of up to 8,000 partitions, and more
# Requests at a time: small ranged reads wait on latency, not bandwidth, so more of them
# than whole-file transfers (a reduce task reads a range of every unit's band file).
THREADS = 32


def pull_slices(store: RunStore, rel: str, keep: Callable[[str], bool], partitions: range) -> None:
    """Fetch each of ``partitions`` of each file under ``rel`` that ``keep`` takes (paths
    relative to the run's root) that this mirror holds neither whole nor sliced."""
    if not store.remote:
        return
    wanted = [
        (name, info, partition)
        for name, info in store.listing(rel, keep)
        if not (store.root / name).is_file()
        for partition in partitions
        if not partfile.slice_path(store.root / name, partition).is_file()
    ]

    def fetch(item) -> None:
        name, info, partition = item
        with store.open_ranged(info) as source:
            head = source.read_at(min(info.size, PROBE_BYTES), 0)
            size = partfile.header_size(partfile.partitions_in(head, name))
            if len(head) < size:
                head = source.read_at(size, 0)
            _, _, offsets = partfile.parse_header(head, name)
            start, end = partfile.byte_range(offsets, partition, partfile.record_size(offsets, info.size))
            data = head[start:end] if end <= len(head) else source.read_at(end - start, start)
        with atomic_path(partfile.slice_path(store.root / name, partition)) as tmp:
            partfile.write_slice(tmp, head, partition, data)

    in_threads(fetch, wanted, THREADS)
