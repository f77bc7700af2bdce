"""Where WARC records are in a file, and where reading resumes after damage.

* ``.warc.gz``: gzip members, Common Crawl's one record a member (a member holding
  several records, as ``gzip file.warc`` makes, is read through too). A member starts
  where a gzip header (``1f 8b 08``, no reserved flag bits) inflates to ``WARC/``: a
  stray ``1f 8b 08`` inside compressed data almost never does. Where a member ends inside
  a record and the next member starts none (``bgzip`` and chunked writers cut members at
  fixed sizes), the next one holds the record's rest and is read on (``_Members``); each
  record is located at the member it starts in. After damage to a record's framing, the
  member's next ``WARC/1.`` line starts the next record. Bytes where the next
  member should start and none does are one ``warc-garbage`` row (or ``warc-corrupt-gzip``
  when they hold a gzip header that inflates to nothing WARC; a whole member of blank
  lines or of nothing is passed over, no damage), and a member that fails
  to inflate is one ``warc-corrupt-gzip``/``warc-truncated-gzip`` row; either way reading
  resumes at the next member start. Rows are located at the compressed byte offset of
  the member or garbage.
* ``.warc``: records framed by ``Content-Length``; after damage reading resumes at the
  next line that starts ``WARC/1.``. Rows are located at the record's byte offset.

A span of a ``.warc.gz`` (``splits``) reads the members that start in ``[start, end)``
(with the members continuing them) and the damage right after each, beginning at the first member start at or after
``start``: so every member and every damaged stretch is read by exactly one span, as
the whole file's reader reads it. (The exception would be a member whose compressed
bytes hold a whole stored gzip WARC record, a WARC archived inside a WARC: a span cut
inside it would start there.) A plain ``.warc`` is one unit.

Memory: one read block (``BLOCK``), one inflate step and the record being parsed, whose
block never holds more than ``max_doc_bytes``; what is skipped streams past.
"""

from __future__ import annotations

import bisect
import os
import re
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from isal import isal_zlib

from pipeline.readers.common import BadInput
from pipeline.readers.warc_records import FRAMING_DAMAGE, Item, records

GZIP_MAGIC = b"\x1f\x8b\x08"
RECORD_START = b"\nWARC/1."
BLOCK = 1 << 20  # raw bytes read at a time
STEP = 1 << 18  # inflated bytes asked of a member at a time
FEED = 1 << 16  # compressed bytes fed to it at a time (what it leaves over is copied)
PROBE = 1 << 12  # compressed bytes a member start is tried on
RAW_KEEP = 4096  # bytes of garbage kept in its ledger row

_BLANK = re.compile(rb"[\r\n]*")


class FileWindow:
    """Random access to a local file through one block of it: reading resumes at offsets
    behind the one read last (after damage), so the file is not read as one stream."""

    def __init__(self, file: BinaryIO):
        self._file = file
        self.size = os.fstat(file.fileno()).st_size
        self._start, self._data = 0, b""

    def read(self, offset: int, n: int) -> memoryview:
        """Up to ``n`` bytes from ``offset`` (fewer at the file's end)."""
        end = self._start + len(self._data)
        if not (self._start <= offset and (offset + n <= end or end == self.size)):
            self._file.seek(offset)
            self._start, self._data = offset, self._file.read(max(n, BLOCK))
        i = offset - self._start
        return memoryview(self._data)[i : i + n]

    def available(self, offset: int, n: int) -> memoryview:
        """Up to ``n`` bytes from ``offset``, as many as the block read holds (one read
        when it holds none): what is fed to an inflater step."""
        if not self._start <= offset < self._start + len(self._data):
            return self.read(offset, n)
        i = offset - self._start
        return memoryview(self._data)[i : i + n]

    def find(self, pattern: bytes, offset: int, stop: int | None = None) -> int:
        """The offset of the first ``pattern`` starting in ``[offset, stop)``, else -1."""
        stop = self.size if stop is None else min(stop, self.size)
        while offset < stop:
            self.read(offset, len(pattern))
            i = offset - self._start
            found = self._data.find(pattern, i, i + stop - offset + len(pattern) - 1)
            if found >= 0:
                return self._start + found
            offset = self._start + max(len(self._data) - len(pattern) + 1, i + 1)
        return -1

    def pieces(self, offset: int) -> Iterator[memoryview]:
        """The file from ``offset`` to its end, a block at a time."""
        while piece := self.read(offset, BLOCK):
            yield piece
            offset += len(piece)


