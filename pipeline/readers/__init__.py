"""Readers turn one input file into a stream of ``Chunk``s: Arrow document batches plus
ledger rows for input that could not be read (quarantined, never silently dropped).

``read_input(path, spec)`` picks the reader from the file name (or ``format`` in the
source's config): JSON lines (``.jsonl``, ``.json``, ``.ndjson``, C4's ``.json.gz``, any
of them compressed with gzip, zstd, bz2 or xz), Parquet, Hugging Face ``datasets`` Arrow files (``save_to_disk``),
RedPajama-V2's documents joined with their signals, duplicate ids and MinHash bands (``redpajama_v2``),
and WARC and WET files (``.warc``, ``.warc.gz``, ``.warc.wet.gz``: ``warc``), whose damage is
located at its byte offset and whose records that are no document are counted, not
quarantined (the last chunk's ``extra["skipped"]``).

Nothing a reader yields is unsafe downstream: every string it yields is valid UTF-8, and
no JSON line nested deeper than ``nesting.MAX_DEPTH`` reaches a parser. What cannot be
read becomes ledger rows (``bad-input:<kind>``, file, line or row, and the raw bytes
where there are any); a reader never raises on bad input, except in ``--strict`` mode
(``StrictModeError`` at the first one, naming file and line).

Accounting: each ledger row counts as one input document, rejected, so input = output +
rejected holds for every file. A record (line or row) that cannot be read is one row. A
file that cannot be read at all (missing, permission denied, a 0-byte or garbage Parquet
or Arrow file) yields no documents and counts as one rejected document: its
``unreadable-file`` row, at location 0. (An empty JSON lines file is readable and holds
no records.) A file that fails part-way counts the records read before the failure
(kept, or rejected one by one) plus one row for the unreadable rest, at the line or row
where reading stopped: ``unreadable-file``, or ``truncated-<codec>``/``corrupt-<codec>`` (``codecs``). A
damaged Parquet row group or Arrow record batch is one ``unreadable-row`` per row it holds,
and reading goes on (``batches``); a file whose schema no document can be made of (column
names that repeat, ...) is one ``unreadable-file`` row at location 0. The
last chunk's ``extra`` holds the file's ``bytes`` and ``sha256`` whenever the file can
be read as bytes at all, so the manifest records it.

A large file may be read in pieces (``spec.span``; where files are cut is ``splits``):
each piece yields exactly the chunks the whole file's reader yields for its lines or
rows, and only the piece at the file's start reports the file's ``bytes`` and ``sha256``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pipeline.readers import codecs
from pipeline.readers.arrow_files import read_arrow_file
from pipeline.readers.common import Chunk, InputSpec
from pipeline.readers.jsonl import read_jsonl
from pipeline.readers.parquet import read_parquet
from pipeline.readers.redpajama_v2 import read_redpajama_v2
from pipeline.readers.warc import read_warc
from pipeline.sidefiles import format_from_name

# "redpajama-v2" is never told from a name (its documents are C4-like .json.gz): it is asked for.
FORMATS = ("jsonl", "parquet", "arrow", "redpajama-v2", "warc")

__all__ = ["Chunk", "InputSpec", "FORMATS", "detect_format", "read_input"]


def detect_format(path: Path | str) -> str:
    """The format the file name says, any of ``codecs``' compressions taken off first (the
    name rule is the one side files are told by: ``pipeline/sidefiles.py``)."""
    fmt = format_from_name(path, codecs.SUFFIXES)
    if fmt is None:
        raise ValueError(f"{path}: cannot tell the format from the file name; set format = one of {', '.join(FORMATS)}")
    return fmt


def read_input(path: Path, spec: InputSpec, fmt: str = "auto") -> Iterator[Chunk]:
    """Stream ``path`` as chunks; memory is bounded by ``spec.block_bytes``, not by the file."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "jsonl":
        return read_jsonl(path, spec)
    if fmt == "parquet":
        return read_parquet(path, spec)
    if fmt == "arrow":
        return read_arrow_file(path, spec)
    if fmt == "redpajama-v2":
        return read_redpajama_v2(path, spec)
    if fmt == "warc":
        return read_warc(path, spec)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
