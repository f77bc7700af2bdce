"""The global numbering of a global stage's documents, and random access to their
attributes by number: one table for every stage that numbers documents (dedup,
paragraph_dedup), saved in its work folder as ``units.json``.

Why: every phase after the map refers to a document by its *global id* (gid), an int64
that is its position in one fixed order: first the documents of an imported index (a
previous run's, all *locked*: never removed), then this run's units sorted by
(source, unit) name, rows in order. The order depends only on unit names, never on
which worker ran what, so every decision is the same whatever the executor.

A stage's phases declare the numbering (``pipeline.phases.Numbering``): the map output
whose partitioned file counts a unit's documents (``partfile``'s ``count`` field), and the
one that holds each document's attributes (an Arrow IPC file, one row per document),
which ``DocStore`` reads back memory-mapped, a bounded number of files open.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats import partfile
from pipeline.formats.layout import Layout
from pipeline.formats.work_files import OneFile, PerUnit
from pipeline.util.printable import error_line
from pipeline.util.records import RecordError, read_record

UNITS = OneFile("units.json")
UNITS_RECORD = {
    "config": dict,
    "units": [{"source": str, "unit": str, "count": int, "docs": str, "locked": bool}],
}


def _missing(work_dir: Path, owner: str) -> str:
    """Why a work folder has no ``units.json``, in one line. Most often it is what an
    ``index_from`` names, in a run that completed and so removed its ``work/`` (``prep
    run`` keeps it only with ``--keep-work``): then the line says how to get one."""
    run = Layout.run_of(work_dir)
    if run is not None and Layout(run).manifest.exists() and not (run / Layout.WORK).exists():
        return (
            f"{work_dir}: the run in {run} completed and removed its work/, {owner}'s index with it; "
            f"to import it, run that config again with --keep-work (into another --out, or with --force)"
        )
    return f"{UNITS.path(work_dir)} is missing: {owner}'s finalize has not run in {work_dir}"


class WorkStateError(ValueError):
    """A file of a global stage's work folder (this run's, or the one an import names)
    that is missing or damaged; the message names it. Not an ``OSError``: the one-line
    error of a missing file is the OS's words, and the cause (which phase has not run)
    would be lost."""


@dataclass
class UnitTable:
    """The global order of documents: units with their first gid (``starts``)."""

    sources: list[str]
    units: list[str]
    counts: np.ndarray  # int64, documents per unit
    docs: list[str]  # absolute path of each unit's attributes file
    locked: np.ndarray  # bool: unit comes from an imported index
    config: dict  # the settings an importing run must share
    owner: str = "global stage"  # the stage, for its messages

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
            raise KeyError(f"{self.owner} has no map output for unit {unit!r} of source {source!r}") from None

    @classmethod
    def scan(
        cls, work_dir: Path, counted: PerUnit, attributes: PerUnit, config: dict, owner: str, imported_from: str = ""
    ) -> UnitTable:
        """Build the table from the committed map outputs (``counted``'s files, or where
        the work folder lives on an object store, slices of them) and the imported table."""
        sources, units, counts, docs, locked = [], [], [], [], []
        if imported_from:
            prev = cls.load(Path(imported_from), owner)
            if prev.config != config:
                diff = sorted(k for k in set(prev.config) | set(config) if prev.config.get(k) != config.get(k))
                other = ", ".join(diff)
                raise ValueError(f"index_from {imported_from} was built with other {owner} settings ({other})")
            sources += prev.sources
            units += prev.units
            counts += prev.counts.tolist()
            docs += prev.docs
            locked += [True] * len(prev.units)
        for source, unit in counted.found(work_dir, partfile.sliced_name):
            sources.append(source)
            units.append(unit)
            counts.append(partfile.header(counted.path(work_dir, source, unit))[1])
            docs.append(str(attributes.path(work_dir, source, unit).resolve()))
            locked.append(False)
        return cls(sources, units, np.array(counts, np.int64), docs, np.array(locked, bool), config, owner)

    def save(self, work_dir: Path) -> None:
        final = UNITS.path(work_dir)
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
    def load(cls, work_dir: Path, owner: str) -> UnitTable:
        """The table a finished stage saved in ``work_dir`` (this run's, or an import's);
        ``WorkStateError`` naming the file when it is missing or damaged."""
        path = UNITS.path(work_dir)
        if not path.exists():
            raise WorkStateError(_missing(Path(work_dir), owner))
        try:
            body = read_record(path, UNITS_RECORD)
        except RecordError as error:
            raise WorkStateError(f"{error} (a {owner} work folder's {UNITS.name})") from None
        rows = body["units"]
        return cls(
            [r["source"] for r in rows],
            [r["unit"] for r in rows],
            np.array([r["count"] for r in rows], np.int64),
            [str((Path(work_dir) / r["docs"]).resolve()) for r in rows],
            np.array([r["locked"] for r in rows], bool),
            body["config"],
            owner,
        )


class DocStore:
    """Random access to documents' attributes by gid, a bounded number of files open."""

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
            raise WorkStateError(f"{path}: unreadable {self.table.owner} state ({error_line(error)})") from None
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
