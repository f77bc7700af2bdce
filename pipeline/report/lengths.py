"""Document lengths (characters, tokens) as log-binned histograms, and kept languages.

Bins are fixed in advance (ten per decade, 1 to 10^9), so counts are added up batch by
batch without holding lengths in memory. Long runs are sampled: each file contributes
the same fraction of its rows, its first ones, up to ``SAMPLE_ROWS`` in all. Reading
prefixes (not every k-th row) bounds the report's time as well as its memory on any
corpus size; it assumes rows within a file are in no meaningful order, as in C4 and
RedPajama shards. The same fraction everywhere keeps "before" and "after" comparable.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.unreadable import reading
from pipeline.report.ledger import present_columns, text_file

SAMPLE_ROWS = 200_000
BINS_PER_DECADE = 10
DECADES = 9
EDGES = 10.0 ** (np.arange(DECADES * BINS_PER_DECADE + 1) / BINS_PER_DECADE)
BATCH_ROWS = 16_384
NO_LANGUAGE = "(none)"


@dataclass
class Histogram:
    counts: np.ndarray  # documents per bin of EDGES
    rows_seen: int
    rows_total: int

    @property
    def sampled(self) -> bool:
        return self.rows_seen < self.rows_total

    def __add__(self, other: Histogram) -> Histogram:
        return Histogram(
            self.counts + other.counts, self.rows_seen + other.rows_seen, self.rows_total + other.rows_total
        )


def log_counts(values: np.ndarray) -> np.ndarray:
    """Counts of ``values`` per bin of EDGES (below 1 counts as 1; beyond the top, in the top bin)."""
    values = np.clip(np.asarray(values, dtype=np.float64), 1.0, EDGES[-1] * 0.999)
    index = np.floor(np.log10(values) * BINS_PER_DECADE + 1e-9).astype(np.int64)
    return np.bincount(np.minimum(index, len(EDGES) - 2), minlength=len(EDGES) - 1)


def trim(*counts: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """EDGES and counts cut to the span where any series has documents."""
    occupied = np.flatnonzero(np.sum(counts, axis=0))
    if not len(occupied):
        return EDGES[:2], [c[:1] for c in counts]
    lo, hi = occupied[0], occupied[-1] + 1
    return EDGES[lo : hi + 1], [c[lo:hi] for c in counts]


def rows_in(files: list[Path]) -> int:
    return sum(_rows(p) for p in files)


def _rows(path: Path) -> int:
    with reading(path):  # the first read of each file: checked here
        return text_file(path, ("text",)).metadata.num_rows


def char_lengths(files: list[Path], fraction: float) -> Histogram:
    """Characters of the ``text`` of the first ``fraction`` of each file's rows (nulls skipped)."""
    counts = np.zeros(len(EDGES) - 1, dtype=np.int64)
    seen = total = 0
    for path in files:
        with reading(path):
            parquet = text_file(path, ("text",))
            rows = parquet.metadata.num_rows
            total += rows
            quota = math.ceil(rows * fraction)
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["text"]) if quota else ():
                lengths = pc.utf8_length(batch.column("text").slice(0, quota))
                seen += len(lengths)
                quota -= len(lengths)
                counts += log_counts(lengths.drop_null().to_numpy())
                if quota <= 0:
                    break
    return Histogram(counts, seen, total)


def sample_fraction(rows: int, cap: int = SAMPLE_ROWS) -> float:
    return 1.0 if rows <= cap else cap / rows


def token_lengths(shards: list[str], cap: int = SAMPLE_ROWS) -> Histogram:
    """Tokens per document from the shards' indexes (every k-th document beyond ``cap``)."""
    indexes = [IndexedShard(prefix).sizes for prefix in shards]
    total = sum(len(sizes) for sizes in indexes)
    stride = max(1, math.ceil(total / cap))
    counts = np.zeros(len(EDGES) - 1, dtype=np.int64)
    seen = 0
    for sizes in indexes:
        picked = np.asarray(sizes[::stride])
        counts += log_counts(picked)
        seen += len(picked)
    return Histogram(counts, seen, total)


def languages(files: list[Path]) -> Counter:
    """Kept documents per ``lang`` value over the files that have the column (null: none)."""
    counts: Counter[str] = Counter()
    for path in files:
        with reading(path):
            if not present_columns(pq.read_schema(path), ["lang"]):
                continue
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS * 4, columns=["lang"]):
                for item in pc.value_counts(batch.column("lang")).to_pylist():
                    counts[item["values"] or NO_LANGUAGE] += item["counts"]
    return counts
