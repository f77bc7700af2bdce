"""A mixture over training position: source shares and the curriculum key, binned.

A mixture folder holds ``mix.json`` and the global order (source and document index per
position). Positions are weighed by their documents' token lengths, read from the
shards' indexes, so the x axis is training tokens, as a trainer sees it. The order is
memory-mapped and walked in chunks: memory holds one int32 length per document of each
source, never a per-position array.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.mix import MIX_JSON, MixLayout, read_description
from pipeline.formats.mix_order import OrderArrayError, check_positions, read_order
from pipeline.formats.token_shards import docs_path
from pipeline.formats.unreadable import reading
from pipeline.mix.build import QUALITY_COLUMNS
from pipeline.mix.inventory import SourceInventory, common_columns

BINS = 200
CHUNK = 1 << 20


class MixtureError(ValueError):
    """A mixture folder that cannot be read back (missing files, shards changed since)."""


@dataclass
class Composition:
    centres: np.ndarray  # training tokens at the middle of each bin
    shares: dict[str, np.ndarray]  # source -> share of the bin's tokens
    curriculum: str  # "none", "length", "quality" or a column name
    key_label: str  # what the key is, for the axis
    key_means: dict[str, np.ndarray]  # source -> mean key of its documents per bin (NaN: none)
    tokens: int
    positions: int
    # Per phase of the mix: the training tokens it spans and each source's target share
    # (its weight), to set against the shares the order achieved.
    targets: list[tuple[float, float, dict[str, float]]]


def read_mixture(mix_dir: Path, bins: int = BINS) -> Composition:
    folder = MixLayout(mix_dir)
    mix_path = folder.manifest
    if not mix_path.exists():
        raise MixtureError(f"{mix_dir}: not a mixture folder (no {MIX_JSON}; make one with prep mix RUN --out DIR)")
    mix = read_description(mix_path)
    names = list(mix["sources"])
    lengths = [_source_lengths(name, mix["sources"][name], folder) for name in names]
    sizes = np.array([len(length) for length in lengths], dtype=np.int64)
    curriculum = mix.get("curriculum", "none")
    keys, key_label = _keys(names, mix, lengths, curriculum, folder)
    # The arrays mix.json names, as the loader reads them (the default names in one without "order").
    if "order" in mix:
        paths = (folder.order(mix, "source"), folder.order(mix, "document"))
    else:
        paths = (folder.order_source, folder.order_document)
    order_source, order_document = _order(paths[0]), _order(paths[1])
    if len(order_source) != len(order_document):
        raise MixtureError(f"{mix_dir}: the order arrays differ in length ({len(order_source)}, {len(order_document)})")
    total = max(int(mix["tokens"]), 1)
    edges = np.linspace(0.0, total, bins + 1)
    cumulative = _Cumulative(edges, len(names))
    key_sums = np.zeros((bins, len(names)))
    key_counts = np.zeros((bins, len(names)))
    phases = mix.get("phases", [])
    # Positions where the later phases begin, kept to the order's (an edited mix.json's too).
    later_starts = np.array([min(max(p["start"], 0), len(order_source)) for p in phases[1:]], dtype=np.int64)
    later_tokens = np.full(len(later_starts), float(mix["tokens"]))  # a phase starting past the end is empty
    for a in range(0, len(order_source), CHUNK):
        source = np.asarray(order_source[a : a + CHUNK], dtype=np.int64)
        document = np.asarray(order_document[a : a + CHUNK])
        tokens = np.zeros(len(source), dtype=np.int64)
        key = np.zeros(len(source))
        try:
            check_positions(paths, source, document, sizes, names, a)
        except OrderArrayError as error:
            raise MixtureError(str(error)) from None
        for s in np.unique(source):
            here = source == s
            tokens[here] = lengths[s][document[here]]
            if keys is not None:
                key[here] = keys[s][document[here]]
        starts = cumulative.add(source, tokens)
        begins_here = (later_starts >= a) & (later_starts < a + len(source))
        later_tokens[begins_here] = starts[later_starts[begins_here] - a]
        # The key is a per-document value: each document counts once, in the bin it starts in.
        cell = np.minimum(starts * bins // total, bins - 1) * len(names) + source
        key_sums += np.bincount(cell, weights=key, minlength=bins * len(names)).reshape(bins, len(names))
        key_counts += np.bincount(cell, minlength=bins * len(names)).reshape(bins, len(names))
    tokens_per_bin = np.diff(cumulative.finish(), axis=0)
    shares = tokens_per_bin / np.maximum(tokens_per_bin.sum(axis=1, keepdims=True), 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(key_counts > 0, key_sums / key_counts, np.nan)
    return Composition(
        centres=(np.arange(bins) + 0.5) * total / bins,
        shares={name: shares[:, i] for i, name in enumerate(names)},
        curriculum=curriculum,
        key_label=key_label,
        key_means={name: means[:, i] for i, name in enumerate(names)} if keys is not None else {},
        tokens=int(mix["tokens"]),
        positions=int(len(order_source)),
        targets=_targets(phases, later_tokens, int(mix["tokens"])),
    )


def _targets(phases: list[dict], later_tokens: np.ndarray, total: int) -> list[tuple[float, float, dict[str, float]]]:
    """Each phase's span in training tokens (from the token at which its first document
    starts) and its weights."""
    edges = [0.0, *later_tokens.tolist(), float(total)]
    return [(edges[i], edges[i + 1], dict(phase["weights"])) for i, phase in enumerate(phases)]


class _Cumulative:
    """Tokens of each source before each bin edge, exactly, as chunks of the order stream by.

    A long document can span several bins (always so in a small mixture), so its tokens
    are split at the edges rather than credited to the bin it starts in.
    """

    def __init__(self, edges: np.ndarray, sources: int):
        self.edges = edges
        self.at_edges = np.zeros((len(edges), sources))
        self.done = np.zeros(len(edges), dtype=bool)
        self.before = np.zeros(sources)  # tokens per source before the current chunk
        self.start = 0  # tokens before the current chunk

    def add(self, source: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Take one chunk; returns the training token at which each of its documents starts."""
        ends = self.start + np.cumsum(tokens)
        starts = ends - tokens
        inside = np.flatnonzero(~self.done & (self.edges < (ends[-1] if len(ends) else self.start)))
        holder = np.searchsorted(ends, self.edges[inside], side="right")  # the document each edge falls in
        for s in range(self.at_edges.shape[1]):
            mine = np.where(source == s, tokens, 0)
            before_holder = np.cumsum(mine)[holder] - mine[holder]
            partial = np.where(source[holder] == s, self.edges[inside] - starts[holder], 0)
            self.at_edges[inside, s] = self.before[s] + before_holder + partial
            self.before[s] += mine.sum()
        self.done[inside] = True
        self.start = int(ends[-1]) if len(ends) else self.start
        return starts

    def finish(self) -> np.ndarray:
        self.at_edges[~self.done] = self.before
        return self.at_edges


