"""JSON lines, plain or compressed (C4's ``.json.gz``, DCLM's ``.jsonl.zst``: ``codecs``).

**A line** ends at ``\n`` (LF) and nowhere else, as in the JSON Lines format: ``\r\n``
ends one too (the ``\r`` is JSON whitespace), and a line of only whitespace (space,
tab, ``\r``) is blank and holds no document. A document is one JSON object (RFC 8259)
alone on its line. A lone ``\r`` is not a line end, nor are form feed, NEL (U+0085) or
U+2028/U+2029 (fine inside a string, broken JSON outside one): a line that holds two
objects parted by one (every line of a file with ``\r`` line ends) is one broken line,
quarantined at its number. So is an object spread over lines, and ``NaN``/``Infinity``,
which are not JSON. A UTF-8 byte-order mark at the file's start is skipped.

The fast path hands a few MB of whole lines at a time to Arrow's native JSON parser,
once two native scans of the raw block (on the prefetch thread) found nothing Arrow
mishandles: invalid UTF-8, which it accepts and passes on into string columns (and
column names), and what ``nesting`` finds (nesting deeper than ``MAX_DEPTH``, more
fields than a parse can hold, and lines Arrow reads more leniently than JSON: several
objects on a line would give it more rows than the block has lines). Only a block that
fails a scan or the parse is looked at line by line (with orjson) to quarantine the bad
lines; the good ones are parsed natively again, and rows that still disagree on types
are split in halves until each group parses, so one odd line never costs the file. Both
paths keep and reject the same lines, and give each line the same id: the input's id
exactly as written (``raw_ids``), whatever Arrow inferred for its block.
A line longer than ``max_doc_bytes`` is skipped while streaming, never held in memory.
A damaged compressed stream is one row at the line where it broke; a whole zstd file reads
on at the next frame that decodes (``Codec.resume``; a piece of a file, planned only for a
file that decoded whole, stops at damage found since: the next piece reads on). How many
lines the damaged bytes held is unknown, so no line after them has a number in the whole
file, and no tool reaches it by one (``zstd -d`` stops at the damage): a line after them
is located by the compressed offset reading resumed at and its number from there,
``<file>@<offset>:<line>`` (``tail -c +<offset + 1> FILE | zstd -d`` shows those lines).
That is the ``_file`` of its documents and ledger rows, so their ``file:line`` says it,
and the id of a document that has none of its own; before any damage, nothing changes.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.json as pajson

from pipeline.readers.arrow_json import is_valid_utf8, printed_exactly, row_lines
from pipeline.readers.codecs import Codec, open_frames, open_stream
from pipeline.readers.common import BadInput as Bad
from pipeline.readers.common import (
    Chunk,
    InputSpec,
    bad_rows,
    file_facts,
    to_documents,
    unreadable,
    without_empty_structs,
)
from pipeline.readers.line_checks import JSON_WHITESPACE, RAW_KEEP_BYTES, UTF8_BOM, check_line, unparsed
from pipeline.readers.nesting import Scan, scan_lines
from pipeline.readers.prefetch import prefetch
from pipeline.readers.raw_ids import raw_values
from pipeline.readers.rawfile import HashingReader

# Bytes asked of a plain file at a time (see _read_block).
PLAIN_STEP = 1 << 16


class _Resumed(NamedTuple):
    """Reading resumed after damage: the lines that follow are located in ``where``
    (``<file>@<compressed offset>``), numbered from 1."""

    where: str


class _Block(NamedTuple):
    """Whole lines of input, with what the scans found in them."""

    data: bytes | memoryview  # a view of the bytes read, so that cutting a block copies nothing
    first_line: int  # number of its first line
    valid_utf8: bool
    scan: Scan  # what nesting's scan found (its lines are 0-based in the block)

    @property
    def clean(self) -> bool:
        """Safe to hand to Arrow group by group."""
        return self.valid_utf8 and not len(self.scan.flagged) and not self.scan.odd_lines


def read_jsonl(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    """The file's documents, or (``spec.span``) those of the lines in a byte range."""
    try:
        raw, stream, codec = _open(path, spec)
    except OSError as error:  # gone since the run was planned, or not ours to read
        location = 0 if spec.reports_file else spec.span.first_line
        yield Chunk(bad=unreadable(spec, location, error), extra=file_facts(path) if spec.reports_file else {})
        return
    reported, blocks = 0, _line_blocks(stream, codec, spec, path)
    size = os.path.getsize(path) if spec.span is None else spec.span.end - spec.span.start
    where = None  # after damage, where the lines are (``_Resumed``)
    try:
        for item in blocks if not codec and size <= spec.block_bytes else prefetch(blocks):  # 1 block: no overlap
            if isinstance(item, _Resumed):
                where = item.where
            elif isinstance(item, Bad):  # a quarantined region
                yield Chunk(bad=bad_rows(spec, [item], files=_where(where, 1)), bytes_read=raw.bytes_read - reported)
            else:
                for docs, bad in _parse_block(item, spec, where):
                    yield Chunk(docs=docs, bad=bad, bytes_read=raw.bytes_read - reported)
                    reported = raw.bytes_read
            reported = raw.bytes_read
        yield Chunk(bytes_read=raw.bytes_read - reported, extra=raw.facts())
    finally:
        stream.close()
        raw.close()


