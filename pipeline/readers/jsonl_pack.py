"""The small JSON-lines files of a pack, parsed together: Arrow's JSON parser started once
for many files instead of once a file.

Why: over one-document files, starting Arrow's parser was 42% of a run's CPU (0.165 ms a
file; parsed as one block, 0.017) and turning each file's one-row table into documents
17% (0.34 ms). Each file is still read, checked and scanned on its own (``jsonl``'s
blocks, its own size and sha256, read inside ``planned_input``'s version checks); only the
parse waits. A clean file (one block, one parse group, nothing the scans flag) waits
until about ``block_bytes`` of them wait, or until a file that is not clean comes, so
documents and ledger rows keep the files' order. Each row names its file (``_file``) and
line as when read file by file. What may differ is what any larger block gives: Arrow
infers one type per field over the block, as over a large file's block, so a field written
as an integer in one file and a float in the next is a float in both. Where the joined
block is not one clean group, or Arrow's rows are not one a line (a blank line, say),
each waiting file is parsed on its own, as ``read_jsonl`` would.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats.documents import FILE
from pipeline.readers.common import BadInput, InputSpec, bad_rows
from pipeline.readers.jsonl import _arrow_parse, _Block, _documents, _line_blocks, _open, _parse_block, _scanned

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


class PackParser:
    """Takes a pack's files in order (``add``) and gives their documents and ledger rows,
    parsing the clean ones together; ``flush`` at the end."""

    def __init__(self, block_bytes: int):
        self.block_bytes = block_bytes
        self.waiting: list[tuple[_Block, InputSpec]] = []
        self.waiting_bytes = 0

    def add(self, items: list[_Block | BadInput], spec: InputSpec) -> Iterator[Parsed]:
        """A file's items (``scanned_file``): a clean block waits, anything else is parsed
        now, after what waits."""
        if not items:  # an empty file: nothing to parse, nothing to keep apart
            return
        block = items[0]
        if isinstance(block, _Block) and block.clean and len(block.scan.groups) == 1:
            self.waiting.append((block, spec))
            self.waiting_bytes += len(block.data)
            if self.waiting_bytes >= self.block_bytes:
                yield from self.flush()
            return
        yield from self.flush()
        for item in items:
            if isinstance(item, BadInput):
                yield None, bad_rows(spec, [item])
            else:
                for docs, bad in _parse_block(item, spec):
                    yield with_file(docs, spec.file_key), bad

    def flush(self) -> Iterator[Parsed]:
        waiting, self.waiting, self.waiting_bytes = self.waiting, [], 0
        together = _parsed_together(waiting) if len(waiting) > 1 else None
        if together is not None:
            yield together
            return
        for block, spec in waiting:
            for docs, bad in _parse_block(block, spec):
                yield with_file(docs, spec.file_key), bad


def with_file(docs: pa.RecordBatch | None, file_key: str) -> pa.RecordBatch | None:
    """Documents of one file of a pack, each naming its file (those after damage in a zstd
    file name where they are already: ``jsonl``'s ``<file>@<offset>``)."""
    if docs is None or FILE in docs.schema.names:
        return docs
    return docs.append_column(FILE, pa.repeat(pa.scalar(file_key), docs.num_rows))


def _parsed_together(waiting: list[tuple[_Block, InputSpec]]) -> Parsed | None:
    """The waiting files' documents from one parse of their lines, joined; None where that
    parse does not give one row a line of each file."""
    parts, lines_of = [], []
    for block, _ in waiting:
        ends_line = bytes(block.data[-1:]) == b"\n"
        parts.append(block.data if ends_line else bytes(block.data) + b"\n")
        lines_of.append(block.scan.newlines + (0 if ends_line else 1))
    data = b"".join(parts)
    joined = _scanned(data, 1)
    if not joined.clean or len(joined.scan.groups) != 1:
        return None
    table, _ = _arrow_parse(data)
    if table is None or table.num_rows != sum(lines_of):
        return None
    counts = np.array(lines_of, dtype=np.int64)
    firsts = np.array([block.first_line for block, _ in waiting], dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)  # each row's first row of its file
    lines = np.arange(len(starts), dtype=np.int64) - starts + np.repeat(firsts, counts)
    files = pa.array([spec.file_key for _, spec in waiting], pa.string()).take(
        pa.array(np.repeat(np.arange(len(waiting)), counts))
    )
    return _documents(table, data, pa.array(lines), waiting[0][1], files)
