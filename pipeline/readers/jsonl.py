"""JSON lines, plain or gzipped (C4's ``.json.gz``, RedPajama's ``.jsonl(.gz)``).

The fast path hands a few MB of whole lines at a time to Arrow's native JSON parser,
once two native scans of the raw block (on the prefetch thread) found nothing Arrow
mishandles: invalid UTF-8, which it accepts and passes on into string columns (and
column names), and nesting deeper than ``MAX_DEPTH``, which costs it memory and time
quadratic in the depth and, in the thousands, crashes the process. Only a block that
fails a scan or the parse is looked at line by line (with orjson) to quarantine the bad
lines; the good ones are parsed natively again, and rows that still disagree on types
are split in halves until each group parses, so one odd line never costs the file.
A line longer than ``max_doc_bytes`` is skipped while streaming, never held in memory.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pajson

from pipeline.readers.common import BadInput as Bad
from pipeline.readers.common import Chunk, InputSpec, bad_rows, file_facts, to_documents, unreadable
from pipeline.readers.nesting import MAX_DEPTH, scan_lines
from pipeline.readers.prefetch import prefetch
from pipeline.readers.rawfile import GZIP_ERRORS, HashingReader, open_stream, salvage_gzip

# Keep at most this much of a bad line in the ledger (the location finds the rest).
RAW_KEEP_BYTES = 1 << 20

# Decompressed bytes asked of the stream at a time (see _read_block).
PLAIN_STEP, GZIP_STEP = 1 << 16, 4 << 20

# What JSON (and Arrow, and _row_lines) counts as whitespace: a line of only these is blank.
JSON_WHITESPACE = b" \t\r\n"


class _Block(NamedTuple):
    """Whole lines of input, with what the scans found in them."""

    data: bytes | memoryview  # a view of the bytes read, so that cutting a block copies nothing
    first_line: int  # number of its first line
    newlines: int
    valid_utf8: bool
    too_deep: np.ndarray  # 0-based indices of its lines nested deeper than MAX_DEPTH

    @property
    def clean(self) -> bool:
        """Safe to hand to Arrow whole."""
        return self.valid_utf8 and not len(self.too_deep)


def read_jsonl(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    """The file's documents, or (``spec.span``) those of the lines in a byte range."""
    try:
        raw, stream, gzipped = _open(path, spec)
    except OSError as error:  # gone since the run was planned, or not ours to read
        location = 0 if spec.reports_file else spec.span.first_line
        yield Chunk(bad=unreadable(spec, location, error), extra=file_facts(path) if spec.reports_file else {})
        return
    reported = 0
    try:
        for item in prefetch(_line_blocks(stream, gzipped, spec, path)):
            if isinstance(item, Bad):  # a quarantined region
                yield Chunk(bad=bad_rows(spec, [item]), bytes_read=raw.bytes_read - reported)
            else:
                for docs, bad in _parse_block(item, spec):
                    yield Chunk(docs=docs, bad=bad, bytes_read=raw.bytes_read - reported)
                    reported = raw.bytes_read
            reported = raw.bytes_read
        facts = raw.facts()
        yield Chunk(bytes_read=raw.bytes_read - reported, extra=facts)
    finally:
        stream.close()
        raw.close()


def _open(path: Path, spec: InputSpec) -> tuple[HashingReader, io.BufferedIOBase, bool]:
    span = None if spec.span is None else spec.span[:2]
    raw = HashingReader(path, span)
    try:
        return (raw, *open_stream(raw, plain=span is not None))
    except BaseException:
        raw.close()
        raise


