"""Readers turn one input file into a stream of ``Chunk``s: Arrow document batches plus
ledger rows for input that could not be read (quarantined, never silently dropped).

``open_input(path, spec)`` picks the reader from the file name (or ``format`` in the
source's config): JSON lines (``.jsonl``, ``.json``, ``.ndjson``, C4's ``.json.gz``, any
of them gzipped), Parquet, and Hugging Face ``datasets`` Arrow files (``save_to_disk``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Iterator

from pipeline.readers.arrow_files import read_arrow_file
from pipeline.readers.common import Chunk, InputSpec
from pipeline.readers.jsonl import read_jsonl
from pipeline.readers.parquet import read_parquet

FORMATS = ("jsonl", "parquet", "arrow")

__all__ = ["Chunk", "InputSpec", "FORMATS", "detect_format", "read_input"]


def detect_format(path: Path | str) -> str:
    name = PurePosixPath(str(path)).name.lower()
    for suffix in (".gz", ".gzip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(".arrow"):
        return "arrow"
    raise ValueError(
        f"{path}: cannot tell the format from the file name; set format = one of {', '.join(FORMATS)}"
    )


def read_input(path: Path, spec: InputSpec, fmt: str = "auto") -> Iterator[Chunk]:
    """Stream ``path`` as chunks; memory is bounded by ``spec.block_bytes``, not by the file."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "jsonl":
        return read_jsonl(path, spec)
    if fmt == "parquet":
        return read_parquet(path, spec)
    if fmt == "arrow":
        return read_arrow_file(path, spec)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