def _open(path: Path, spec: InputSpec) -> tuple[HashingReader, io.BufferedIOBase, Codec | None]:
    span = spec.span
    raw = HashingReader(path, None if span is None else span[:2])
    try:
        if span is not None and span.frames:
            return raw, *open_frames(path, raw, span)
        return (raw, *open_stream(raw, plain=span is not None))
    except BaseException:
        raw.close()
        raise


def _line_blocks(
    stream: io.BufferedIOBase, codec: Codec | None, spec: InputSpec, path: Path
) -> Iterator[_Block | Bad | _Resumed]:
    """Yield blocks of whole lines, scanned, or quarantine entries, and after damage read
    past, where the lines that follow are (``_Resumed``). This runs on the
    prefetch thread, while the caller parses the previous block: the decompression and
    the scans (native code that releases the GIL) overlap the parse.

    A block ends at the first line start at or after a multiple of ``block_bytes`` (of
    the file's decompressed offsets), so where blocks fall depends on the file alone: a
    piece of the file cut at such a line start (``splits``) is read in exactly the blocks
    the whole file is, and its documents come out in the same batches."""
    size = spec.block_bytes
    offset = 0 if spec.span is None else spec.span.line_offset  # (decompressed) file offset of ``pending``
    pending = b""  # bytes read and not yet passed on
    line = 1 if spec.span is None else spec.span.first_line  # number of the first line in ``pending``
    skipping = False  # inside a line longer than max_doc_bytes
    skipped = 0
    decoded = 0  # decompressed bytes read so far (of ``stream``)
    stream_start = 0  # compressed offset ``stream`` reads from: after damage, a stream of what follows it
    opened: list[io.BufferedIOBase] = []  # those streams
    at_start = offset == 0  # where a byte-order mark may be
    try:
        while True:
            to_target = (offset // size + 1) * size - offset - len(pending)  # the block ends at a line start past it
            try:
                parts = _read_block(stream, max(to_target, len(pending), PLAIN_STEP), codec)
            except _DecodeError as failure:
                error, salvaged = failure.args
                if not skipping:
                    salvaged = codec.salvage(path, decoded, spec.span, stream_start) if codec else salvaged
                if salvaged and not skipping:  # whole lines decoded before the damage are still documents
                    data = pending + salvaged
                    cut = data.rfind(b"\n")
                    if cut >= 0:
                        line = yield from _scanned_blocks(data[: cut + 1], line, spec)
                        pending = data[cut + 1 :]
                    else:
                        pending = data
                kind = codec.damage_kind(error) if codec else "unreadable-file"  # else an I/O error
                why = codec.damage_detail(error) if codec else str(error)
                resumed = codec.resume(path, stream_start) if codec and spec.span is None else None
                if resumed is None:
                    detail = f"{why}; the rest of the file from this line on is unreadable"
                    yield Bad(line, kind, detail, pending[:RAW_KEEP_BYTES] or None)
                    return
                damaged, stream_start, stream = resumed
                opened.append(stream)
                detail = (
                    f"{why}; compressed bytes {damaged}-{stream_start} skipped, reading resumed after them; "
                    f"later lines are located as @{stream_start}:<line>, counted from there"
                )
                yield Bad(line, kind, detail, pending[:RAW_KEEP_BYTES] or None)
                yield _Resumed(f"{spec.file_key}@{stream_start}")
                # What the damaged bytes held is unknown: the data after them starts a line, the first from there.
                offset, pending, line, skipping, decoded = offset + len(pending), b"", 1, False, 0
                at_start = False
                continue
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
            if at_start and data.startswith(UTF8_BOM):
                data, offset = data[len(UTF8_BOM) :], len(UTF8_BOM)
            at_start = False
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
    finally:
        for resumed_stream in opened:
            resumed_stream.close()


class _DecodeError(Exception):
    """A read or decompression error, with the bytes decoded before it in the same block."""


def _read_block(stream: io.BufferedIOBase, size: int, codec: Codec | None) -> list[bytes]:
    """About ``size`` decompressed bytes, in pieces (joined once by the caller).

    A plain file is read in small steps, so that an I/O error loses only what follows it.
    A compressed one in large ones (``codec.step``): ISA-L takes the GIL back after every
    call, and small steps made it queue behind the parse and the writer for it (a 64 KB
    step inflated at a third of its speed beside a busy thread). A damaged stream loses
    nothing to the large step either: ``codec.salvage`` recovers the data before the damage."""
    step, errors = (codec.step, codec.errors) if codec else (PLAIN_STEP, (OSError,))
    parts, total = [], 0
    while total < size:
        try:
            part = stream.read1(min(size - total, step))
        except errors as error:
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
        return first_line + scanned.scan.newlines
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
    return _Block(data, first_line, is_valid_utf8(data), scan_lines(data))


def _where(where: str | None, n: int) -> list[str] | None:
    """Each of ``n`` rows' file, where the lines are located after damage (None: the file's)."""
    return None if where is None else [where] * n


def _parse_block(
    block: _Block, spec: InputSpec, where: str | None = None
) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | None]]:
    """The block's documents and ledger rows; ``where``: the location of its lines after
    damage (``_Resumed``)."""
    if block.clean:
        documents = _parse_groups(block, spec, where)
        if documents is not None:
            yield from documents
            return
    # Slow path: find the bad lines, then parse the good ones natively.
    kinds = dict(zip(block.scan.flagged.tolist(), block.scan.kinds.tolist()))  # lines the scan quarantines
    good: list[tuple[int, bytes]] = []
    bad: list[Bad] = []
    for offset, text in enumerate(bytes(block.data).split(b"\n")):
        if not text.strip(JSON_WHITESPACE):
            continue
        line = block.first_line + offset
        entry = unparsed(text, line, kinds[offset]) if offset in kinds else check_line(text, line)
        if entry is None:
            good.append((line, text))
        else:
            bad.append(entry)
    if bad:
        yield None, bad_rows(spec, bad, files=_where(where, len(bad)))
    yield from _parse_lines(good, spec, where)


