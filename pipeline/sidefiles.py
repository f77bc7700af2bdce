"""Side files: what a stage reads besides the documents, read whole through one owner.

A side file is small and named in a stage's options: an evaluation set (``decontaminate``'s
benchmarks: JSON lines, gzipped or not, Parquet, an Arrow file or a ``datasets``
``save_to_disk`` folder) or a list (``url_filter``'s domains and words: one entry a line).
Models have their own format owner (``formats/fasttext_model.py``, fastText's binding).

Why apart from the readers: the stages may not import ``pipeline/readers`` (the engine
joins the two), and a reader's job is another one: documents streamed in bounded memory,
every bad line quarantined to the ledger. A side file is read at once, and one that
cannot be read is the caller's error naming it. What the two share is how a file's name
tells its format: ``format_from_name``, which ``readers.detect_format`` asks too.

A table's records come as dicts (only the asked-for columns where the format has columns),
``None`` for a line that is no JSON, and ``BLANK`` for a blank line (it holds a position,
but is no record and no error).
"""

from __future__ import annotations

import gzip
import json
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TABLE_FORMATS = ("jsonl", "parquet", "arrow")
# How a name ends, once its compression suffix is off, and the format that says.
NAME_ENDINGS = (
    ((".jsonl", ".json", ".ndjson"), "jsonl"),
    ((".parquet", ".pq"), "parquet"),
    ((".arrow",), "arrow"),
    ((".warc", ".wet"), "warc"),
)
BLANK = object()


def format_from_name(path: str | Path, compressions: tuple[str, ...]) -> str | None:
    """The format the file name says (``compressions``: the suffixes the caller can open,
    taken off first), or None."""
    name = posixpath.basename(str(path).rstrip("/")).lower()  # a PurePosixPath's name, without building one
    for suffix in compressions:
        name = name.removesuffix(suffix)
    return next((fmt for endings, fmt in NAME_ENDINGS if name.endswith(endings)), None)


def table_format(path: str | Path) -> str:
    """A side table's format from its name (only gzip is opened); ValueError naming it."""
    fmt = format_from_name(path, (".gz",))
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"file {path}: cannot tell its format from the name; set format = one of {TABLE_FORMATS}")
    return fmt


def table_files(path: str | Path) -> list[Path]:
    """A table's files: the file, or a ``save_to_disk`` folder's Arrow files and state
    (its own and its sub-folders', sorted), which is what its content is."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = []
    for folder in [path, *sorted(p for p in path.iterdir() if p.is_dir())]:
        found += sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".arrow", ".json"))
    return found


def data_files(path: str | Path, fmt: str = "auto") -> list[tuple[Path, str]]:
    """The files that hold a table's records, each with its format."""
    if Path(path).is_dir():
        return [(f, "arrow") for f in table_files(path) if f.suffix == ".arrow"]
    return [(Path(path), fmt if fmt != "auto" else table_format(path))]


def records(path: Path, fmt: str, columns: list[str]) -> Iterator[Any]:
    """One data file's records in order (see the module docstring); a file that cannot be
    read raises what its library raises (OSError, EOFError, ValueError, ArrowException)."""
    if fmt == "jsonl":
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gzipped else open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    yield BLANK
                    continue
                try:
                    yield json.loads(line)
                except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
                    yield None
        return
    if fmt == "parquet":
        source = pq.ParquetFile(path)
        present = [c for c in dict.fromkeys(columns) if c in source.schema_arrow.names]
        for batch in source.iter_batches(columns=present):
            yield from batch.to_pylist()
        return
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
            batches = iter(reader)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        for batch in batches:
            keep = [c for c in dict.fromkeys(columns) if c in batch.schema.names]
            yield from batch.select(keep).to_pylist()


def list_entries(path: str | Path) -> list[str]:
    """A list file's entries: its lines stripped, blank lines and ``#`` comments left out
    (bytes that are no UTF-8 read as U+FFFD)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [s for s in (line.strip() for line in f) if s and not s.startswith("#")]
