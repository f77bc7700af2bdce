"""Compressed JSON lines: gzip, zstandard, bz2 and xz/lzma, told by their magic bytes, not
the name (a plain file named ``.zst`` is read as it is; a zstd file named ``.jsonl`` is
decompressed). Corpora ship all four: C4 and Dolma gzip, DCLM-baseline, SlimPajama, the
Pile and proof-pile-2 zstd, older dumps bz2 and xz.

Each codec streams: memory is one decompression step, whatever the file. A stream of
several members or frames (concatenated shards, zstd's seekable format) is read through
to its end. Which library inflates each:

* gzip: ISA-L (``isal``), 2-3x zlib's speed; decompression is the largest single cost of
  reading compressed shards.
* zstd: pyarrow's codec (the same libzstd its Parquet files use): no new dependency.
* bz2, xz/lzma: the standard library's decompressors (``_Streams``: its file readers
  drop what follows bytes that start no stream). pyarrow's bz2 stream read a 24 MB file
  in 2.6 s to the standard library's 1.7 s, and pyarrow has no xz stream.

A damaged stream (cut short, or corrupt) ends the file at the line where the damage is
found: ``truncated-<codec>`` or ``corrupt-<codec>``; zstd's frames are independent, so
there reading resumes at the next frame that decodes whole (``Codec.resume``), and only
the damaged frame's bytes are lost. Decompressors work in large steps
and may raise before handing over good data decoded in the same step, so ``salvage``
reads the file again, in small steps past what was read, to keep every whole line
before the damage. The codecs check their checksums only at a block's or member's end:
bytes a corrupt block decoded to before that are read as lines, and the ones that are
not JSON are quarantined line by line.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from isal import igzip, isal_zlib

from pipeline.readers.common import Span
from pipeline.readers.zstd_frames import FileRange, SpanStream, damaged_frame

# Bytes a sniff needs: the longest magic (xz's six).
SNIFF_BYTES = 6

# Decompressed bytes read at a time while salvaging past what the large steps read.
SALVAGE_STEP = 1 << 12

# Compressed bytes fed to a bz2 or xz decompressor at a time (``_Streams``).
STREAM_STEP = 1 << 16


@dataclass(frozen=True)
class Codec:
    name: str  # in the damage kinds: ``truncated-<name>``, ``corrupt-<name>``
    magics: tuple[bytes, ...]
    opener: Callable[[BinaryIO], io.BufferedIOBase]  # a decompressing stream over the raw bytes
    errors: tuple[type[BaseException], ...]  # what a damaged stream raises while being read
    step: int = 4 << 20  # decompressed bytes asked of the stream at a time (see jsonl._read_block)
    hints: tuple[tuple[str, str], ...] = ()  # (words of a library's error, what the user can do about it)
    tool: str = ""  # the command that decompresses it, for messages: "zstd -d"
    # (path, compressed offset reading started at) -> where the damage met from there starts
    # and where reading can resume after it (zstd: ``zstd_frames.damaged_frame``)
    resync: Callable[[Path, int], tuple[int, int]] | None = None

    def damage_kind(self, error: BaseException) -> str:
        """The ledger kind of a damaged stream: cut short (the data ends inside a member
        or frame), or anything else (a bad checksum, bytes that do not decode)."""
        cut_short = isinstance(error, EOFError) or "truncated" in str(error).lower()
        return f"{'truncated' if cut_short else 'corrupt'}-{self.name}"

    def damage_detail(self, error: BaseException) -> str:
        """The error, with what to do about it where its cause is one a user can act on
        (the library's own words rarely say)."""
        message = str(error)
        return next((f"{message} ({hint})" for words, hint in self.hints if words in message), message)

    def resume(self, path: Path, start: int) -> tuple[int, int, io.BufferedIOBase] | None:
        """After damage met reading from compressed offset ``start``: where the damage
        starts, where the data after it starts, and a stream of that data; None where
        nothing after the damage can be read (or the codec cannot find where)."""
        if self.resync is None:
            return None
        try:
            damaged, after = self.resync(path, start)
            if after >= os.path.getsize(path):
                return None
            raw = open(path, "rb")
        except (OSError, ValueError):  # the file gone or emptied since
            return None
        raw.seek(after)
        return damaged, after, self.opener(raw)

    def salvage(self, path: Path, skip: int, span: Span | None = None, start: int = 0) -> bytes:
        """The decompressed bytes after the first ``skip`` (of those from compressed offset
        ``start``) that can be read before the damage.

        Two passes: small steps find about where the damage is, then single bytes near
        it, since a decompressor that fails drops what it decoded in the same call
        (pyarrow's zstd stream, the last few dozen bytes of the frame before a corrupt one)."""
        rough = self._decoded(path, span, start, skip, skip, SALVAGE_STEP)
        return self._decoded(path, span, start, skip, skip + max(len(rough) - 2 * SALVAGE_STEP, 0), 1)

    def _decoded(self, path: Path, span: Span | None, start: int, skip: int, fast_until: int, step: int) -> bytes:
        """What decodes after ``skip``: in large steps up to ``fast_until``, then ``step``."""
        kept, position = [], 0
        try:
            with open(path, "rb") as raw, self._small_steps(path, raw, span, start) as stream:
                while part := stream.read1(min(fast_until - position, self.step) if position < fast_until else step):
                    if position + len(part) > skip:
                        kept.append(part[max(skip - position, 0) :])
                    position += len(part)
        except (*self.errors, OSError):  # the damage itself, or the file gone since
            pass
        return b"".join(kept)

    def _small_steps(self, path: Path, raw: BinaryIO, span: Span | None, start: int) -> io.IOBase:
        # ISA-L inflates a whole buffer before it hands anything over; the standard
        # library's reader, asked for small pieces, recovers up to the damage itself.
        if span is not None and span.frames:  # a run of zstd frames, read as its unit reads it
            return SpanStream(path, FileRange(raw, span.start, span.end), span, self.opener)
        raw.seek(start)
        return gzip.GzipFile(fileobj=raw, mode="rb") if self.name == "gzip" else self.opener(raw)


def _zstd(raw: BinaryIO) -> io.BufferedIOBase:
    return pa.CompressedInputStream(raw, "zstd")


class _Streams(io.RawIOBase):
    """Concatenated bz2 or xz streams (``factory`` makes one stream's decompressor),
    decompressed. The standard library's readers stop quietly at the first bytes after a
    stream that start none: every stream after them is dropped unreported, and xz's own
    stream padding (NUL bytes) counts as such bytes. Here NUL bytes between streams are
    passed over and anything else raises the decompressor's error, so the reader
    quarantines the rest of the file at the line where it stops."""

    def __init__(self, raw: BinaryIO, factory: Callable):
        self._raw, self._factory = raw, factory
        self._decompressor, self._input, self._done = factory(), b"", False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _read(self, size: int) -> bytes:
        while size and not self._done:  # (asked for nothing, a decompressor gives nothing forever)
            if self._decompressor.eof and not self._next_stream():
                break
            if self._decompressor.needs_input and not self._input:
                self._input = self._raw.read(STREAM_STEP)
                if not self._input:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            out = self._decompressor.decompress(self._input, size)
            self._input = b""
            if out:
                return out
        return b""

    def _next_stream(self) -> bool:
        """Past the NUL bytes after a stream to the next one's start; False at the file's end."""
        rest = self._decompressor.unused_data.lstrip(b"\0")
        while not rest:
            more = self._raw.read(STREAM_STEP)
            if not more:
                self._done = True
                return False
            rest = more.lstrip(b"\0")
        self._decompressor, self._input = self._factory(), rest
        return True


ZSTD = Codec(
    "zstd",
    # A zstd frame, or a skippable frame (0x184D2A50-5F, little-endian) before one.
    (b"\x28\xb5\x2f\xfd", *(bytes([0x50 + i, 0x2A, 0x4D, 0x18]) for i in range(16))),
    _zstd,
    (OSError,),
    hints=(
        (
            "Dictionary mismatch",
            "a frame compressed with a zstd dictionary, which the file does not carry: "
            "decompress it with its dictionary (zstd -d -D <dictionary>) and read the result",
        ),
    ),
    tool="zstd -d",
    resync=damaged_frame,
)
GZIP = Codec(
    "gzip",
    (b"\x1f\x8b",),
    lambda raw: igzip.IGzipFile(fileobj=raw, mode="rb"),
    (EOFError, OSError, zlib.error, isal_zlib.error, igzip.BadGzipFile),
    tool="gzip -d",
)
CODECS = (
    GZIP,
    ZSTD,
    Codec(
        "bz2",
        tuple(b"BZh" + bytes([c]) for c in b"123456789"),
        lambda raw: io.BufferedReader(_Streams(raw, bz2.BZ2Decompressor)),
        (EOFError, OSError, ValueError),
        tool="bzip2 -d",
    ),
    # xz, or the legacy .lzma ("alone") header with its usual properties byte.
    Codec(
        "xz",
        (b"\xfd7zXZ\x00", b"\x5d\x00\x00"),
        lambda raw: io.BufferedReader(_Streams(raw, lzma.LZMADecompressor)),
        (EOFError, lzma.LZMAError, OSError),
        tool="xz -d",
    ),
)

# The names a compressed file's suffix may have; the format is told by what comes before.
SUFFIXES = (".gz", ".gzip", ".zst", ".zstd", ".bz2", ".xz", ".lzma")


def sniff(head: bytes) -> Codec | None:
    """The codec whose magic bytes start ``head``, or None for a plain file."""
    return next((codec for codec in CODECS if head.startswith(codec.magics)), None)


def sniff_file(path: Path) -> Codec | None:
    with open(path, "rb") as f:
        return sniff(f.read(SNIFF_BYTES))


def open_stream(raw: io.RawIOBase, plain: bool = False) -> tuple[io.BufferedIOBase, Codec | None]:
    """The file's decompressed stream, and its codec (None: plain). A piece of a file
    (``plain``) is not decompressed: the only compressed pieces are runs of zstd frames."""
    buffered = io.BufferedReader(raw, buffer_size=1 << 20)
    codec = None if plain else sniff(buffered.peek(SNIFF_BYTES)[:SNIFF_BYTES])
    return (codec.opener(buffered) if codec else buffered), codec


def open_frames(path: Path, raw: io.RawIOBase, span: Span) -> tuple[io.RawIOBase, Codec]:
    """A run of whole zstd frames (``zstd_frames``): the decompressed lines it owns."""
    return SpanStream(path, raw, span, ZSTD.opener), ZSTD
