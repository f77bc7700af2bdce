"""What the report reads from the rejects ledger: examples per rule, duplicate clusters.

The ledger can hold a large share of a corpus, so it is read a few columns at a time,
batch by batch, and what is kept is bounded: three examples per rule, and the survivors
of at most ``MAX_DUPLICATE_ROWS`` duplicate rows.
"""

from __future__ import annotations

import json
import os
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
ID_CHARS = 100
NO_RULE = "(none)"
DUPLICATE_REASONS = ("exact-duplicate", "near-duplicate")
MAX_DUPLICATE_ROWS = 1_000_000
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Example:
    id: str  # at most ID_CHARS characters, then "…"
    where: str  # file:line of the input; this and the rest at most EXAMPLE_CHARS characters, then "…"
    detail: str
    text: str


def ledger_files(layout: Layout, sources: list[str]) -> list[Path]:
    return [p for source in sources for p in layout.reject_files(source)]


def text_file(path: Path, columns: tuple[str, ...]) -> pq.ParquetFile:
    """``path`` opened, with ``ArrowInvalid`` (which ``reading`` turns into one line naming
    the file) unless each of ``columns`` is text: a Parquet file of another kind in the
    run's folders ended the report in Arrow's "Function 'utf8_length' has no kernel
    matching input types (int64)", or a TypeError naming no file. Stat'ed first, so that a
    dangling link or a link loop is the OS's reason, not Arrow's sentence repeating the path."""
    os.stat(path)
    parquet = pq.ParquetFile(path)
    schema = parquet.schema_arrow
    for name in columns:
        kind = schema.field(name).type if name in schema.names else None
        if kind is None or not _is_text(kind):
            raise pa.ArrowInvalid(f"not a file prep wrote: no text column {name!r}")
    return parquet


def present_columns(schema: pa.Schema, columns: list[str], numbers: bool = False) -> list[str]:
    """Those of ``columns`` the file has (optional ones: a language, a score), each checked
    to be text (with ``numbers``: a number), else ``ArrowInvalid`` (one line naming the file,
    through ``reading``): a file of another kind in the run's folders ended the report in
    a TypeError or numpy's "could not convert string to float", naming no file."""
    present = [name for name in columns if name in schema.names]
    for name in present:
        kind = schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) if numbers else _is_text(kind)):
            raise pa.ArrowInvalid(
                f"not a file prep wrote: its {name!r} column is {kind}, not {'a number' if numbers else 'text'}"
            )
    return present


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


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
            parquet = text_file(path, ("id", "stage", "reason", "text", "detail", "file"))
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["id", "stage", "reason"]):
                # A row without a stage or reason (a ledger edited by hand) is listed under "(none)".
                stages, reasons = (pc.fill_null(batch.column(name), NO_RULE) for name in ("stage", "reason"))
                rules = pc.binary_join_element_wise(stages, reasons, ":")
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
    """Batch by batch within each row group that holds a wanted row: a whole row group
    (a million rows of text, as a writer may make it) took a gigabyte to read for three rows."""
    found, start = {}, 0
    columns = ["id", "file", "line", "detail", "text", "raw"]
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if any(start <= r < start + size for r in wanted):
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group], columns=columns):
                for r in sorted(r for r in wanted if start <= r < start + batch.num_rows):
                    found[r] = _example(batch.slice(r - start, 1).to_pylist()[0])
                start += batch.num_rows
        else:
            start += size
    return found


def _example(row: dict) -> Example:
    """Every field clipped: an id, a file name or a detail of a megabyte (a ledger from
    hostile input, or edited) made the page that large, once per example."""
    text = row["text"]
    if text is None and row["raw"] is not None:  # undecodable input: show what bytes it had
        text = bytes(row["raw"][: EXAMPLE_CHARS * 4]).decode("utf-8", errors="replace")
    where = f"{row['file']}:{row['line']}" if row["file"] is not None else ""
    return Example(
        id=clip(row["id"], ID_CHARS),
        where=clip(where, EXAMPLE_CHARS),
        detail=clip(row["detail"], EXAMPLE_CHARS),
        text=clip(text, EXAMPLE_CHARS),
    )


def clip(text: str | None, limit: int) -> str:
    """``text`` (None: empty) cut at ``limit`` characters, then "…": for any string of a
    run's files that the page shows, so that a megabyte one cannot make the page that large."""
    text = text or ""
    return text[:limit] + ("…" if len(text) > limit else "")


@dataclass
class Clusters:
    sizes: Counter  # cluster size (survivor + its removed duplicates) -> number of clusters
    rows_read: int
    truncated: bool  # more duplicate rows existed than were read


def duplicate_clusters(files: list[Path], max_rows: int = MAX_DUPLICATE_ROWS) -> Clusters | None:
    """Cluster sizes from the duplicates the ledger names: each removed row's ``detail``
    names its survivor (by source and id: two sources may each hold an id "1"), so a
    survivor with k removed rows heads a cluster of k + 1.

    A cluster is thus a survivor with at least one removed duplicate, the manifest's
    ``dedup.clusters`` too (not dedup's LSH components, ``dedup.components``, some of
    which remove nothing and some several survivors' duplicates)."""
    survivors: Counter[tuple[str, str]] = Counter()
    read, truncated = 0, False
    wanted = pa.array(DUPLICATE_REASONS)
    for path in files:
        with reading(path):
            for batch in text_file(path, ("reason", "detail")).iter_batches(
                batch_size=BATCH_ROWS, columns=["reason", "detail"]
            ):
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


def survivor(detail: str | None) -> tuple[str, str]:
    """The survivor a duplicate's ``detail`` names, as (source, id): JSON ``{"survivor":
    ..., "survivor_source": ...}`` (no source from a prep before it: ""), else ("", the text)."""
    if not detail:
        return "", ""
    try:
        value = json.loads(detail)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to read
        return "", detail
    if not isinstance(value, dict):
        return "", detail
    return str(value.get("survivor_source", "")), str(value.get("survivor", detail))


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