def _line_blocks(stream: io.BufferedIOBase, gzipped: bool, spec: InputSpec, path: Path) -> Iterator[_Block | Bad]:
    """Yield blocks of whole lines, scanned, or quarantine entries. This runs on the
    prefetch thread, while the caller parses the previous block: the decompression and
    the scans (native code that releases the GIL) overlap the parse.

    A block ends at the first line start at or after a multiple of ``block_bytes`` (of
    the file's decompressed offsets), so where blocks fall depends on the file alone: a
    piece of the file cut at such a line start (``splits``) is read in exactly the blocks
    the whole file is, and its documents come out in the same batches."""
    size = spec.block_bytes
    offset = 0 if spec.span is None else spec.span.start  # file offset of ``pending``
    pending = b""  # bytes read and not yet passed on
    line = 1 if spec.span is None else spec.span.first_line  # number of the first line in ``pending``
    skipping = False  # inside a line longer than max_doc_bytes
    skipped = 0
    decoded = 0  # decompressed bytes read so far
    while True:
        to_target = (offset // size + 1) * size - offset - len(pending)  # the block ends at a line start past it
        try:
            parts = _read_block(stream, max(to_target, len(pending), PLAIN_STEP), gzipped)
        except _DecodeError as failure:
            error, salvaged = failure.args
            if not skipping:
                salvaged = salvage_gzip(path, decoded) if gzipped else salvaged
            if salvaged and not skipping:  # whole lines decoded before the damage are still documents
                data = pending + salvaged
                cut = data.rfind(b"\n")
                if cut >= 0:
                    line = yield from _scanned_blocks(data[: cut + 1], line, spec)
                    pending = data[cut + 1 :]
                else:
                    pending = data
            detail = f"{error}; the rest of the file from this line on is unreadable"
            yield Bad(line, _damage_kind(error, gzipped), detail, pending[:RAW_KEEP_BYTES] or None)
            return
        if not parts:
            break
        decoded += sum(map(len, parts))
        if skipping:
            chunk = b"".join(parts)
            end = chunk.find(b"\n")
            offset += len(chunk) if end < 0 else end + 1
            if end < 0:
                skipped += len(chunk)
                continue
            skipped += end
            yield Bad(line, "oversized", f"{skipped} bytes > max_doc_bytes {spec.max_doc_bytes}", None)
            line += 1
            skipping = False
            parts = [chunk[end + 1 :]]
        data = b"".join([pending, *parts])  # the one copy of the bytes read
        base, taken = offset, 0  # file offset of ``data``; its bytes passed on
        while (end := data.find(b"\n", (offset // size + 1) * size - 1 - base)) >= 0:
            line = yield from _scanned_blocks(memoryview(data)[taken : end + 1], line, spec)
            taken, offset = end + 1, base + end + 1
        pending = data[taken:]
        start = data.rfind(b"\n") + 1  # of the unfinished line
        if len(data) - start > spec.max_doc_bytes:
            if start > taken:
                line = yield from _scanned_blocks(memoryview(data)[taken:start], line, spec)
            skipping, skipped, pending = True, len(data) - start, b""
            offset = base + len(data)
    if skipping:
        yield Bad(line, "oversized", f"{skipped} bytes > max_doc_bytes {spec.max_doc_bytes}", None)
    elif pending:
        yield from _scanned_blocks(pending, line, spec)


class _DecodeError(Exception):
    """A read or decompression error, with the bytes decoded before it in the same block."""


def _damage_kind(error: BaseException, gzipped: bool) -> str:
    if not gzipped:
        return "unreadable-file"  # an I/O error reading a plain file
    return "truncated-gzip" if isinstance(error, EOFError) else "corrupt-gzip"


def _read_block(stream: io.BufferedIOBase, size: int, gzipped: bool) -> list[bytes]:
    """About ``size`` decompressed bytes, in pieces (joined once by the caller).

    A plain file is read in small steps, so that an I/O error loses only what follows it.
    Gzip is inflated in large ones: ISA-L takes the GIL back after every call, and small
    steps made it queue behind the parse and the writer for it (a 64 KB step inflated
    at a third of its speed beside a busy thread). A damaged member loses nothing to the
    large step either: ``salvage_gzip`` recovers the data before the damage."""
    step = GZIP_STEP if gzipped else PLAIN_STEP
    parts, total = [], 0
    while total < size:
        try:
            part = stream.read1(min(size - total, step))
        except GZIP_ERRORS as error:
            raise _DecodeError(error, b"".join(parts)) from None
        if not part:
            break
        parts.append(part)
        total += len(part)
    return parts


def _scanned_blocks(block: bytes | memoryview, first_line: int, spec: InputSpec):
    """Pass the block on, scanned, first cutting out any whole line over max_doc_bytes;
    return the number of the line after the block."""
    if len(block) <= spec.max_doc_bytes:
        scanned = _scanned(block, first_line)
        yield scanned
        return first_line + scanned.newlines
    block = bytes(block)
    start, line = 0, first_line
    piece_start, piece_line = 0, first_line
    while start < len(block):
        end = block.find(b"\n", start)
        end = len(block) if end < 0 else end + 1
        if end - start > spec.max_doc_bytes:
            if piece_start < start:
                yield _scanned(block[piece_start:start], piece_line)
            yield Bad(line, "oversized", f"{end - start} bytes > max_doc_bytes {spec.max_doc_bytes}", None)
            piece_start, piece_line = end, line + 1
        start, line = end, line + 1
    if piece_start < len(block):
        yield _scanned(block[piece_start:], piece_line)
    return first_line + block.count(b"\n")


def _scanned(data: bytes | memoryview, first_line: int) -> _Block:
    """The block with what the scans find in it (see ``_Block``); the nesting scan
    counts its newlines too."""
    too_deep, newlines = scan_lines(data)
    return _Block(data, first_line, newlines, _is_valid_utf8(data), too_deep)


def _is_valid_utf8(data: bytes) -> bool:
    """Arrow's UTF-8 validator over the bytes as they are (no copy): about 15 GB/s, a
    small fraction of the parse; ``bytes.decode`` would build a string at a tenth of that."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(data)]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _parse_block(block: _Block, spec: InputSpec) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | None]]:
    if block.clean:
        table = _arrow_parse(block.data)
        if table is not None:
            lines = _row_lines(block.data, block.first_line, block.newlines, table.num_rows)
            yield to_documents(table, lines, spec)
            return
    # Slow path: find the bad lines, then parse the good ones natively.
    too_deep = set(block.too_deep.tolist())
    good: list[tuple[int, bytes]] = []
    bad: list[Bad] = []
    for offset, text in enumerate(bytes(block.data).split(b"\n")):
        if not text.strip(JSON_WHITESPACE):
            continue
        line = block.first_line + offset
        entry = _too_deep(text, line) if offset in too_deep else _check_line(text, line)
        if entry is None:
            good.append((line, text))
        else:
            bad.append(entry)
    if bad:
        yield None, bad_rows(spec, bad)
    yield from _parse_lines(good, spec)


def _parse_lines(
    lines: list[tuple[int, bytes]], spec: InputSpec
) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | None]]:
    """Parse valid JSON object lines; halve the group until Arrow agrees on the types."""
    if not lines:
        return
    table = _arrow_parse(b"\n".join(text for _, text in lines))
    if table is not None:
        yield to_documents(table, pa.array([n for n, _ in lines], pa.int64()), spec)
    elif len(lines) == 1:
        line, text = lines[0]
        yield (
            None,
            bad_rows(spec, [Bad(line, "unparseable", "valid JSON that Arrow cannot read", text[:RAW_KEEP_BYTES])]),
        )
    else:
        middle = len(lines) // 2
        yield from _parse_lines(lines[:middle], spec)
        yield from _parse_lines(lines[middle:], spec)


def _arrow_parse(data: bytes | memoryview) -> pa.Table | None:
    try:
        return pajson.read_json(
            pa.BufferReader(data),  # reads the bytes in place
            read_options=pajson.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16)),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None


def _too_deep(text: bytes, line: int) -> Bad:
    return Bad(line, "too-deep", f"JSON nested deeper than {MAX_DEPTH} levels", text[:RAW_KEEP_BYTES])


def _check_line(text: bytes, line: int) -> Bad | None:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        return Bad(line, "invalid-utf8", str(error), text[:RAW_KEEP_BYTES])
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        return Bad(line, "broken-json", str(error), text[:RAW_KEEP_BYTES])
    if not isinstance(value, dict):
        return Bad(line, "not-an-object", f"a JSON {type(value).__name__}, not an object", text[:RAW_KEEP_BYTES])
    return None


def _row_lines(block: bytes | memoryview, first_line: int, newlines: int, rows: int) -> pa.Array:
    """Line number of each parsed row: Arrow skips blank lines, so count them out."""
    lines = newlines + (0 if block[-1:] == b"\n" else 1)
    if lines == rows:
        return pa.array(np.arange(first_line, first_line + rows, dtype=np.int64))
    data = np.frombuffer(block, dtype=np.uint8)
    newlines = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    content = np.cumsum(np.concatenate(([0], ~np.isin(data, (9, 10, 13, 32)))))
    nonblank = np.flatnonzero(content[ends] - content[starts] > 0)
    return pa.array(first_line + nonblank.astype(np.int64))
