"""The small JSON-lines files of a pack, parsed together: Arrow's JSON parser started once
for many files instead of once a file.

Why: over one-document files, starting Arrow's parser was 42% of a run's CPU (0.165 ms a
file; parsed as one block, 0.017) and turning each file's one-row table into documents
17% (0.34 ms). Each file is still read and checked on its own (its own size and sha256,
read inside the version checks of ``unit_inputs``); only the scans and the parse wait. A
clean file (one block, one parse group, nothing the scans flag) waits until about
``block_bytes`` of them wait, or until a file that is not clean comes, so documents and
ledger rows keep the files' order. Each row names its file (``_file``) and line as when
read file by file. What may differ is what any larger block gives: Arrow infers one type
per field over the block, as over a large file's block, so a field written as an integer
in one file and a float in the next is a float in both. Where the joined block is not
one clean group, or Arrow's rows are not one a line (a blank line, say), each waiting
file is parsed on its own, as ``read_jsonl`` would.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats.documents import FILE
from pipeline.readers.codecs import SNIFF_BYTES, sniff
from pipeline.readers.common import BadInput, InputSpec, bad_rows
from pipeline.readers.jsonl import (
    PLAIN_STEP,
    _arrow_parse,
    _Block,
    _documents,
    _line_blocks,
    _open,
    _parse_block,
    _scanned,
)
from pipeline.readers.line_checks import UTF8_BOM

Parsed = tuple[pa.RecordBatch | None, pa.RecordBatch | None]  # documents, ledger rows


def scanned_file(path: Path, spec: InputSpec) -> tuple[list[_Block | BadInput], int, dict] | None:
    """A whole file's block of lines, scanned, not parsed (or what it holds instead: a
    quarantine entry; nothing, for an empty file), the bytes it read and the file's facts
    (size, sha256). None where the file holds more than that, which is then read
    streaming: a small compressed file may inflate to any size. Raises OSError where the
    file cannot be read."""
    raw, stream, codec = _open(path, spec)
    try:
        items = list(itertools.islice(_line_blocks(stream, codec, spec, path), 2))
        return (items, raw.bytes_read, raw.facts()) if len(items) < 2 else None
    finally:
        stream.close()
        raw.close()


def whole_file(path: str, size: int, limit: int) -> bytes | None:
    """A small plain file's bytes, read in one pass: an open, a read of its ``size`` (as
    planned) and a byte more, a read that finds its end; no stream and no buffer between.
    None where it is compressed or holds more than ``limit`` bytes: its own streaming read
    (``scanned_file``, ``read_jsonl``) takes it. Raises OSError where it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = [os.read(fd, min(size, limit) + 1)]
        if sniff(parts[0][:SNIFF_BYTES]) is not None:
            return None
        total = len(parts[0])
        while total <= limit and (more := os.read(fd, min(PLAIN_STEP, limit + 1 - total))):
            parts.append(more)  # more than its stat said (a file of /proc): read on to its end
            total += len(more)
    finally:
        os.close(fd)
    return (parts[0] if len(parts) == 1 else b"".join(parts)) if total <= limit else None


