"""Arrow IPC files, as Hugging Face ``datasets`` writes them with ``save_to_disk``.

A ``save_to_disk`` folder (``state.json`` plus ``data-*.arrow``) or a ``DatasetDict``
folder (``dataset_dict.json`` plus one such folder per split) is expanded into its Arrow
files by ``expand_hf_folder``; each file is then read memory-mapped, without importing
``datasets`` at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from pipeline.readers.common import Chunk, InputSpec
from pipeline.readers.parquet import iter_record_batches
from pipeline.hashing import file_sha256


def is_hf_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists())


def expand_hf_folder(path: Path) -> list[Path]:
    """The Arrow files of a ``save_to_disk`` folder, in the dataset's own order."""
    if (path / "dataset_dict.json").exists():
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        return [f for split in splits for f in expand_hf_folder(path / split)]
    state = json.loads((path / "state.json").read_text())
    return [path / entry["filename"] for entry in state["_data_files"]]


def read_arrow_file(path: Path, spec: InputSpec) -> Iterator[Chunk]:
    size = path.stat().st_size
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            file_reader = pa.ipc.open_file(source)
            batches = (file_reader.get_batch(i) for i in range(file_reader.num_record_batches))
            rows = sum(file_reader.get_batch(i).num_rows for i in range(file_reader.num_record_batches))
        else:
            table = reader.read_all()  # memory-mapped: no copy of the data
            batches = table.to_batches(max_chunksize=spec.batch_rows)
            rows = table.num_rows
        yield from iter_record_batches(batches, spec, size, max(rows, 1))
    yield Chunk(extra={"sha256": file_sha256(path), "bytes": size})
