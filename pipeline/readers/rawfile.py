"""Opening an input file for streaming: checksum of the raw bytes as they are read, and
transparent gzip (several members allowed, as in concatenated shards).

Gzip goes through ISA-L (the ``isal`` package), which inflates 2-3x faster than zlib;
decompression is the largest single cost of reading compressed shards.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from pathlib import Path

from isal import igzip, isal_zlib

# What a damaged gzip stream raises while being read.
GZIP_ERRORS = (EOFError, OSError, zlib.error, isal_zlib.error, igzip.BadGzipFile)


class HashingReader(io.RawIOBase):
    """Wraps a binary file; hashes and counts every byte read through it.

    With ``span``, only the bytes ``[start, end)`` are read (a piece of a file read as a
    unit of its own); a piece that does not start the file is not hashed, since only the
    whole file's checksum means anything."""

    def __init__(self, path: Path, span: tuple[int, int] | None = None):
        self._file = open(path, "rb")
        self.sha256 = hashlib.sha256() if span is None or span[0] == 0 else None
        self.bytes_read = 0
        self._left = None
        if span is not None:
            self._file.seek(span[0])
            self._left = span[1] - span[0]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left is not None:
            buffer = memoryview(buffer)[: self._left]
        n = self._file.readinto(buffer)
        if n:
            if self.sha256 is not None:
                self.sha256.update(memoryview(buffer)[:n])
            self.bytes_read += n
            if self._left is not None:
                self._left -= n
        return n

    def drain(self) -> None:
        """Read to the end (after a decoding error, or the end of the first piece) so the
        checksum covers the whole file; only a whole file's reader counts those bytes read."""
        while chunk := self._file.read(1 << 20):
            self.sha256.update(chunk)
            if self._left is None:
                self.bytes_read += len(chunk)

    def facts(self) -> dict:
        """Size and sha256 of the whole raw file, for the manifest (read to the end
        first); empty when the rest of it cannot be read, or for a piece that does not
        start the file."""
        if self.sha256 is None:
            return {}
        try:
            self.drain()
        except OSError:
            return {}
        return {"sha256": self.sha256.hexdigest(), "bytes": self._file.tell()}

    def close(self) -> None:
        self._file.close()
        super().close()


GZIP_MAGIC = b"\x1f\x8b"


def open_stream(raw: HashingReader, plain: bool = False) -> tuple[io.BufferedIOBase, bool]:
    """The file's decompressed stream, and whether it is gzip. Gzip is told by its magic
    bytes, not the name: a plain file named ``.gz`` is read as it is (and garbage named
    ``.gz`` is quarantined line by line like any other garbage). A piece of a file
    (``plain``) is never gzip: gzip files are not cut."""
    buffered = io.BufferedReader(raw, buffer_size=1 << 20)
    gzipped = not plain and buffered.peek(2)[:2] == GZIP_MAGIC
    return (igzip.IGzipFile(fileobj=buffered, mode="rb") if gzipped else buffered), gzipped


def salvage_gzip(path: Path, skip: int) -> bytes:
    """The decompressed bytes after the first ``skip`` that can be read before the damage.

    ISA-L inflates in large steps and may raise before handing over good data decoded in
    the same step (a whole good member before a corrupt one). On that rare path the
    standard library's reader, asked for small pieces, recovers everything up to the
    damage itself.
    """
    kept, position = [], 0
    try:
        with gzip.open(path, "rb") as f:
            while part := f.read1(1 << 12):
                if position + len(part) > skip:
                    kept.append(part[max(skip - position, 0) :])
                position += len(part)
    except GZIP_ERRORS:  # the damage itself, or the file gone since
        pass
    return b"".join(kept)