def _order(path: Path) -> np.ndarray:
    try:
        return read_order(path)
    except OrderArrayError as error:
        raise MixtureError(str(error)) from None


def _source_lengths(name: str, source: dict, folder: MixLayout) -> np.ndarray:
    """Token length of each document of a source, numbered across its shards as the order is."""
    parts = []
    if len(source["shards"]) != len(source["shard_documents"]):
        raise MixtureError(
            f"{folder.manifest}: source {name!r} lists {len(source['shards'])} shards but "
            f"{len(source['shard_documents'])} shard document counts: make the mixture again"
        )
    for prefix, expected in zip(folder.shards(source), source["shard_documents"]):
        try:
            sizes = IndexedShard(prefix).sizes
        except FileNotFoundError:
            raise MixtureError(f"source {name!r}: shard {prefix} of the mixture is gone") from None
        if len(sizes) != expected:
            raise MixtureError(
                f"source {name!r}: shard {prefix} holds {len(sizes)} documents, the mixture expects {expected}"
            )
        parts.append(np.asarray(sizes))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _keys(
    names: list[str], mix: dict, lengths: list[np.ndarray], curriculum: str, folder: MixLayout
) -> tuple[list[np.ndarray] | None, str]:
    """The curriculum key per document of each source, as ``prep mix`` sorted by it."""
    if curriculum == "none":
        return None, ""
    if curriculum == "length":
        return [tokens.astype(np.float64) for tokens in lengths], "tokens per document"
    keys, column = [], curriculum
    for name, length in zip(names, lengths):
        shards = folder.shards(mix["sources"][name])
        columns = None
        for prefix in shards:  # footers only; a shard without documents has no say
            with reading(docs_path(prefix)):
                parquet = pq.ParquetFile(docs_path(prefix))
            columns = common_columns(columns, parquet.schema_arrow, parquet.metadata.num_rows)
        columns = columns or []
        column = (
            next((c for c in QUALITY_COLUMNS if c in columns), curriculum) if curriculum == "quality" else curriculum
        )
        inventory = SourceInventory(name, shards, length, np.zeros(0, np.uint64), columns)
        keys.append(inventory.column(column))
    return keys, column
