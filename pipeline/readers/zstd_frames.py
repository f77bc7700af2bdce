"""Cutting a zstd file of several frames into units, and reading one unit.

zstd frames are independent: each decompresses without the ones before it, so a file
of many frames (zstd's seekable format, ``zstd --block-size``-style writers, shards
concatenated with ``cat``) can be read in pieces. A piece (``Span``) is a run of whole
frames, ``[start, end)`` in compressed bytes. JSON lines do not stop at frame ends, so
pieces own lines as plain pieces do, in decompressed terms: a line belongs to the piece
where it starts. A piece skips the end of the line the piece before it owns (``skip``
bytes) and reads on into the next frames to finish its own last line.

Where the frames are comes from their headers alone: a frame header, then block headers
(3 bytes each, giving the block's stored size) skipped over without decompressing, then
the optional checksum; skippable frames (magic ``0x184D2A5?``) give their size. The
seekable format's seek table (a skippable frame at the end) lists every frame's size
and is read instead when present. Numbering lines (ids and ledger locations stay
``file:line`` of the whole file) takes decompressing each piece once at plan time and
counting its newlines: about a fifth of the reader's own CPU per byte, on the planner.
"""

from __future__ import annotations

import io
import mmap
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.readers.common import Span

FRAME_MAGIC = 0xFD2FB528
SKIPPABLE_MAGIC, SKIPPABLE_MASK = 0x184D2A50, 0xFFFFFFF0
SEEKABLE_MAGIC = 0x8F92EAB1  # ends the seekable format's seek table

# Decompressed bytes counted at a time at plan time.
COUNT_STEP = 16 << 20


def frame_starts(path: Path) -> list[int]:
    """The compressed offset of each frame (skippable ones included), then the file's
    size; empty when the file is not a sequence of whole zstd frames (the reader then
    reads it whole and quarantines where it breaks)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        return _seek_table(f, size) or _walked(f, size)


def _seek_table(f: io.BufferedReader, size: int) -> list[int]:
    """The frames the seekable format's seek table lists, if it ends the file and its
    sizes add up to the file's; else empty."""
    if size < 17:
        return []
    f.seek(size - 9)
    footer = f.read(9)
    frames, descriptor = int.from_bytes(footer[:4], "little"), footer[4]
    if int.from_bytes(footer[5:], "little") != SEEKABLE_MAGIC:
        return []
    entry = 12 if descriptor & 0x80 else 8
    table = 8 + frames * entry + 9  # its skippable frame's header, entries, footer
    if table > size:
        return []
    f.seek(size - table + 8)
    entries = np.frombuffer(f.read(frames * entry), dtype="<u4").reshape(frames, entry // 4)
    starts = np.concatenate(([0], np.cumsum(entries[:, 0], dtype=np.int64))).tolist()
    return [*starts, size] if starts[-1] == size - table else []


def _walked(f: io.BufferedReader, size: int) -> list[int]:
    """Frame offsets found by walking the headers."""
    starts, at = [], 0
    while at < size:
        starts.append(at)
        f.seek(at)
        head = f.read(14)  # the longest frame header, with its magic
        magic = int.from_bytes(head[:4], "little")
        if len(head) >= 8 and magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
            at += 8 + int.from_bytes(head[4:8], "little")
        elif len(head) >= 6 and magic == FRAME_MAGIC:
            at = _frame_end(f, at, head[4])
            if at < 0:
                return []
        else:
            return []
    return [*starts, size] if at == size else []


def _frame_end(f: io.BufferedReader, at: int, descriptor: int) -> int:
    """Where the frame at ``at`` ends, from its header (descriptor byte ``descriptor``)
    and its blocks' headers; -1 where they do not hold together."""
    single_segment = descriptor >> 5 & 1
    content_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    header = 4 + 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3] + content_size
    at += header
    while True:
        f.seek(at)
        block = f.read(3)
        if len(block) < 3:
            return -1
        word = int.from_bytes(block, "little")
        kind, stored = word >> 1 & 3, word >> 3
        if kind == 3:  # reserved: not zstd
            return -1
        at += 3 + (1 if kind == 1 else stored)  # an RLE block stores one byte
        if word & 1:  # the last block
            return at + (4 if descriptor & 4 else 0)  # the content checksum