class PackParser:
    """Takes a pack's files in order and gives their documents and ledger rows, parsing
    the clean ones together; ``flush`` at the end. A plain file read whole comes as its
    bytes (``add_lines``), not scanned: the scans run once over the waiting files joined,
    and each file is scanned on its own only where the joined block is not clean (at
    10,000 one-document files, a scan a file was a quarter of the read's CPU). Either way
    each file is parsed as if it had been scanned on its own: a clean file of one parse
    group waits; anything else is parsed by itself, after what waits."""

    def __init__(self, block_bytes: int):
        self.block_bytes = block_bytes
        self.waiting: list[tuple[bytes, InputSpec]] = []  # whole files' lines, in order
        self.waiting_bytes = 0

    def add_lines(self, data: bytes, spec: InputSpec) -> Iterator[Parsed]:
        """A plain file's bytes, all of it one block (``whole_file``)."""
        if data.startswith(UTF8_BOM):
            data = data[len(UTF8_BOM) :]
        if data:  # an empty file: nothing to parse, nothing to keep apart
            yield from self._wait(data, spec)

    def add(self, items: list[_Block | BadInput], spec: InputSpec) -> Iterator[Parsed]:
        """A file's items (``scanned_file``): a clean block waits, anything else is parsed
        now, after what waits."""
        if not items:
            return
        block = items[0]
        if _waits(block):
            yield from self._wait(bytes(block.data), spec)
            return
        yield from self.flush()
        for item in items:
            if isinstance(item, BadInput):
                yield None, bad_rows(spec, [item])
            else:
                yield from _alone(item, spec)

    def flush(self) -> Iterator[Parsed]:
        yield from self._parsed(last=True)

    def _wait(self, data: bytes, spec: InputSpec) -> Iterator[Parsed]:
        self.waiting.append((data, spec))
        self.waiting_bytes += len(data)
        if self.waiting_bytes >= self.block_bytes:
            yield from self._parsed(last=False)

    def _parsed(self, last: bool) -> Iterator[Parsed]:
        """What waits, parsed together where it is clean; else each file as scanned on its
        own. Unless ``last``, the clean files after the last one that is not wait on."""
        waiting, self.waiting, self.waiting_bytes = self.waiting, [], 0
        together = _parsed_together(waiting) if len(waiting) > 1 else None
        if together is not None:
            yield together
            return
        run: list[tuple[_Block, InputSpec]] = []  # clean files, as they would have waited
        run_bytes = 0
        for data, spec in waiting:
            block = _scanned(data, 1)
            clean = _waits(block)
            if clean:
                run.append((block, spec))
                run_bytes += len(data)
            if not clean or run_bytes >= self.block_bytes:
                yield from _run_parsed(run)
                run, run_bytes = [], 0
            if not clean:
                yield from _alone(block, spec)
        if last:
            yield from _run_parsed(run)
        else:
            self.waiting, self.waiting_bytes = [(bytes(block.data), spec) for block, spec in run], run_bytes


def _waits(block: _Block | BadInput) -> bool:
    """Whether a file's block may be parsed with others: clean, and one parse group."""
    return isinstance(block, _Block) and block.clean and len(block.scan.groups) == 1


def _run_parsed(run: list[tuple[_Block, InputSpec]]) -> Iterator[Parsed]:
    """Clean files of one group each: together, or where that fails each on its own."""
    together = _parsed_together([(bytes(block.data), spec) for block, spec in run]) if len(run) > 1 else None
    if together is not None:
        yield together
        return
    for block, spec in run:
        yield from _alone(block, spec)


def _alone(block: _Block, spec: InputSpec) -> Iterator[Parsed]:
    """One file's block parsed by itself, as ``read_jsonl`` would, each document naming
    its file."""
    for docs, bad in _parse_block(block, spec):
        yield with_file(docs, spec.file_key), bad


def with_file(docs: pa.RecordBatch | None, file_key: str) -> pa.RecordBatch | None:
    """Documents of one file of a pack, each naming its file (those after damage in a zstd
    file name where they are already: ``jsonl``'s ``<file>@<offset>``)."""
    if docs is None or FILE in docs.schema.names:
        return docs
    return docs.append_column(FILE, pa.repeat(pa.scalar(file_key), docs.num_rows))


def _parsed_together(waiting: list[tuple[bytes, InputSpec]]) -> Parsed | None:
    """The waiting files' documents from one scan and one parse of their lines, joined;
    None where the joined block is not clean and one parse group, or the parse does not
    give one row a line of each file. A clean group joined is clean and one group in
    each of its files: each check is of a line, or grows with the lines."""
    parts, lines_of = [], []
    for data, _ in waiting:
        parts.append(data if data.endswith(b"\n") else data + b"\n")
        lines_of.append(_lines(data))
    data = b"".join(parts)
    joined = _scanned(data, 1)
    if not joined.clean or len(joined.scan.groups) != 1:
        return None
    table, _ = _arrow_parse(data)
    if table is None or table.num_rows != sum(lines_of):
        return None
    counts = np.array(lines_of, dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)  # each row's first row of its file
    lines = np.arange(len(starts), dtype=np.int64) - starts + 1
    files = pa.array([spec.file_key for _, spec in waiting], pa.string()).take(
        pa.array(np.repeat(np.arange(len(waiting)), counts))
    )
    return _documents(table, data, pa.array(lines), waiting[0][1], files)


def _lines(data: bytes) -> int:
    """The lines of a file's bytes, the last perhaps with no newline. A file of one line,
    the common case, is told by where its first newline is, which ``find`` sees at memory
    speed; ``count`` reads at 3 GB/s (a tenth of a run's read over one-document files)."""
    first = data.find(b"\n")
    if first in (-1, len(data) - 1):
        return 1
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