def _parse_groups(block: _Block, spec: InputSpec, where: str | None) -> list | None:
    """The documents of a clean block, parsed natively a group of lines at a time (see
    ``nesting``); None when Arrow reads it otherwise than line by line, one row a line
    (the slow path then takes the block: a disagreement never aborts)."""
    view, scan = memoryview(block.data), block.scan
    ends = [*scan.groups[1:].tolist(), [len(view), scan.newlines]]
    documents = []
    for (start, line), (end, next_line) in zip(scan.groups.tolist(), ends):
        data = view[start:end]
        table, _ = _arrow_parse(data)
        lines = None if table is None else row_lines(data, block.first_line + line, next_line - line, table.num_rows)
        if lines is None:
            return None
        documents.append(_documents(table, data, lines, spec, _files(where, len(lines))))
    return documents


def _parse_lines(
    lines: list[tuple[int, bytes]], spec: InputSpec, where: str | None
) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | None]]:
    """Parse valid JSON object lines, in the groups the field bounds allow."""
    if not lines:
        return
    cuts = scan_lines(b"\n".join(text for _, text in lines)).groups[:, 1].tolist() + [len(lines)]
    for start, end in zip(cuts, cuts[1:]):
        yield from _parse_halves(lines[start:end], spec, where)


def _parse_halves(
    lines: list[tuple[int, bytes]], spec: InputSpec, where: str | None
) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch | None]]:
    """Parse the lines; halve the group until Arrow agrees on the types (and reads one
    row a line: it must, each being one object, but a disagreement costs one line at most)."""
    data = b"\n".join(text for _, text in lines)
    table, error = _arrow_parse(data)
    if table is not None and table.num_rows == len(lines):
        yield _documents(table, data, pa.array([n for n, _ in lines], pa.int64()), spec, _files(where, len(lines)))
    elif len(lines) == 1:
        line, text = lines[0]
        detail = f"valid JSON that Arrow cannot read: {error or f'{table.num_rows} rows'}"
        yield None, bad_rows(spec, [Bad(line, "unparseable", detail, text[:RAW_KEEP_BYTES])], files=_where(where, 1))
    else:
        middle = len(lines) // 2
        yield from _parse_halves(lines[:middle], spec, where)
        yield from _parse_halves(lines[middle:], spec, where)


def _files(where: str | None, n: int) -> pa.Array | None:
    """``_where`` as the column ``to_documents`` takes."""
    return None if where is None else pa.array(_where(where, n), pa.string())


def _documents(
    table: pa.Table, data: bytes | memoryview, lines: pa.Array, spec: InputSpec, files: pa.Array | None = None
) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
    """``to_documents``, with each id as its line writes it: Arrow's type for the id
    column depends on the block (a double for 1500000000000000001 beside 2.5, a
    timestamp for "2020-01-01"), the raw bytes do not. A string column is exact as it is,
    and a nested one is no id (``to_documents`` keeps it as a field)."""
    field = spec.id_field
    if field in table.column_names and not printed_exactly(table.column(field)):
        column = table.column_names.index(field)
        table = table.set_column(column, field, raw_values(data, field, table.num_rows))
    return to_documents(without_empty_structs(table, spec.text_field), lines, spec, files)


def _arrow_parse(data: bytes | memoryview) -> tuple[pa.Table | None, str]:
    """The table Arrow reads, or None and why not (one block of ``data``'s size: a 64 KB one cost 0.5 ms)."""
    try:
        table = pajson.read_json(
            pa.BufferReader(data),  # reads the bytes in place
            read_options=pajson.ReadOptions(use_threads=False, block_size=len(data) + 1),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as error:
        return None, str(error)
    return table, ""
