"""Where each document's dedup state lives on disk, and how a global id finds it.

Why: every later phase refers to documents by a *global id* (gid), an int64 that is the
document's position in one fixed order: first the documents of an imported index (a
previous run, all "locked": never removed), then this run's units sorted by
(source, unit) name, rows in order. The order depends only on unit names, never on
which worker ran what, so every decision is the same whatever the executor.

Per unit, ``map_unit`` writes two files under ``work_dir/map/<source>/``:

* ``<unit>.bands``: the unit's band keys as a partitioned record file (see ``partfile``),
  its ``count`` field holding the number of documents;
* ``<unit>.docs.arrow``: an Arrow IPC file, one row per document: ``id``, ``quality``
  (the survivor signal, null when absent), ``exact`` (normalised-text hash), ``sig``
  (16-bit stored signature) and, with ``verify``, ``shingles`` (sorted unique 64-bit
  shingle hashes). Read back memory-mapped, so a lookup touches only the rows it needs.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats import partfile
from pipeline.util.printable import error_line
from pipeline.util.records import RecordError, read_record

BAND_RECORD = np.dtype([("key", "<u8"), ("row", "<u4")])
UNITS_FILE = "units.json"
UNITS_RECORD = {
    "config": dict,
    "units": [{"source": str, "unit": str, "count": int, "docs": str, "locked": bool}],
}


class DedupStateError(ValueError):
    """A file of a dedup work folder (this run's, or the one ``index_from`` names) that is
    missing or damaged; the message names it. Not an ``OSError``: the one-line error of a
    missing file is the OS's words, and the cause (which phase has not run) would be lost."""


def read_index(path: Path, dtype: np.dtype) -> np.ndarray:
    """A partition's band index (``reduce/p<p>.index.npy``), checked: a run importing it must
    be told which file is missing, cut short or not an index, not numpy's bare complaint."""
    try:
        index = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DedupStateError(f"{path} is missing: dedup's reduce has not run there") from None
    except (OSError, ValueError, EOFError) as error:
        raise DedupStateError(f"{path}: not a dedup band index ({error_line(error)})") from None
    if index.dtype != dtype or index.ndim != 1:
        raise DedupStateError(f"{path}: not a dedup band index ({index.dtype}, shape {index.shape})")
    return index


def map_dir(work_dir: Path) -> Path:
    return Path(work_dir) / "map"


def bands_path(work_dir: Path, source: str, unit: str) -> Path:
    return map_dir(work_dir) / source / f"{unit}.bands"


def docs_path(work_dir: Path, source: str, unit: str) -> Path:
    return map_dir(work_dir) / source / f"{unit}.docs.arrow"


def forest_path(work_dir: Path, partition: int) -> Path:
    """Key partition ``partition``'s forest of candidate edges (``clusters.band_edges``)."""
    return Path(work_dir) / "reduce" / f"p{partition:05d}.forest"


def decisions_path(work_dir: Path, document_range: int) -> Path:
    """One document range's removals, sorted by gid, with their survivor's id resolved
    so that the filter phase reads only its own unit's files."""
    return Path(work_dir) / "decisions" / f"r{document_range:05d}.arrow"


def docs_schema(stored_width: int, verify: bool) -> pa.Schema:
    fields = [
        pa.field("id", pa.string()),
        pa.field("quality", pa.float64()),
        pa.field("exact", pa.uint64()),
        pa.field("sig", pa.binary(2 * stored_width)),
    ]
    if verify:
        fields.append(pa.field("shingles", pa.large_list(pa.uint64())))
    return pa.schema(fields)


@dataclass
class UnitTable:
    """The global order of documents: units with their first gid (``starts``)."""

    sources: list[str]
    units: list[str]
    counts: np.ndarray  # int64, documents per unit
    docs: list[str]  # absolute path of each unit's docs file
    locked: np.ndarray  # bool: unit comes from an imported index
    config: dict

    def __post_init__(self) -> None:
        self.starts = np.zeros(len(self.counts) + 1, np.int64)
        np.cumsum(self.counts, out=self.starts[1:])
        self._by_name = {(s, u): i for i, (s, u) in enumerate(zip(self.sources, self.units))}

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    @property
    def imported(self) -> int:
        """Documents that come from the imported index (they hold gids ``0..imported-1``)."""
        return int(self.counts[self.locked].sum())

    def unit_of(self, gids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, gids, side="right") - 1

    def index_of(self, source: str, unit: str) -> int:
        try:
            return self._by_name[(source, unit)]
        except KeyError:
            raise KeyError(f"dedup has no map output for unit {unit!r} of source {source!r}") from None

    @classmethod
    def scan(cls, work_dir: Path, config: dict, index_from: str = "") -> UnitTable:
        """Build the table from the committed map outputs (and the imported index's table)."""
        sources, units, counts, docs, locked = [], [], [], [], []
        if index_from:
            prev = cls.load(Path(index_from))
            if prev.config != config:
                diff = sorted(k for k in set(prev.config) | set(config) if prev.config.get(k) != config.get(k))
                raise ValueError(f"index_from {index_from} was built with other dedup settings ({', '.join(diff)})")
            sources += prev.sources
            units += prev.units
            counts += prev.counts.tolist()
            docs += prev.docs
            locked += [True] * len(prev.units)
        root = map_dir(work_dir)
        found = set()  # a unit's band file, or where it lives on an object store, slices of it
        if root.is_dir():
            for source_dir in root.iterdir():
                if source_dir.is_dir():
                    for f in source_dir.iterdir():
                        name = partfile.sliced_name(f.name) or f.name
                        if name.endswith(".bands") and not name.startswith("."):
                            found.add((source_dir.name, name[: -len(".bands")]))
        for source, unit in sorted(found):
            _, count, _ = partfile.header(bands_path(work_dir, source, unit))
            sources.append(source)
            units.append(unit)
            counts.append(count)
            docs.append(str(docs_path(work_dir, source, unit).resolve()))
            locked.append(False)
        return cls(sources, units, np.array(counts, np.int64), docs, np.array(locked, bool), config)

    def save(self, work_dir: Path) -> None:
        final = Path(work_dir) / UNITS_FILE
        tmp = partfile.temp_for(final)
        # Paths relative to the work folder: the same run in another folder writes the
        # same bytes, and a moved run still finds its files.
        base = Path(work_dir).resolve()
        body = {
            "config": self.config,
            "units": [
                {"source": s, "unit": u, "count": int(c), "docs": os.path.relpath(d, base), "locked": bool(lk)}
                for s, u, c, d, lk in zip(self.sources, self.units, self.counts, self.docs, self.locked)
            ],
        }
        tmp.write_text(json.dumps(body, indent=1))
        os.replace(tmp, final)

    @classmethod
    def load(cls, work_dir: Path) -> UnitTable:
        """The table a finished dedup saved in ``work_dir`` (this run's, or an ``index_from``'s);
        ``DedupStateError`` naming the file when it is missing or damaged."""
        path = Path(work_dir) / UNITS_FILE
        if not path.exists():
            raise DedupStateError(f"{path} is missing: dedup's finalize has not run in {work_dir}")
        try:
            body = read_record(path, UNITS_RECORD)
        except RecordError as error:
            raise DedupStateError(f"{error} (a dedup work folder's {UNITS_FILE})") from None
        rows = body["units"]
        return cls(
            [r["source"] for r in rows],
            [r["unit"] for r in rows],
            np.array([r["count"] for r in rows], np.int64),
            [str((Path(work_dir) / r["docs"]).resolve()) for r in rows],
            np.array([r["locked"] for r in rows], bool),
            body["config"],
        )


class DocStore:
    """Random access to documents' dedup state by gid, a bounded number of files open."""

    def __init__(self, table: UnitTable, max_open: int = 16):
        self.table = table
        self.max_open = max_open
        self._open: OrderedDict[int, pa.Table] = OrderedDict()

    def _unit(self, u: int) -> pa.Table:
        if u in self._open:
            self._open.move_to_end(u)
            return self._open[u]
        path = self.table.docs[u]
        try:
            with pa.memory_map(path) as source:
                t = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowInvalid) as error:  # an imported index's file, moved or cut short
            raise DedupStateError(f"{path}: unreadable dedup state ({error_line(error)})") from None
        self._open[u] = t
        if len(self._open) > self.max_open:
            self._open.popitem(last=False)
        return t

    def unit_rows(self, u: int) -> pa.Table:
        return self._unit(u)

    def gather(self, gids: np.ndarray, columns: list[str]) -> pa.Table:
        """Rows for ``gids`` (any order, repeats allowed), in that order."""
        gids = np.asarray(gids, np.int64)
        if len(gids) == 0:
            return pa.table({c: pa.array([]) for c in columns})
        units = self.table.unit_of(gids)
        order = np.argsort(units, kind="stable")
        bounds = np.flatnonzero(np.diff(units[order])) + 1
        parts = []
        for chunk in np.split(order, bounds):
            u = int(units[chunk[0]])
            rows = gids[chunk] - self.table.starts[u]
            parts.append(self._unit(u).select(columns).take(pa.array(rows)))
        gathered = pa.concat_tables(parts).combine_chunks()
        inverse = np.empty(len(gids), np.int64)
        inverse[order] = np.arange(len(gids))
        return gathered.take(pa.array(inverse))


def fixed_binary_matrix(column: pa.ChunkedArray | pa.Array, dtype=np.uint16) -> np.ndarray:
    """A fixed_size_binary column as a [rows, width] numpy matrix (no per-row objects)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = arr.type.byte_width
    data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width : (arr.offset + len(arr)) * width]
    return data.view(dtype).reshape(len(arr), width // np.dtype(dtype).itemsize)


def list_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list<uint64> column as (values, int64 offsets rebased to 0)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(arr.offsets.to_numpy(), np.int64)
    values = np.asarray(pc.list_flatten(arr).to_numpy(), np.uint64)
    return values, offsets - offsets[0]
