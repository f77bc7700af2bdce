"""A new global stage is one package and no engine change: a toy exact-duplicate stage
(the text's hash, the first occurrence in the run's document order survives), declared
as phases here, in the test, and run through ``prep run`` like a built-in one; and a toy
stage whose phases read no documents (a word list built once, as decontaminate's index).

It uses what every global stage gets from the engine: the declared work files, the
numbering (``formats.unit_table``), the sizing of ``partitions = 0``, the markers of
each phase (a second run does nothing and leaves the same bytes)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner
from conftest import write_config, write_jsonl

from pipeline.commands.main import main
from pipeline.formats import partfile
from pipeline.formats.documents import ID, TEXT
from pipeline.formats.layout import Layout
from pipeline.formats.unit_table import UNITS
from pipeline.formats.work_files import OneFile, PerIndex, PerUnit, keyed
from pipeline.kernels.hashing import id_hashes
from pipeline.phases import Filter, Finalize, Map, Numbering, Phases, Reduce, check_partitions
from pipeline.stage import GlobalStage, StageOutput, UnitContext, register
from pipeline.util.atomic import save_npy_atomic, write_json_atomic

HASHES = PerUnit("map", ".hashes")  # (hash, row) records of a unit, partitioned by hash
IDS = PerUnit("map", ".ids.arrow")  # a unit's ids, one row per document: the numbering's attributes
REPEATS = PerIndex("reduce", "p", ".npy")  # a partition's later occurrences, as gids
REMOVED = OneFile("removed.npy")  # every removed gid, sorted
RECORD = np.dtype([("hash", "<u8"), ("row", "<u4")])


@register
class ExactHash(GlobalStage):
    name = "toy_exact_hash"

    @dataclass
    class Options:
        partitions: int = 0  # 0: the run chooses

        def __post_init__(self) -> None:
            check_partitions("toy_exact_hash", self.partitions)

    def phases(self) -> Phases:
        return Phases(
            map=Map(self.map, writes=(HASHES, IDS)),
            reduce=Reduce(self.reduce, self.partitions(), reads=(HASHES,), writes=(REPEATS,)),
            finalize=Finalize.once(self.finalize, reads=(HASHES, IDS, REPEATS)),
            filter=Filter(reads=(UNITS, REMOVED)),
            numbering=Numbering(self.name, HASHES, IDS, {}),
            kept=(REMOVED,),
        )

    def map(self, batches: Iterable[pa.RecordBatch], unit: UnitContext, work: Path) -> dict[str, int]:
        writer = partfile.Writer(unit.atomic(HASHES.path(work, unit.source, unit.unit)), RECORD, self.partitions())
        schema = pa.schema([pa.field(ID, pa.string())])
        rows = 0
        with pa.OSFile(str(unit.atomic(IDS.path(work, unit.source, unit.unit))), "wb") as sink:
            with pa.ipc.new_file(sink, schema) as ids:
                for batch in batches:
                    records = np.empty(batch.num_rows, RECORD)
                    records["hash"] = id_hashes(batch.column(TEXT))
                    records["row"] = np.arange(rows, rows + batch.num_rows)
                    writer.add(records, (records["hash"] % np.uint64(self.partitions())).astype(np.int64))
                    ids.write_batch(pa.record_batch([batch.column(ID)], schema=schema))
                    rows += batch.num_rows
        writer.close(count=rows)
        return {"toy_exact_hash.mapped": rows}

    def reduce(self, partition: int, work: Path) -> dict[str, int]:
        table = self.phases().numbering.table(work)
        parts = [partfile.read(HASHES.path(work, s, u), partition, RECORD) for s, u in zip(table.sources, table.units)]
        hashes = np.concatenate([p["hash"] for p in parts] or [np.empty(0, np.uint64)])
        gids = np.concatenate([p["row"] + table.starts[u] for u, p in enumerate(parts)] or [np.empty(0, np.int64)])
        order = np.lexsort((gids, hashes))
        later = np.zeros(len(order), bool)
        later[1:] = hashes[order][1:] == hashes[order][:-1]
        save_npy_atomic(REPEATS.path(work, partition), np.sort(gids[order][later]).astype(np.int64))
        return {}

    def finalize(self, work: Path) -> dict[str, int]:
        table = self.phases().numbering.table(work)
        table.save(work)
        removed = np.sort(np.concatenate([np.load(p) for p in REPEATS.paths(work, self.partitions())]))
        save_npy_atomic(REMOVED.path(work), removed)
        return {"toy_exact_hash.removed": len(removed)}

    def open_unit(self, unit: UnitContext) -> None:
        table = self.phases().numbering.saved(self.work_dir)
        u = table.index_of(unit.source, unit.unit)
        removed = np.load(REMOVED.path(self.work_dir))
        self.rows = removed[(removed >= table.starts[u]) & (removed < table.starts[u + 1])] - table.starts[u]
        self.cursor = 0

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        lo, self.cursor = self.cursor, self.cursor + batch.num_rows
        drop = np.zeros(batch.num_rows, bool)
        drop[self.rows[(self.rows >= lo) & (self.rows < self.cursor)] - lo] = True
        return StageOutput(batch=batch, drop_reason=pa.array(np.where(drop, "hash-duplicate", None), pa.string()))


def _run(config: Path, out: Path, *flags: str) -> None:
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(out), "-w", "1", "-q", *flags])
    assert result.exit_code == 0, result.output


def test_a_global_stage_declared_in_a_test_runs_through_prep_run(tmp_path):
    texts = ["alpha " * 40, "beta " * 40, "alpha " * 40, "gamma " * 40]
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": f"a{i}", "text": t} for i, t in enumerate(texts)])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": f"b{i}", "text": t} for i, t in enumerate(texts[:2])])
    config = write_config(
        tmp_path / "run.toml",
        f'[sources.web]\npaths = ["{tmp_path / "in"}/*.jsonl"]\n\n[[stages]]\nname = "toy_exact_hash"\n',
    )
    out = tmp_path / "out"
    _run(config, out, "--keep-work")
    layout = Layout(out)
    kept = sorted(i for f in layout.doc_files("web") for i in pq.read_table(f).column("id").to_pylist())
    rejected = {row["id"]: row["reason"] for f in layout.reject_files("web") for row in pq.read_table(f).to_pylist()}
    # Units in name order (a before b), rows in order: the first of each text survives.
    assert kept == ["a0", "a1", "a3"]
    assert rejected == {"a2": "hash-duplicate", "b0": "hash-duplicate", "b1": "hash-duplicate"}
    manifest = json.loads(layout.manifest.read_text())
    assert json.loads(layout.state.read_text())["sized"] == {"0": {"partitions": 2}}  # the run chose
    assert "toy_exact_hash.removed" in json.dumps(manifest)
    # --keep-work kept what the stage declared, and nothing else of its work folder.
    work = layout.global_work(1)
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == [REMOVED.name]
    before = {p: p.read_bytes() for p in (out / "docs").rglob("*.parquet")}
    _run(config, out)  # a finished run again: every phase's markers are there
    assert {p: p.read_bytes() for p in (out / "docs").rglob("*.parquet")} == before
    assert REMOVED.path(work).exists()  # what the finished run kept stays, the flag given again or not


@register
class Undeclared(ExactHash):
    """The same stage, its map declaring only one of the two files it writes."""

    name = "toy_undeclared"

    def phases(self) -> Phases:
        return replace(super().phases(), map=Map(self.map, writes=(HASHES,)))


def test_a_map_that_writes_an_undeclared_file_is_refused(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a0", "text": "alpha " * 40}])
    config = write_config(
        tmp_path / "run.toml",
        f'[sources.web]\npaths = ["{tmp_path / "in"}/*.jsonl"]\n\n[[stages]]\nname = "toy_undeclared"\n',
    )
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "-w", "1", "-q"])
    assert result.exit_code != 0
    assert "toy_undeclared: its map wrote files its phases do not declare" in result.output
    assert "a.jsonl.ids.arrow)" in result.output  # the file, named


@register
class Banned(GlobalStage):
    """A global stage whose phases read no documents: its finalize writes its word list
    once for the run (as decontaminate's index of its benchmarks), its filter drops the
    documents that hold one of the words."""

    name = "toy_banned"

    @dataclass
    class Options:
        words: list[str] = field(default_factory=list)

    def phases(self) -> Phases:
        return Phases(
            map=None, finalize=Finalize.once(self.finalize), filter=Filter(reads=self.lists()), kept=self.lists()
        )

    def lists(self) -> tuple[OneFile, ...]:
        """One list per setting: sources whose options differ read their own."""
        return keyed("-".join(sorted(self.options.words)) or "none", ("words.json",))

    def finalize(self, work: Path) -> dict[str, int]:
        write_json_atomic(self.lists()[0].path(work), sorted(self.options.words))
        return {}

    def open_unit(self, unit: UnitContext) -> None:
        self.words = json.loads(self.lists()[0].path(self.work_dir).read_text())

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        texts = batch.column(TEXT).to_pylist()
        reasons = [next((w for w in self.words if w in text.split()), None) for text in texts]
        return StageOutput(batch=batch, drop_reason=pa.array(reasons, pa.string()))


def test_a_global_stage_without_a_map_is_prepared_once_per_setting_and_cuts_no_segment(tmp_path):
    for source in ("web", "code"):
        rows = [{"id": f"{source}{i}", "text": t} for i, t in enumerate(["alpha one", "beta two", f"gamma {source}"])]
        write_jsonl(tmp_path / "in" / source / "a.jsonl", rows)
    config = write_config(
        tmp_path / "run.toml",
        f'[sources.web]\npaths = ["{tmp_path / "in/web"}/*.jsonl"]\n'
        f'[sources.code]\npaths = ["{tmp_path / "in/code"}/*.jsonl"]\n\n'
        '[[stages]]\nname = "toy_banned"\nwords = ["alpha"]\n[stages.per_source.code]\nwords = ["beta"]\n\n'
        '[[stages]]\nname = "toy_exact_hash"\n',
    )
    out = tmp_path / "out"
    _run(config, out, "--keep-work")  # the prepared files, looked at below
    layout = Layout(out)
    rejected = {
        row["id"]: row["reason"]
        for s in ("web", "code")
        for f in layout.reject_files(s)
        for row in pq.read_table(f).to_pylist()
    }
    assert rejected == {"web0": "alpha", "code1": "beta"}
    # No segment of its own: the banned rows are segment 0's, the exact-hash stage opens segment 1.
    assert {f.name for s in ("web", "code") for f in layout.reject_files(s)} == {"00000-a.jsonl.s0.parquet"}
    assert (out / "stats" / "global-1").is_dir()
    work = layout.stage_work("toy_banned")
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == [
        "alpha/words.json",
        "beta/words.json",
    ]
    before = {p: p.read_bytes() for p in (out / "rejects").rglob("*.parquet")}
    _run(config, out)  # a finished run again: the finalize's markers are there
    assert {p: p.read_bytes() for p in (out / "rejects").rglob("*.parquet")} == before
