"""``paragraph_dedup``: exact dedup of paragraphs (or lines) across the whole run.

Phases (declared in ``phases``, see ``pipeline.phases``; files named in ``work``):

* ``map_unit``: cut every document into units (``split``), hash the counted ones, write
  (hash, row, unit index, characters) grouped by hash partition, and each document's id
  and counted characters;
* ``reduce_partition(p)``: sort partition ``p`` of every unit by (hash, gid, unit index):
  the first of each hash stays, every other occurrence is recorded as removed;
* ``finalize``: per document range, each document's removed units, its seen fraction,
  whether it is dropped and where its largest removed unit first occurred;
* ``open_unit`` + ``process``: the unit's decisions become cut text, or a drop reason
  ``partial-copy`` with a JSON ``detail``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats import partfile
from pipeline.formats.documents import ID, TEXT, set_column
from pipeline.formats.unit_table import UNITS, UnitTable
from pipeline.phases import Filter, Finalize, Map, Phases, Reduce, check_partitions
from pipeline.stage import GlobalStage, StageOutput, UnitContext, register
from pipeline.util.atomic import write_json_atomic
from stages.paragraph_dedup import work
from stages.paragraph_dedup.split import UNIT_MODES, Units, removed_units

REASON = "partial-copy"


@register
class ParagraphDedup(GlobalStage):
    name = "paragraph_dedup"

    @dataclass
    class Options:
        # "paragraph": blank-line separated blocks; "line": every line; "auto": per document,
        # blocks where blank lines separate them, else lines (C4, CCNet: a paragraph a line).
        unit: str = "auto"
        # Units with fewer code points (whitespace trimmed) are short: never deduplicated on
        # their own, removed only between two removed units ("Home" inside a removed menu).
        min_chars: int = 20
        # Drop a document when more than this fraction of its counted characters was seen
        # earlier in the run (1.0: never drop, only cut).
        max_seen_fraction: float = 0.5
        # Hash partitions (reduce tasks) and document ranges in finalize; 0: one per GiB of
        # input text, 2 to 8,192, chosen when the run starts.
        partitions: int = 0

        def __post_init__(self) -> None:
            if self.unit not in UNIT_MODES:
                raise ValueError(f"paragraph_dedup: unit must be one of {', '.join(UNIT_MODES)}, not {self.unit!r}")
            if int(self.min_chars) < 0:
                raise ValueError("paragraph_dedup: min_chars must be at least 0")
            if not 0.0 <= float(self.max_seen_fraction) <= 1.0:
                raise ValueError("paragraph_dedup: max_seen_fraction must be within [0, 1]")
            check_partitions("paragraph_dedup", self.partitions)

    def __init__(self, options: ParagraphDedup.Options):
        super().__init__(options)
        self.work_dir: Path | None = None
        self._table: UnitTable | None = None
        self._table_from: Path | None = None
        self._unit: dict | None = None

    def phases(self) -> Phases:
        return Phases(
            map=Map(self.map_unit, writes=(work.PARAS, work.DOCS)),
            reduce=Reduce(self.reduce_partition, self.partitions(), reads=(work.PARAS,), writes=(work.REDUCED,)),
            finalize=Finalize.once(self.finalize, reads=(work.PARAS, work.DOCS, work.REDUCED)),
            filter=Filter(reads=(work.DONE, UNITS, work.DECISIONS, work.DOCS)),
            numbering=work.numbering(),
        )

    def _units(self, texts: pa.Array, hashed: bool) -> Units:
        return Units(texts, self.options.unit, int(self.options.min_chars), hashed)

    # -- map ----------------------------------------------------------------------------

    def map_unit(self, batches: Iterable[pa.RecordBatch], unit: UnitContext, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        paras = unit.atomic(work.PARAS.path(work_dir, unit.source, unit.unit))
        writer = partfile.Writer(paras, work.PARA, self.partitions())
        docs_final = unit.atomic(work.DOCS.path(work_dir, unit.source, unit.unit))
        rows = 0
        with pa.OSFile(str(docs_final), "wb") as sink, pa.ipc.new_file(sink, work.DOCS_SCHEMA) as docs:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                units = self._units(batch.column(TEXT), hashed=True)
                counted = ~units.short
                records = np.empty(int(counted.sum()), work.PARA)
                records["hash"] = units.hashes[counted]
                records["row"] = units.doc[counted] + rows
                records["para"] = units.index[counted]
                records["chars"] = np.minimum(units.chars[counted], 2**32 - 1)
                writer.add(records, work.hash_partition(records["hash"], self.partitions()))
                ids = pc.cast(batch.column(ID), pa.string())
                docs.write_batch(pa.record_batch([ids, pa.array(units.counted_chars())], schema=work.DOCS_SCHEMA))
                rows += batch.num_rows
        writer.close(count=rows)
        return {"paragraph_dedup.mapped": rows}

    # -- reduce and finalize ------------------------------------------------------------

    def reduce_partition(self, partition: int, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        return work.first_occurrences(Path(work_dir), partition, self.partitions())

    def finalize(self, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        done = work.DONE.path(work_dir)
        if done.exists():
            return json.loads(done.read_text())
        counters = work.decide(Path(work_dir), self.partitions(), float(self.options.max_seen_fraction))
        write_json_atomic(done, counters)
        return counters

    # -- filter -------------------------------------------------------------------------

    def open_unit(self, unit: UnitContext) -> None:
        work_dir = self.work_dir
        if work_dir is None:
            raise RuntimeError("paragraph_dedup: bind(work_dir) must come before open_unit (see GlobalStage)")
        if not work.DONE.path(work_dir).exists():
            raise RuntimeError(f"paragraph_dedup: finalize has not completed in {work_dir}")
        if self._table is None or self._table_from != work_dir:
            self._table, self._table_from = work.numbering().saved(work_dir), work_dir
        t = self._table
        u = t.index_of(unit.source, unit.unit)
        start, end = int(t.starts[u]), int(t.starts[u + 1])
        if end > start:
            first, last = work.document_range(np.array([start, end - 1]), t.total, self.partitions())
            tables = [work.read_arrow(work.DECISIONS.path(work_dir, r)) for r in range(first, last + 1)]
            decided = pa.concat_tables(tables)
            gid = decided.column("gid").to_numpy()
            decided = decided.filter(pa.array((gid >= start) & (gid < end)))
        else:
            decided = work.DECISIONS_SCHEMA.empty_table()
        ids = work.read_arrow(work.DOCS.path(work_dir, unit.source, unit.unit))
        self._unit = {
            "rows": decided.column("gid").to_numpy() - start,
            "decided": pa.RecordBatch.from_arrays(
                [c.combine_chunks() for c in decided.columns], schema=work.DECISIONS_SCHEMA
            ),
            "ids": ids.column("id").combine_chunks(),
            "chars": ids.column("chars").to_numpy(),
            "cursor": 0,
        }

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        state = self._unit
        if state is None:
            raise RuntimeError("paragraph_dedup: process called before open_unit")
        n = batch.num_rows
        lo, hi = state["cursor"], state["cursor"] + n
        if hi > len(state["ids"]) or not state["ids"].slice(lo, n).equals(pc.cast(batch.column(ID), pa.string())):
            raise ValueError("paragraph_dedup: documents differ from those seen in map_unit (order or content)")
        state["cursor"] = hi
        units = self._units(batch.column(TEXT), hashed=False)
        if not np.array_equal(units.counted_chars(), state["chars"][lo:hi]):
            raise ValueError("paragraph_dedup: documents differ from those seen in map_unit (text)")
        a, b = np.searchsorted(state["rows"], [lo, hi])
        decided = state["decided"].slice(a, b - a)
        rows = state["rows"][a:b] - lo
        drop = np.zeros(n, bool)
        drop[rows] = decided.column("drop").to_numpy(zero_copy_only=False)
        paras = decided.column("paras")
        counts = pc.list_value_length(paras).to_numpy(zero_copy_only=False).astype(np.int64)
        hit = np.zeros(len(units.doc), bool)
        hit[units.starts[np.repeat(rows, counts)] + pc.list_flatten(paras).to_numpy().astype(np.int64)] = True
        if (hit & units.short).any():
            raise ValueError("paragraph_dedup: documents differ from those seen in map_unit (units)")
        removed = removed_units(units, hit & ~drop[units.doc])
        detail = np.full(n, None, object)
        for row, seen, chars, first_id in zip(
            rows, decided.column("seen").to_numpy(), decided.column("chars").to_numpy(), decided.column("first_id")
        ):
            if drop[row]:
                detail[row] = json.dumps(
                    {
                        "seen_fraction": round(int(seen) / int(chars), 4),
                        "seen_chars": int(seen),
                        "chars": int(chars),
                        "threshold": float(self.options.max_seen_fraction),
                        "first_seen_in": first_id.as_py(),
                    }
                )
        changed = np.bincount(units.doc[removed], minlength=n) > 0
        if removed.any():
            batch = set_column(batch, TEXT, units.rebuild(removed))
        reason = pa.array(np.where(drop, REASON, None), pa.string())
        counters = {
            "paragraph_dedup.units_removed": int(removed.sum()),
            "paragraph_dedup.chars_removed": int(units.chars[removed].sum()),
        }
        return StageOutput(
            batch=batch,
            drop_reason=reason,
            detail=pa.array(detail, pa.string()),
            changed=int((changed & ~drop).sum()),
            counters=counters,
        )

    def close_unit(self, unit: UnitContext) -> dict[str, int]:
        state, self._unit = self._unit, None
        if state is not None and state["cursor"] != len(state["ids"]):
            mapped, seen = len(state["ids"]), state["cursor"]
            raise ValueError(f"paragraph_dedup: unit {unit.unit} mapped {mapped} documents, filtered {seen}")
        return {}
