"""Units smaller than a file: where a large input file is cut so that several workers
can read it at once.

A file is cut only where its format has natural seams, and only at seams fixed by the
file and ``split_bytes`` alone, so the same config cuts the same file the same way on
any machine and for any worker count:

* plain JSON lines: byte ranges of about equal size, each starting at the first line
  start at or after a multiple of a step near ``split_bytes`` (``even_step``: a multiple
  of ``block_bytes``, so that every cut is also where the whole file's reader ends a
  block, and a piece is read in the very batches the whole file is). Numbering lines (ids and ledger locations are
  ``file:line``, exactly as for the whole file) takes one pass that counts newlines, at
  plan time, at memory speed.
* Parquet: consecutive row groups, about ``split_bytes`` of them (compressed) a piece,
  read from the footer.
* Arrow IPC (``datasets``' files): consecutive record batches, the same way.
* WARC files compressed per record (``.warc.gz``, Common Crawl's one gzip member a
  record): byte ranges of about equal size, cut anywhere; a piece's reader starts at the
  first member at or after its start and reads the members that start before its end
  (``warc_framing``), so nothing is read at plan time but the first bytes. A plain
  ``.warc`` is one unit (a ``WARC/1.`` line may stand inside a record's body).
* RedPajama-V2 documents files: never cut, since their signals, duplicates and MinHash
  are joined by row over the whole file (``redpajama_v2``).
* zstd JSON lines of several frames: runs of whole frames, starting at the first frame
  start at or after each multiple of the step (``zstd_frames``; numbering the lines
  takes decompressing the file once at plan time). A file of one frame is one unit.
* other compressed JSON lines (gzip, bz2, xz): never cut. A single-member gzip stream
  cannot be entered except at its start, and bz2 blocks start at bit offsets that only
  decompressing finds.

A file with one piece (small, or a format or seams that do not allow more), a remote
file, or one that cannot be looked into here (the reader will quarantine it) is one
whole-file unit, as if ``split_bytes`` were 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers import codecs
from pipeline.readers.common import READ_ERRORS, Span
from pipeline.readers.zstd_frames import frame_spans

# The smallest gzip file: its header and its trailer.
GZIP_LEAST = 18

# Plan-time reads of a JSON lines file, in bytes.
SCAN_BYTES = 16 << 20


def plan_spans(path: Path, fmt: str, split_bytes: int, block_bytes: int) -> list[Span] | None:
    """The pieces of a local file, in order; None for one whole-file unit."""
    if split_bytes <= 0 or fmt == "redpajama-v2":
        return None
    try:
        if path.stat().st_size <= split_bytes:
            return None
        if fmt == "jsonl":
            spans = _jsonl_spans(path, even_step(path.stat().st_size, split_bytes, block_bytes), block_bytes)
        elif fmt == "warc":
            spans = _warc_spans(path, even_step(path.stat().st_size, split_bytes, 1))
        else:
            spans = {"parquet": _parquet_spans, "arrow": _arrow_spans}[fmt](path, split_bytes)
    except READ_ERRORS:
        return None
    return spans if len(spans) > 1 else None


def parsed_bytes(path: Path | str, stored: int) -> int:
    """About how many bytes reading ``path`` parses, for ranking units by their work: a
    local gzip file's uncompressed size from its trailer, else ``stored``. Text compresses
    2.3-3.6x (the e2e corpus's web, math and code shards), so by stored size the workers
    took web shards before longer math ones and one waited a second for the other at the
    end. The trailer holds the last member's size mod 2**32, which for a file of several
    members or over 4 GiB is a guess: never less than ``stored``. A ``stored`` size too
    small for a gzip file is not opened (what is no file, a FIFO, is planned as size 0)."""
    if isinstance(path, str) or stored < GZIP_LEAST:
        return stored  # remote: a request more per file is not worth it
    try:
        with open(path, "rb") as f:
            if f.read(2) != codecs.GZIP.magics[0]:
                return stored
            f.seek(-4, 2)
            return max(int.from_bytes(f.read(4), "little"), stored)
    except OSError:
        return stored


def even_step(size: int, split_bytes: int, block_bytes: int) -> int:
    """The distance between nominal cuts: ``size`` in as many pieces as ``split_bytes``
    asks for, of equal size (a multiple of ``block_bytes``), not full pieces and a short
    last one. Why: 222 MB at 64 MB is 64+64+64+30, and two workers wait on 128 MB;
    four pieces of 56 MB give them 112 MB each."""
    pieces = -(-size // max(split_bytes, 1))
    step = -(-size // pieces)
    return max(block_bytes, -(-step // block_bytes) * block_bytes)


def _jsonl_spans(path: Path, step: int, block_bytes: int) -> list[Span]:
    size = path.stat().st_size
    starts, lines = [0], [1]
    buffer = bytearray(SCAN_BYTES)
    with open(path, "rb") as f:
        if codec := codecs.sniff(f.read(codecs.SNIFF_BYTES)):
            return frame_spans(path, step, block_bytes) if codec is codecs.ZSTD else []
        f.seek(0)
        position = newlines = 0  # file offset of the bytes in ``buffer``; newlines before them
        target = step  # the next nominal cut
        while target < size and (n := f.readinto(buffer)):
            chunk = memoryview(buffer)[:n]
            counted = 0  # the newlines of ``chunk`` before ``counted`` are in ``newlines``
            while target < position + n and (found := buffer.find(b"\n", max(target - 1 - position, 0), n)) >= 0:
                cut = position + found + 1  # the first line start at or after ``target``
                newlines += _count_newlines(chunk[counted : found + 1])
                counted = found + 1
                if cut < size:
                    starts.append(cut)
                    lines.append(newlines + 1)
                target = (cut // step + 1) * step
            newlines += _count_newlines(chunk[counted:])
            position += n
    return [Span(start, end, line) for start, end, line in zip(starts, [*starts[1:], size], lines)]


def _warc_spans(path: Path, step: int) -> list[Span]:
    """Byte ranges of a gzip-compressed WARC file (the location of a WARC record is its
    byte offset, so a piece's first location is its start)."""
    with open(path, "rb") as f:
        if f.read(len(codecs.GZIP.magics[0])) != codecs.GZIP.magics[0]:
            return []
    size = path.stat().st_size
    return [Span(start, min(start + step, size), start) for start in range(0, size, step)]


def _count_newlines(data: memoryview) -> int:
    """Native and several GB/s (``bytes.count`` manages about one)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 10))


def _parquet_spans(path: Path, split_bytes: int) -> list[Span]:
    with pq.ParquetFile(path) as parquet:
        meta = parquet.metadata
        sizes, rows = [], []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            sizes.append(sum(group.column(c).total_compressed_size for c in range(group.num_columns)))
            rows.append(group.num_rows)
    return _grouped(sizes, rows, split_bytes)


def _arrow_spans(path: Path, split_bytes: int) -> list[Span]:
    """Record batches of a stream (as ``datasets`` writes) or a file, sized in memory;
    the file is mapped, so only message headers are read, not the data."""
    with pa.memory_map(str(path)) as source:
        try:
            batches = list(pa.ipc.open_stream(source))
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        return _grouped([b.nbytes for b in batches], [b.num_rows for b in batches], split_bytes)


def _grouped(sizes: list[int], rows: list[int], split_bytes: int) -> list[Span]:
    """Consecutive pieces gathered until each group holds at least ``split_bytes``."""
    spans: list[Span] = []
    start = row = first_row = held = 0
    for i, (size, count) in enumerate(zip(sizes, rows)):
        held += size
        row += count
        if held >= split_bytes or i == len(sizes) - 1:
            spans.append(Span(start, i + 1, first_row))
            start, first_row, held = i + 1, row, 0
    return spans
