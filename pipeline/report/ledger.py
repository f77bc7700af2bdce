"""What the report reads from the rejects ledger: examples per rule, duplicate clusters.

The ledger can hold a large share of a corpus, so it is read a few columns at a time,
batch by batch, and what is kept is bounded: three examples per rule, and the survivors
of at most ``MAX_DUPLICATE_ROWS`` duplicate rows.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.formats.documents import rule_name
from pipeline.formats.layout import Layout
from pipeline.formats.unreadable import reading
from pipeline.kernels.hashing import hash_strings

EXAMPLES_PER_RULE = 3
EXAMPLE_CHARS = 300
DUPLICATE_REASONS = ("exact-duplicate", "near-duplicate")
MAX_DUPLICATE_ROWS = 1_000_000
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Example:
    id: str
    where: str  # file:line of the input
    detail: str
    text: str  # at most EXAMPLE_CHARS characters, then "…"


def ledger_files(layout: Layout, sources: list[str]) -> list[Path]:
    return [p for source in sources for p in layout.reject_files(source)]


def examples(files: list[Path]) -> dict[str, list[Example]]:
    """Up to three rejected documents per rule, the ones whose ids hash lowest.

    Choosing by id hash is deterministic and spreads the examples over files, unlike
    "the first three". Pass one reads only ids and rules; pass two reads the text of the
    few chosen rows, one row group at a time.
    """
    chosen: dict[str, list[tuple[int, int, int]]] = {}  # rule -> [(hash, file, row)]
    for file_index, path in enumerate(files):
        with reading(path):
            row = 0
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=["id", "stage", "reason"]):
                rules = pc.binary_join_element_wise(batch.column("stage"), batch.column("reason"), ":")
                hashes = hash_strings(batch.column("id"))
                for rule in pc.unique(rules).to_pylist():
                    rows = np.flatnonzero(pc.equal(rules, rule).to_numpy(zero_copy_only=False))
                    lowest = rows[np.argsort(hashes[rows], kind="stable")[:EXAMPLES_PER_RULE]]
                    name = rule_name(*rule.split(":", 1))
                    picks = chosen.setdefault(name, []) + [(int(hashes[r]), file_index, row + int(r)) for r in lowest]
                    chosen[name] = sorted(picks)[:EXAMPLES_PER_RULE]
                row += batch.num_rows
    wanted: dict[int, set[int]] = {}
    for picks in chosen.values():
        for _, file_index, row in picks:
            wanted.setdefault(file_index, set()).add(row)
    rows = {(f, r): example for f, found in wanted.items() for r, example in _read_rows(files[f], found).items()}
    return {rule: [rows[(f, r)] for _, f, r in chosen[rule]] for rule in sorted(chosen)}


def _read_rows(path: Path, wanted: set[int]) -> dict[int, Example]:
    """The chosen rows of one ledger file, reading only the row groups that hold them."""
    with reading(path):
        return _rows_of(pq.ParquetFile(path), wanted)


def _rows_of(parquet: pq.ParquetFile, wanted: set[int]) -> dict[int, Example]:
    found, start = {}, 0
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        inside = sorted(r for r in wanted if start <= r < start + size)
        if inside:
            table = parquet.read_row_group(group, columns=["id", "file", "line", "detail", "text", "raw"])
            for r in inside:
                found[r] = _example(table.slice(r - start, 1).to_pylist()[0])
        start += size
    return found


def _example(row: dict) -> Example:
    text = row["text"]
    if text is None and row["raw"] is not None:  # undecodable input: show what bytes it had
        text = bytes(row["raw"][: EXAMPLE_CHARS * 4]).decode("utf-8", errors="replace")
    text = text or ""
    clipped = text[:EXAMPLE_CHARS] + ("…" if len(text) > EXAMPLE_CHARS else "")
    where = f"{row['file']}:{row['line']}" if row["file"] is not None else ""
    return Example(id=row["id"] or "", where=where, detail=row["detail"] or "", text=clipped)


@dataclass
class Clusters:
    sizes: Counter  # cluster size (survivor + its removed duplicates) -> number of clusters
    rows_read: int
    truncated: bool  # more duplicate rows existed than were read


def duplicate_clusters(files: list[Path], max_rows: int = MAX_DUPLICATE_ROWS) -> Clusters | None:
    """Cluster sizes from the duplicates the ledger names: each removed row's ``detail``
    names its survivor, so a survivor with k removed rows heads a cluster of k + 1.

    A cluster is thus a survivor with at least one removed duplicate, the manifest's
    ``dedup.clusters`` too (not dedup's LSH components, ``dedup.components``, some of
    which remove nothing and some several survivors' duplicates)."""
    survivors: Counter[str] = Counter()
    read, truncated = 0, False
    wanted = pa.array(DUPLICATE_REASONS)
    for path in files:
        with reading(path):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=["reason", "detail"]):
                mask = pc.is_in(batch.column("reason"), value_set=wanted)
                details = pc.filter(batch.column("detail"), mask).to_pylist()
                if read + len(details) > max_rows:
                    details, truncated = details[: max_rows - read], True
                survivors.update(survivor(d) for d in details)
                read += len(details)
                if truncated:
                    break
            if truncated:
                break
    if not read:
        return None
    return Clusters(sizes=Counter(n + 1 for n in survivors.values()), rows_read=read, truncated=truncated)


def survivor(detail: str | None) -> str:
    """The survivor a duplicate's ``detail`` names: JSON ``{"survivor": ...}``, else the text."""
    if not detail:
        return ""
    try:
        value = json.loads(detail)
    except ValueError:
        return detail
    return str(value.get("survivor", detail)) if isinstance(value, dict) else detail


def size_buckets(sizes: Counter) -> tuple[list[str], list[int]]:
    """Cluster sizes as bars: 2, 3, 4 exactly, then doubling ranges (5–8, 9–16, ...)."""
    labels, counts, low = [], [], 2
    largest = max(sizes, default=2)
    while low <= largest:
        high = low if low <= 4 else 2 * (low - 1)
        labels.append(str(low) if low == high else f"{low}–{high}")
        counts.append(sum(n for size, n in sizes.items() if low <= size <= high))
        low = high + 1
    return labels, counts
