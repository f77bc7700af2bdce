"""Reading an input file's raw bytes for streaming, with the checksum of the bytes as
they are read (decompression is ``codecs``)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path


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