def damaged_frame(path: Path, start: int) -> tuple[int, int]:
    """Where reading from ``start`` (a frame start) meets damage: the compressed offset
    of the first frame from there that does not decode whole (or of bytes that start no
    frame), and that of the next frame that does, where reading resumes (the file's size
    when none does). Candidates are found by their magic number (``28 B5 2F FD``), which
    compressed bytes may hold by chance: one that does not decode whole is passed over.
    Each frame is decoded to be sure of it, so finding the damage costs a pass over the
    frames before it, as salvaging the lines before it does."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = start
        while at < len(data) and (end := _whole_frame_end(f, data, at)) > 0:
            at = end
        damaged, resume = at, at
        while 0 <= resume < len(data):
            resume = data.find(FRAME_MAGIC.to_bytes(4, "little"), resume + 1)
            if resume >= 0 and _whole_frame_end(f, data, resume) > 0:
                return damaged, resume
        return damaged, len(data)


def _whole_frame_end(f: io.BufferedReader, data: mmap.mmap, at: int) -> int:
    """Where the frame (or skippable frame) at ``at`` ends, if it is whole and decodes; else -1."""
    magic = int.from_bytes(data[at : at + 4], "little")
    if magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC and at + 8 <= len(data):
        end = at + 8 + int.from_bytes(data[at + 4 : at + 8], "little")
        return end if end <= len(data) else -1
    if magic != FRAME_MAGIC or at + 6 > len(data):
        return -1
    end = _frame_end(f, at, data[at + 4])
    if not at < end <= len(data):
        return -1
    try:
        with pa.CompressedInputStream(FileRange(f, at, end), "zstd") as stream:
            while stream.read1(COUNT_STEP):
                pass
    except OSError:  # pyarrow's zstd errors
        return -1
    return end


def frame_spans(path: Path, step: int, block_bytes: int) -> list[Span]:
    """Pieces of a zstd file, each a run of whole frames starting at the first frame
    start at or after a multiple of ``step`` (compressed bytes); empty for one piece.

    A piece owns the lines from the first place at or after its first frame's start
    where the whole file's reader ends a block (``jsonl``: the first line start at or
    after a multiple of ``block_bytes``) to the same place after its last frame, so it
    is read in the very blocks, and batches, the whole file is. A run whose frames hold
    no such place (a long line over several frames) joins the run before it."""
    starts = frame_starts(path)
    cuts = [0]
    for start in starts[1:-1]:
        if start >= (cuts[-1] // step + 1) * step:
            cuts.append(start)
    if len(cuts) < 2:
        return []
    spans: list[Span] = []
    position = newlines = 0  # decompressed offset of the run; the newlines before it
    last_start, starts_line = 0, True  # the last line start before ``position``; whether one is at it
    for start, end in zip(cuts, [*cuts[1:], starts[-1]]):
        target = (last_start // block_bytes + 1) * block_bytes  # the piece starts at the first line start past it
        found, line = (position, newlines + 1) if starts_line and position >= target else (-1, 0)
        run_start = position
        with open(path, "rb") as f, pa.CompressedInputStream(FileRange(f, start, end), "zstd") as stream:
            while part := stream.read1(COUNT_STEP):
                ends = np.flatnonzero(np.frombuffer(part, dtype=np.uint8) == 10)
                if found < 0 and len(after := np.flatnonzero(ends >= target - 1 - position)):
                    found, line = position + int(ends[after[0]]) + 1, newlines + int(after[0]) + 2
                inner = ends[ends < len(part) - 1]  # newlines whose line starts inside the part
                last_start = position + int(inner[-1]) + 1 if len(inner) else position if starts_line else last_start
                starts_line = bool(len(ends)) and int(ends[-1]) == len(part) - 1
                position, newlines = position + len(part), newlines + len(ends)
        if not spans:
            spans.append(Span(0, end, 1, 0))
        elif 0 <= found < position:
            skip = found - run_start
            spans[-1] = spans[-1]._replace(tail=skip)
            spans.append(Span(start, end, line, run_start, skip))
        else:  # none of its lines starts a block: the piece before reads them
            spans[-1] = spans[-1]._replace(end=end)
    return spans if len(spans) > 1 else []


class FileRange(io.RawIOBase):
    """Bytes ``[start, end)`` of an open file."""

    def __init__(self, f, start: int, end: int):
        self._file, self._left = f, end - start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._file.readinto(memoryview(buffer)[: self._left])
        self._left -= n
        return n


class SpanStream(io.RawIOBase):
    """The decompressed bytes a piece of whole frames owns: those of its own frames
    (read through ``raw``, which ends at the piece's end) after the first ``span.skip``,
    then the first ``span.tail`` of the frames after it."""

    def __init__(self, path: Path, raw: io.RawIOBase, span: Span, opener):
        self._path, self._opener, self._end = path, opener, span.end
        self._own = opener(io.BufferedReader(raw, buffer_size=1 << 20))
        self._skip, self._tail_left = span.skip, span.tail
        self._tail = self._tail_file = None

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        while self._skip and (part := self._own.read1(min(self._skip, COUNT_STEP))):
            self._skip -= len(part)
        if part := self._own.read1(size):
            return part
        if not self._tail_left:
            return b""
        if self._tail is None:
            self._tail_file = open(self._path, "rb")
            self._tail_file.seek(self._end)
            self._tail = self._opener(io.BufferedReader(self._tail_file, buffer_size=1 << 20))
        part = self._tail.read1(min(size, self._tail_left) if size >= 0 else self._tail_left)
        self._tail_left = self._tail_left - len(part) if part else 0
        return part

    def readinto(self, buffer) -> int:
        part = self.read1(len(buffer))
        buffer[: len(part)] = part
        return len(part)

    def close(self) -> None:
        for stream in (self._own, self._tail, self._tail_file):
            if stream is not None:
                stream.close()
        super().close()
