"""``dedup``: exact and MinHash-LSH near-duplicate removal as a global stage.

Phases (declared in ``phases``, driven by the engine, see ``pipeline.phases``), all state in
``work_dir``, its files named in ``store``:

* ``map_unit``: signatures, band keys and the exact-text key of every document;
  band records go to ``map/<source>/<unit>.bands`` grouped by key partition, per-document
  state to ``map/<source>/<unit>.docs.arrow`` (see ``store``).
* ``reduce_partition(p)``: the key partition ``p`` of every unit (and of the imported
  index) is sorted into candidate edges and compressed into a forest
  (``reduce/p<p>.forest``); its unique keys are kept as this run's index
  (``reduce/p<p>.index.npy``), which a later run can import with ``index_from``.
* finalize, in rounds of tasks the engine spreads over its workers (``rounds``):
  connected components over the forests (``clusters``), each cluster's members and
  their attributes shipped from their document range to their centre's (``shipping``,
  the only round that opens docs files), survivor and decisions per component
  (``survivors``), decisions regrouped by document range (``decisions/r<r>.arrow``,
  survivor ids resolved), then ``done.json``.
* ``open_unit`` + ``process``: the unit's decisions become ``drop_reason``
  (``exact-duplicate`` / ``near-duplicate``) and ``detail``, a JSON object
  ``{"survivor": "<id>", "survivor_source": "<source>", "similarity": 0.87, "threshold":
  0.7}`` (``min_similarity``; ``"similarity": 1.0`` and no threshold for exact
  duplicates). The source too, since an id names a document only within its source.

Incremental: ``index_from = "<previous work_dir>"`` (a run made with ``--keep-work``:
``<out>/work/global/<k>``) makes the previous run's documents
part of this run as locked documents: their band keys come from that run's index files
(nothing recomputed), they are never removed, and new documents that duplicate them
are. The previous run's settings (shingles, bands, rows, seed, partitions, ``signatures``)
must match.

Shipped signatures: ``signatures = "minhash_sim0.8"`` takes each document's MinHash
minima from that input column (``list<binary>``, one binary per band, as RedPajama-V2
ships them: see ``shipped``) instead of computing them; ``bands`` and ``rows`` must be the
column's layout (9 and 13 for RedPajama-V2's 0.8). The text is still read for the
exact-text key (``exact``) and the shingles (``verify``), never for MinHash. A document
whose signature is null or of another shape gets no LSH keys (``dedup.unsigned``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats import partfile
from pipeline.formats.documents import ID, TEXT
from pipeline.formats.unit_table import UNITS, DocStore, UnitTable
from pipeline.phases import Filter, Finalize, Map, Numbering, Phases, Reduce, Round, check_partitions, finalize_here
from pipeline.stage import GlobalStage, StageOutput, UnitContext, register
from stages.dedup import clusters, rounds
from stages.dedup.minhash import Signer
from stages.dedup.shipped import ShippedSignatures
from stages.dedup.store import BAND_RECORD, BANDS, DECISIONS, DOCS, DONE, FOREST, INDEX, docs_schema, read_index
from stages.dedup.survivors import REASONS

# The most MinHash hashes a document gets (bands x rows); published recipes use 112-450.
MAX_HASHES = 65_536

INDEX_RECORD = np.dtype([("key", "<u8"), ("gid", "<i8")])


@register
class Dedup(GlobalStage):
    name = "dedup"
    version = 3  # 2: the fold shared with decontaminate (pipeline/text/casefold.py); 3: survivor_source
    # What an imported index must have been hashed with: raised only when the band keys
    # or the documents' attributes change (2: the fold above), not with ``version``.
    index_version = 2

    @dataclass
    class Options:
        ngram: int = 5  # words per shingle
        bands: int = 14  # LSH bands ...
        rows: int = 8  # ... of this many hashes each (112 hashes: FineWeb's setting)
        seed: int = 1  # of the permutations; runs sharing an index must agree
        char_ngram: int = 5  # code points per shingle for text without spaces
        char_fallback_word_len: int = 16  # mean space-separated run longer: character shingles
        exact: bool = True  # also remove exact duplicates of the normalised text
        # Key partitions (reduce tasks) and document ranges in finalize; 0: one per GiB
        # of input text, 2 to 8,192, chosen when the run starts (an imported index's own).
        partitions: int = 0
        survivor_signal: str = ""  # column whose highest value survives (then smallest id)
        verify: bool = False  # exact Jaccard of shingle sets against the survivor
        min_similarity: float = 0.7  # remove a near duplicate only this similar to its survivor (0: pure LSH)
        index_from: str = ""  # a previous run's dedup work folder to deduplicate against
        signatures: str = ""  # input column of shipped band signatures ("": computed here)

        def __post_init__(self) -> None:
            for key in ("ngram", "bands", "rows", "char_ngram", "char_fallback_word_len"):
                if int(getattr(self, key)) < 1:
                    raise ValueError(f"dedup: {key} must be at least 1")
            if int(self.bands) * int(self.rows) > MAX_HASHES:  # 100,000 x 100,000 ended the run in a MemoryError
                raise ValueError(f"dedup: bands x rows must be at most {MAX_HASHES:,} hashes")
            if int(self.seed) < 0:  # numpy's generators take none: the run ended in their bare ValueError
                raise ValueError("dedup: seed must be at least 0")
            check_partitions("dedup", self.partitions)
            if not 0.0 <= self.min_similarity <= 1.0:
                raise ValueError("dedup: min_similarity must be within [0, 1]")

    def __init__(self, options: Dedup.Options):
        super().__init__(options)
        o = options
        self.signer = Signer(
            ngram=o.ngram,
            bands=o.bands,
            rows=o.rows,
            seed=o.seed,
            char_ngram=o.char_ngram,
            char_fallback_word_len=o.char_fallback_word_len,
        )
        self.work_dir: Path | None = None
        self._table: UnitTable | None = None  # loaded once per process for the filter phase
        self._table_from: Path | None = None
        self._unit: dict | None = None

    # -- shared -----------------------------------------------------------------------

    def phases(self) -> Phases:
        return Phases(
            map=Map(self.map_unit, writes=(BANDS, DOCS)),
            # Of each band file only its partition (the unit table reads the header a slice keeps).
            reduce=Reduce(self.reduce_partition, self.partitions(), slices=(BANDS,), writes=(FOREST, INDEX)),
            finalize=Finalize(self.finalize_plan, self.finalize_task),
            filter=Filter(reads=(DONE, UNITS, DECISIONS, DOCS)),
            numbering=self.numbering(),
            # What a later run's ``index_from`` reads: the unit table, each partition's keys,
            # and the documents' attributes, which its decide ranks against its own.
            kept=(UNITS, INDEX, DOCS),
        )

    def numbering(self) -> Numbering:
        """The global order of this run's documents (after an imported index's)."""
        return Numbering("dedup", BANDS, DOCS, self._config(), self.options.index_from)

    def _config(self) -> dict:
        """Settings that must agree between a run and the index it imports."""
        o = {**asdict(self.options), "partitions": self.partitions()}
        keys = ["ngram", "bands", "rows", "seed", "char_ngram", "char_fallback_word_len", "exact", "partitions"]
        # Shipped signatures never meet computed ones (other hashes); named only when set,
        # so an index from before the option still matches a computing run.
        # An index of another version hashed other words (none before 2 names one: refused).
        return {**{k: o[k] for k in keys + (["signatures"] if o["signatures"] else [])}, "version": self.index_version}

    # -- map ----------------------------------------------------------------------------

    def map_unit(self, batches: Iterable[pa.RecordBatch], unit: UnitContext, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        o = self.options
        bands = unit.atomic(BANDS.path(work_dir, unit.source, unit.unit))
        band_writer = partfile.Writer(bands, BAND_RECORD, self.partitions())
        schema = docs_schema(self.signer.num_hashes, o.verify)
        rows = 0
        n_keys = self.signer.bands + (1 if o.exact else 0)
        shipped = ShippedSignatures(o.signatures, o.bands, o.rows) if o.signatures else None
        docs_final = unit.atomic(DOCS.path(work_dir, unit.source, unit.unit))
        with pa.OSFile(str(docs_final), "wb") as sink, pa.ipc.new_file(sink, schema) as docs:
            for batch in batches:
                n = batch.num_rows
                if n == 0:
                    continue
                signed = self._sign(batch, shipped)
                keys, valid = self.signer.band_keys(signed)
                keys, valid = keys[:, :n_keys], valid[:, :n_keys]
                records = np.empty(int(valid.sum()), BAND_RECORD)
                records["key"] = keys[valid]
                records["row"] = np.repeat(np.arange(rows, rows + n, dtype=np.uint32), valid.sum(axis=1))
                band_writer.add(records, (records["key"] >> np.uint64(32)).astype(np.int64) % self.partitions())
                docs.write_batch(self._doc_rows(batch, signed, schema))
                rows += n
        counters = shipped.counters() if shipped else {"dedup.signed": rows}
        band_writer.close(count=rows)
        return counters

    def _sign(self, batch: pa.RecordBatch, shipped: ShippedSignatures | None) -> dict[str, np.ndarray]:
        """``Signer.sign``'s output for ``batch``, the minima from the shipped column when
        there is one (a row without a signature then counts as a text without shingles)."""
        o = self.options
        if shipped is None:
            return self.signer.sign(batch.column(TEXT), keep_shingles=o.verify)
        minima, signed = shipped.decode(batch)
        if o.exact or o.verify:
            from_text = self.signer.sign(batch.column(TEXT), keep_shingles=o.verify, minima=False)
        else:
            from_text = {"exact": np.zeros(batch.num_rows, np.uint64)}  # no key, never compared
        return {**from_text, "sigs": minima, "n_shingles": signed.astype(np.int64)}

    def _doc_rows(self, batch: pa.RecordBatch, signed: dict, schema: pa.Schema) -> pa.RecordBatch:
        n = batch.num_rows
        stored = np.ascontiguousarray(self.signer.stored(signed["sigs"]))
        signal = self.options.survivor_signal
        if signal and signal in batch.schema.names:
            quality = pc.cast(batch.column(signal), pa.float64())
        else:
            quality = pa.nulls(n, pa.float64())
        columns = [
            pc.cast(batch.column(ID), pa.string()),
            quality,
            pa.array(signed["exact"], pa.uint64()),
            pa.FixedSizeBinaryArray.from_buffers(schema.field("sig").type, n, [None, pa.py_buffer(stored.tobytes())]),
        ]
        if self.options.verify:
            columns.append(
                pa.LargeListArray.from_arrays(
                    pa.array(signed["shingle_offsets"], pa.int64()), pa.array(signed["shingles"], pa.uint64())
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    # -- reduce -------------------------------------------------------------------------

    def reduce_partition(self, partition: int, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        table = self.numbering().table(work_dir)
        keys, gids = [], []
        if self.options.index_from:
            index = read_index(INDEX.path(Path(self.options.index_from), partition), INDEX_RECORD)
            keys.append(index["key"])
            gids.append(index["gid"])
        for u in np.flatnonzero(~table.locked):
            records = partfile.read(BANDS.path(work_dir, table.sources[u], table.units[u]), partition, BAND_RECORD)
            keys.append(records["key"])
            gids.append(records["row"].astype(np.int64) + table.starts[u])
        keys = np.concatenate(keys) if keys else np.empty(0, np.uint64)
        gids = np.concatenate(gids) if gids else np.empty(0, np.int64)
        unique_keys, first_gid, forest, pairs = clusters.band_edges(keys, gids)
        index = np.empty(len(unique_keys), INDEX_RECORD)
        index["key"], index["gid"] = unique_keys, first_gid
        final = INDEX.path(work_dir, partition)
        tmp = partfile.temp_for(final)
        with open(tmp, "wb") as f:
            np.save(f, index)
        os.replace(tmp, final)
        clusters.write_adjacency(FOREST.path(work_dir, partition), forest, self.partitions())
        return {"dedup.candidate_pairs": pairs}

    # -- finalize (rounds of tasks, see ``finalize``) ----------------------------------

    def finalize_plan(self, done: list[list[dict[str, int]]]) -> Round | dict[str, int]:
        return rounds.plan(done, self.partitions())

    def finalize_task(self, round: Round, task: int, work_dir: Path) -> dict[str, int]:
        self.bind(work_dir)
        return rounds.run_task(self, round, task, work_dir)

    def finalize(self, work_dir: Path) -> dict[str, int]:
        """Every round in this process (a finished finalize just returns its counters)."""
        done = DONE.path(work_dir)
        if done.exists():
            return json.loads(done.read_text())
        return finalize_here(self.phases().finalize, work_dir)

    # -- filter -------------------------------------------------------------------------

    def open_unit(self, unit: UnitContext) -> None:
        work_dir = self.work_dir
        if work_dir is None:
            raise RuntimeError("dedup: bind(work_dir) must come before open_unit (see GlobalStage)")
        if not DONE.path(work_dir).exists():
            raise RuntimeError(f"dedup: finalize has not completed in {work_dir}")
        if self._table is None or self._table_from != work_dir:
            self.bind(work_dir)
            self._table, self._table_from = self.numbering().saved(work_dir), work_dir
            self._store = DocStore(self._table)
        t = self._table
        u = t.index_of(unit.source, unit.unit)
        start, end = int(t.starts[u]), int(t.starts[u + 1])
        # The document ranges holding this unit's gids (none for a unit left empty).
        first, last = clusters.node_partition(np.array([start, end - 1]), t.total, self.partitions())
        decided = [_read_decisions(DECISIONS.path(work_dir, r)) for r in range(first, last + 1)] if end > start else []
        rows = pa.concat_tables(decided) if decided else _read_decisions(DECISIONS.path(work_dir, 0)).slice(0, 0)
        gid = rows.column("gid").to_numpy()
        rows = rows.filter(pa.array((gid >= start) & (gid < end)))
        positions = rows.column("gid").to_numpy() - start
        reason = np.full(end - start, -1, np.int16)
        reason[positions] = rows.column("reason").to_numpy()
        detail = np.full(end - start, None, object)
        # A near duplicate's similarity was held against min_similarity: the detail gives
        # both, as every threshold rule's does; an exact duplicate's 1.0 met no threshold.
        near = REASONS.index("near-duplicate")
        sources = np.asarray(t.sources, object)[t.unit_of(rows.column("survivor_gid").to_numpy())]
        survivors, similarities, codes = (rows.column(n).to_pylist() for n in ("survivor", "similarity", "reason"))
        for pos, sid, source, sim, code in zip(positions, survivors, sources, similarities, codes):
            found = {"survivor": sid, "survivor_source": source, "similarity": round(float(sim), 4)}
            if code == near:
                found["threshold"] = float(self.options.min_similarity)
            detail[pos] = json.dumps(found)
        ids = self._store.unit_rows(u).column("id").combine_chunks()
        self._unit = {"reason": reason, "detail": detail, "ids": ids, "cursor": 0}

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        state = self._unit
        if state is None:
            raise RuntimeError("dedup: process called before open_unit")
        lo, hi = state["cursor"], state["cursor"] + batch.num_rows
        if hi > len(state["reason"]):
            raise ValueError(f"dedup: unit has {len(state['reason'])} mapped documents, got more")
        if not state["ids"].slice(lo, batch.num_rows).equals(pc.cast(batch.column(ID), pa.string())):
            raise ValueError("dedup: documents differ from those seen in map_unit (order or content)")
        state["cursor"] = hi
        codes = state["reason"][lo:hi]
        dropped = codes >= 0
        drop = pc.take(pa.array(REASONS, pa.string()), pa.array(np.where(dropped, codes, 0), mask=~dropped))
        detail = pa.array(state["detail"][lo:hi], pa.string())
        # No counters: finalize's summary already counts the removed documents, and the
        # manifest adds a stage's counters from both, which counted each one twice.
        return StageOutput(batch=batch, drop_reason=drop, detail=detail)

    def close_unit(self, unit: UnitContext) -> dict[str, int]:
        state, self._unit = self._unit, None
        if state is not None and state["cursor"] != len(state["reason"]):
            raise ValueError(
                f"dedup: unit {unit.unit} mapped {len(state['reason'])} documents, filtered {state['cursor']}"
            )
        return {}


def _read_decisions(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()