class ByteStream:
    """Bytes pulled on demand from pieces (members' inflated output, or a file's blocks);
    ``offset`` counts what was consumed, from ``base``. ``truncates``: whether its end is
    the file's (plain) rather than a member's. ``locate``: the location of the bytes at an
    offset (a gzip member's start), else the offset itself. ``between_records``: set by
    the record reader while it looks for the next record, where a member may end."""

    def __init__(
        self,
        pieces: Iterator[bytes | memoryview],
        base: int = 0,
        truncates: bool = False,
        locate: Callable[[int], int] | None = None,
    ):
        self._pieces = pieces
        self._buffer, self._position = b"", 0
        self.offset = base
        self.truncates = truncates
        self._locate = locate
        self.between_records = True

    def location(self) -> int:
        """Where the next byte lies in the file, for a ledger row."""
        return self.offset if self._locate is None else self._locate(self.offset)

    def _more(self) -> bool:
        piece = next(self._pieces, None)
        if piece is None:
            return False
        self._buffer = self._buffer[self._position :] + piece
        self._position = 0
        return True

    def _consume(self, n: int) -> bytes:
        data = self._buffer[self._position : self._position + n]
        self._position += len(data)
        self.offset += len(data)
        return data

    def at_end(self) -> bool:
        while self._position >= len(self._buffer):
            if not self._more():
                return True
        return False

    def skip_blank(self) -> None:
        """Past the CR and LF bytes between records."""
        while not self.at_end():
            end = _BLANK.match(self._buffer, self._position).end()
            self.offset += end - self._position
            self._position = end
            if end < len(self._buffer):
                return

    def until(self, separator: bytes, limit: int) -> bytes | None:
        """The bytes up to and with ``separator`` if it ends within ``limit`` bytes, else None."""
        searched = 0
        while True:
            start = self._position + max(searched - len(separator) + 1, 0)
            found = self._buffer.find(separator, start, self._position + limit)
            if found >= 0:
                return self._consume(found + len(separator) - self._position)
            searched = len(self._buffer) - self._position
            if searched >= limit or not self._more():
                return None

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end), joined once."""
        parts = [self._buffer[self._position : self._position + n]]
        held = len(parts[0])
        self._position += held
        while held < n and (piece := next(self._pieces, None)) is not None:
            parts.append(piece)
            held += len(piece)
            if held > n:  # this piece goes past: keep its rest
                cut = len(piece) - (held - n)
                self._buffer, self._position = bytes(piece[cut:]), 0
                parts[-1] = piece[:cut]
        data = b"".join(parts)
        self.offset += len(data)
        return data

    def skip(self, n: int) -> int:
        """Past the next ``n`` bytes without holding them; how many there were."""
        skipped = min(n, len(self._buffer) - self._position)
        self._position += skipped
        while skipped < n and (piece := next(self._pieces, None)) is not None:
            if skipped + len(piece) > n:
                self._buffer, self._position = bytes(piece), n - skipped
                skipped = n
            else:
                skipped += len(piece)
        self.offset += skipped
        return skipped

    def skip_to(self, pattern: bytes) -> bool:
        """Past the bytes before the next ``pattern`` (kept), holding no more than a piece
        and the pattern; False, at the end, where there is none."""
        while True:
            found = self._buffer.find(pattern, self._position)
            if found >= 0:
                self._consume(found - self._position)
                return True
            self._consume(max(len(self._buffer) - len(pattern) + 1 - self._position, 0))
            if not self._more():
                return False

    def drain(self) -> None:
        for _ in self._pieces:
            pass


class _Damage(Exception):
    """A gzip member that does not inflate: (offset, kind, detail)."""


class _Members:
    """The inflated bytes (``pieces``) of the member at ``start`` and of the members that
    continue it: where a member ends inside a record (the reader is not between records)
    and the next member is gzip that starts no record, as block-compressing writers
    (``bgzip``, chunked uploads) cut members at fixed sizes, that member holds the rest.
    ``end`` is where the last one ends once read; ``member_of`` locates an inflated offset
    in the member it came from."""

    def __init__(self, window: FileWindow, start: int):
        self.window, self.start, self.end = window, start, None
        self._inflated, self._starts = [0], [start]  # each member's first inflated offset, its start
        self.stream = ByteStream(self._pieces(), locate=self.member_of)

    def member_of(self, offset: int) -> int:
        return self._starts[bisect.bisect_right(self._inflated, offset) - 1]

    def _pieces(self) -> Iterator[bytes]:
        at, inflated = self.start, 0
        while True:
            member = at
            inflate = isal_zlib.decompressobj(31)
            while not inflate.eof:
                data = self.window.available(at, FEED)
                if not len(data):
                    raise _Damage(member, "warc-truncated-gzip", "the file ends inside this gzip member")
                try:
                    out = inflate.decompress(data, STEP)
                except isal_zlib.error as error:
                    raise _Damage(member, "warc-corrupt-gzip", str(error)) from None
                at += len(data) - len(inflate.unconsumed_tail) - len(inflate.unused_data)
                inflated += len(out)
                if out:
                    yield out
            self.end = at
            if self.stream.between_records or not gzip_at(self.window, at) or member_at(self.window, at):
                return
            consumed = bisect.bisect_right(self._inflated, self.stream.offset) - 1
            del self._inflated[:consumed], self._starts[:consumed]  # behind the reader: bounded however many members
            self._inflated.append(inflated)
            self._starts.append(at)


def gzip_at(window: FileWindow, offset: int) -> bool:
    """Whether a gzip header (``1f 8b 08``, no reserved flag bits) starts at ``offset``."""
    head = window.read(offset, 10)
    return len(head) == 10 and head[:3] == GZIP_MAGIC and not head[3] & 0xE0


def member_at(window: FileWindow, offset: int) -> bool:
    """Whether a gzip member of a WARC record starts at ``offset``."""
    if not gzip_at(window, offset):
        return False
    head = window.read(offset, PROBE)
    try:  # zlib, not ISA-L: it stops inflating at the five bytes asked for
        return zlib.decompressobj(31).decompress(head, 5) == b"WARC/"
    except zlib.error:
        return False


def blank_member_end(window: FileWindow, offset: int) -> int:
    """Where the gzip member at ``offset`` ends, if it is a whole one that inflates to
    line ends alone (nothing, or the blank lines after a record); else -1. Writers leave
    such members: an empty one closing a file (or making a file of no records), the
    ``\r\n\r\n`` after a record compressed on its own. They hold no record to count."""
    if not gzip_at(window, offset):
        return -1
    head = window.read(offset, PROBE)
    inflate = zlib.decompressobj(31)
    try:
        out = inflate.decompress(head, PROBE)
    except zlib.error:
        return -1
    if not inflate.eof or not _BLANK.fullmatch(out):
        return -1
    return offset + len(head) - len(inflate.unused_data)


def next_member(window: FileWindow, offset: int, stop: int | None = None) -> int:
    """The first member start in ``[offset, stop)``, else ``stop`` (or the file's end)."""
    end = window.size if stop is None else stop
    while (found := window.find(GZIP_MAGIC, offset, end)) >= 0:
        if member_at(window, found):
            return found
        offset = found + 1
    return end


def gzip_items(window: FileWindow, start: int, end: int, cap: int) -> Iterator[tuple[int, Item]]:
    """(position reached, item) for the members starting in ``[start, end)``."""
    position = 0 if start == 0 else next_member(window, start, end)
    if position >= end:
        return  # no member starts in the span
    while position < window.size:
        if not member_at(window, position):
            if (blank := blank_member_end(window, position)) > 0:
                position = blank  # no record, and no damage either
                continue
            resume = next_member(window, position + 1)
            yield resume, _garbage(window, position, resume)
            position = resume
            continue
        if position >= end:
            return
        chain = _Members(window, position)
        damaged = False
        try:
            while True:  # after damage inside a member, its next record is read (``RECORD_START``)
                for item in records(chain.stream, cap):
                    damaged = isinstance(item, BadInput) and item.kind in FRAMING_DAMAGE
                    yield chain.stream.location(), item
                if not damaged or not chain.stream.skip_to(RECORD_START):
                    break
                chain.stream.take(1)  # the line end before ``WARC/1.``
                damaged = False
            chain.stream.drain()
            position = chain.end
        except _Damage as damage:
            if not damaged:
                yield position, BadInput(*damage.args, None)
            position = next_member(window, damage.args[0] + 1)


def _garbage(window: FileWindow, start: int, end: int) -> BadInput:
    """The row for bytes where a member should start and none does."""
    if window.read(start, len(GZIP_MAGIC)) == GZIP_MAGIC:
        kind, what = "warc-corrupt-gzip", "of a gzip member that inflates to no WARC record"
    else:
        kind, what = "warc-garbage", "that are no gzip member"
    raw = bytes(window.read(start, min(end - start, RAW_KEEP)))
    return BadInput(start, kind, f"{end - start} bytes {what}, up to the next member", raw)


def plain_items(window: FileWindow, cap: int) -> Iterator[tuple[int, Item]]:
    """(position reached, item) for the records of an uncompressed file."""
    position = 0
    while position < window.size:
        stream = ByteStream(window.pieces(position), position, truncates=True)
        item = None
        for item in records(stream, cap):
            yield stream.offset, item
        if not (isinstance(item, BadInput) and item.kind in FRAMING_DAMAGE):
            return  # records read to the file's end
        found = window.find(RECORD_START, item.line)
        position = window.size if found < 0 else found + 1
