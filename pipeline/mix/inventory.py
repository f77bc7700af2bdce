"""What the runs hold: per source, its shards and, per document, its length in tokens,
a hash of its id, and the columns a curriculum can sort by."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.layout import Layout
from pipeline.formats.run_shards import missing_shards
from pipeline.formats.token_shards import check_compatible, docs_path, list_shards, read_sidecar, source_folders
from pipeline.formats.unreadable import reading
from pipeline.kernels.hashing import hash_strings
from pipeline.util.suggest import nearest_hint


class MixError(ValueError):
    """A mixture that cannot be planned; the message says why and what to change."""


@dataclass
class SourceInventory:
    name: str
    shards: list[str]  # shard prefixes, in order; documents are numbered across them
    lengths: np.ndarray  # int64 tokens per document
    id_hashes: np.ndarray  # uint64 hash of each document's id (independent of the seed)
    metadata_columns: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def documents(self) -> int:
        return len(self.lengths)

    def column(self, name: str) -> np.ndarray:
        """A per-document numeric column from the shards' metadata, as float64."""
        if name not in self.metadata_columns:
            raise MixError(_unknown_column(name, self.name, self.metadata_columns))
        values = []
        for prefix in self.shards:
            with reading(docs_path(prefix)):
                parquet = pq.ParquetFile(docs_path(prefix))
                if parquet.metadata.num_rows == 0:
                    continue  # an empty shard's file may lack the column (see common_columns)
                column = parquet.read(columns=[name]).column(name)
            values.append(column.to_numpy(zero_copy_only=False).astype(np.float64))  # a null is NaN: sorted last
        return np.concatenate(values) if values else np.zeros(0)


@dataclass
class Inventory:
    sources: dict[str, SourceInventory]
    tokenizer: dict  # the sidecar every shard agrees with (tokenizer, vocabulary, dtype, ...)


def numeric_columns(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]


def common_columns(columns: list[str] | None, schema: pa.Schema, rows: int) -> list[str] | None:
    """The numeric columns every shard with documents has, given one more shard's schema.

    A shard without documents does not count: tokenize writes the columns of the batches
    it saw, so a unit whose documents were all dropped earlier (by classify's keep_top,
    say) has a docs file with the base columns only, and must not hide a score column
    that all of the source's documents have."""
    if rows == 0:
        return columns
    numeric = numeric_columns(schema)
    return numeric if columns is None else [c for c in columns if c in numeric]


def _unknown_column(name: str, source: str, columns: list[str]) -> str:
    hint = nearest_hint(name, columns)
    return f"source {source!r} has no numeric column {name!r} to sort by{hint} (has: {', '.join(columns) or 'none'})"


def take_inventory(runs: list[Path]) -> Inventory:
    """The shards of ``runs`` by source, each shard once.

    A shard reached twice (a run given twice, ``out/a`` and ``out/a/``, or a tokens folder
    linked into another run) is refused: counted twice, it doubled its source's tokens,
    so the plan drew its documents as if there were twice as many and repeated the
    source up to twice ``--max-epochs`` while printing half the epochs.
    """
    shards_by_source: dict[str, list[str]] = {}
    seen: dict[Path, str] = {}
    run_of: dict[str, Path] = {}
    for run in runs:
        if Layout(run).state.exists() and not Layout(run).manifest.exists():  # its manifest is written last
            raise MixError(
                f"{run} is a prep run that has not finished (its shards so far hold part of its sources): "
                "run the same command again to finish it, then mix"
            )
        tokens = Layout(run).tokens_folder
        if not tokens.is_dir():
            raise MixError(f"{run} has no tokens/ folder: run a config whose last stage is tokenize first")
        for folder in source_folders(tokens):
            for prefix in list_shards(folder):
                resolved = Path(f"{prefix}.idx").resolve()
                if resolved in seen:
                    raise MixError(f"{prefix}: reached twice (first as {seen[resolved]}): give each run once")
                seen[resolved] = prefix
                shards_by_source.setdefault(folder.name, []).append(prefix)
                run_of[prefix] = run
    if not shards_by_source:
        raise MixError(f"no token shards under {', '.join(str(r) for r in runs)}")
    reference: dict | None = None
    sources = {}
    documents = dict.fromkeys(((run, source) for run in runs for source in shards_by_source), 0)  # in the shards
    for name, prefixes in sorted(shards_by_source.items()):
        lengths, hashes, columns = [], [], None
        for prefix in prefixes:
            meta = read_sidecar(prefix)
            if meta is None:
                raise MixError(f"{prefix}: no sidecar .json; prep mix needs shards written by prep's tokenize stage")
            if reference is None:
                reference = meta
            else:
                check_compatible(reference, meta, prefix)
            shard = IndexedShard(prefix)
            documents[run_of[prefix], name] += len(shard)
            lengths.append(shard.sizes.astype(np.int64))
            with reading(docs_path(prefix)):
                parquet = pq.ParquetFile(docs_path(prefix))
                rows = parquet.metadata.num_rows
                if rows != len(shard):
                    raise MixError(f"{docs_path(prefix)} has {rows} rows for {len(shard)} documents")
                hashes.append(hash_strings(parquet.read(columns=["id"]).column("id").combine_chunks()))
                columns = common_columns(columns, parquet.schema_arrow, rows)
        sources[name] = SourceInventory(
            name=name,
            shards=prefixes,
            lengths=np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
            id_hashes=np.concatenate(hashes) if hashes else np.zeros(0, np.uint64),
            metadata_columns=columns or [],
        )
    for run in runs:
        missing = missing_shards(run, {source: n for (r, source), n in documents.items() if r == run})
        if missing:
            raise MixError(f"{missing}, then mix")
    return Inventory(sources=sources, tokenizer=reference or {})
