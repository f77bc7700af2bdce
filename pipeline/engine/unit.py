"""One unit of work: one segment of the stage chain over one input file, or one piece of it.

Everything a unit writes goes to temporary names and is renamed when the unit commits;
its stats file, written last, is the completion marker. A unit that was killed part-way
has no marker and simply runs again, producing the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.engine.config import Config, StageConfig
from pipeline.engine.fetch import pull_work, unit_documents
from pipeline.engine.inputs_read import without_files
from pipeline.engine.plan import Segment, Unit, plan_segments, stage_labels
from pipeline.engine.run_options import RunOptions
from pipeline.engine.sample_estimate import add, new_tally, text_bytes
from pipeline.engine.sinks import ParquetSink
from pipeline.engine.stage_registry import registry
from pipeline.engine.storage import RunStore
from pipeline.engine.unit_inputs import unit_inputs
from pipeline.engine.unit_outputs import OUTPUTS, written_outputs
from pipeline.engine.versions import InputChanged
from pipeline.formats.documents import (
    ID,
    LEDGER_SCHEMA,
    TEXT,
    count_values,
    internal_columns,
    ledger_rows,
    split_by_reason,
)
from pipeline.formats.layout import Layout, ledger_stem, part_files
from pipeline.kernels.hashing import id_hashes, in_sample
from pipeline.readers import InputSpec
from pipeline.stage import Stage, UnitContext
from pipeline.util.atomic import save_npy, write_json, write_json_atomic

UNREADABLE_FILE = "bad-input:unreadable-file"

# The tokenize stage's per-document column: summed for the tokens/s of the progress line.
TOKENS = "n_tokens"

Progress = Callable[[int, int, int], None]  # (documents, input bytes, tokens) since the last call

_built: dict[tuple[int, str, str, str], Stage] = {}
_stage_columns: dict[str, frozenset[str]] = {}


def built_stage(index: int, stage: StageConfig, source: str) -> Stage:
    """Stages are built once per process, source and options (models and tables load
    once); the options belong to the key, since one process may run several configs."""
    options = json.dumps([stage.options, stage.per_source.get(source, {})], sort_keys=True, default=str)
    key = (index, stage.name, source, options)
    if key not in _built:
        _built[key] = stage.build(source)
    return _built[key]


class StageTally:
    def __init__(self) -> None:
        self.input = self.output = self.changed = 0
        self.rejected: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()

    def as_dict(self) -> dict:
        return {
            "input": self.input,
            "output": self.output,
            "rejected": dict(sorted(self.rejected.items())),
            "changed": self.changed,
            "counters": dict(sorted(self.counters.items())),
        }


def segment_task(
    config: Config, store: RunStore, segment_index: int, unit: Unit, options: RunOptions, progress=None
) -> dict:
    """A unit's task in one segment, as the executor runs it (on any machine): fetch what
    it reads, run it, and return its stats ``without_files``."""
    segment = plan_segments(config)[segment_index]
    layout = Layout(store.root)
    if segment_index > 0:
        unit_documents(store, layout, segment_index - 1, unit)  # checked; ``_batches`` reads them
    for stage, work in _filters(config, layout, segment, unit):
        pull_work(store, layout.key(work), stage.phases().filter.globs(unit.source, unit.name))
    stats = run_unit(config, store, options, segment, unit, progress=progress)
    return without_files(stats)  # the manifest reads them from the marker (files_read)


def _filters(config: Config, layout: Layout, segment: Segment, unit: Unit) -> list[tuple[Stage, Path]]:
    """The global stages that filter the unit in this segment, each with the work folder
    its earlier phases left their files in: the stage opening the segment, and the
    stages of its chain whose phases read no documents (prepared before the first)."""
    found = []
    for s in ([segment.entry] if segment.entry else []) + segment.stages:
        if s.applies_to(unit.source) and (s is segment.entry or s.is_prepared):
            work = layout.global_work(segment.index) if s is segment.entry else layout.stage_work(s.name)
            found.append((built_stage(config.stages.index(s), s, unit.source), work))
    return found


def run_unit(
    config: Config, store: RunStore, options: RunOptions, segment: Segment, unit: Unit, progress: Progress | None = None
) -> dict:
    """Run one segment of the stage chain over one unit, commit what it wrote, and
    return its stats (the marker's contents)."""
    started = time.process_time()
    layout = Layout(store.root)
    labels = stage_labels(config)
    ctx = UnitContext(out_dir=layout.out, source=unit.source, unit=unit.name)
    chain = [s for s in ([segment.entry] if segment.entry else []) + segment.stages if s.applies_to(unit.source)]
    steps = [(labels[config.stages.index(s)], built_stage(config.stages.index(s), s, unit.source)) for s in chain]
    for stage, work in _filters(config, layout, segment, unit):
        stage.bind(work)
    tallies = {label: StageTally() for label, _ in steps}
    kept_folder = layout.docs(unit.source) if segment.last else layout.segment_docs(segment.index, unit.source)
    kept_sink = ParquetSink(ctx, kept_folder, unit.name)
    ledger_sink = ParquetSink(ctx, layout.rejects(unit.source), ledger_stem(unit.name, segment.index), LEDGER_SCHEMA)
    counts = {"input": 0, "output": 0, "rejected": 0}
    files_read: dict[str, dict] = {}  # file key -> its size and sha256, as each file's read ends
    warnings: list[str] = []  # what the readers warn of (a RedPajama-V2 component never produced)
    bad_input: Counter[str] = Counter()
    skipped: Counter[str] = Counter()  # input records that are no documents, by kind (a WARC's requests, ...)
    cpu: Counter[str] = Counter()

    for _, stage in steps:
        stage.open_unit(ctx)
    ours = stage_columns(config)
    batches = _batches(config, layout, segment, unit, options.strict, ours)
    chunks = _discarded_if_changed(batches, ctx, [kept_sink, ledger_sink])
    tally = new_tally() if options.sampled else None  # what the projection scales from (``sample_estimate``)
    if tally is not None and segment.index == 0:
        chunks = _sampled_chunks(chunks, options.sample, options.sample_seed, tally)
    if segment.index == 0 and (options.sampled or len(unit.files) > 1):
        chunks = _gathered(chunks)
    input_ids: list[np.ndarray] = []  # hashes of every input id (segment 0), for find_duplicates
    for batch, bad, nbytes, extra in chunks:
        if extra:
            files_read[extra["path"]] = extra
            warnings += extra.get("warnings", [])
            skipped.update(extra.get("skipped", {}))
        documents_in = tokens_out = 0
        if segment.index == 0:
            input_ids += [id_hashes(b.column(ID)) for b in (batch, bad) if b is not None and b.num_rows]
        if bad is not None and bad.num_rows:
            ledger_sink.write(bad)
            bad_input.update(count_values(bad.column("reason")))
            documents_in += bad.num_rows
            counts["rejected"] += bad.num_rows
        if batch is not None and batch.num_rows:
            documents_in += batch.num_rows
            batch = _run_chain(batch, steps, tallies, ledger_sink, unit, counts, cpu)
            if batch.num_rows:
                if TOKENS in ours and TOKENS in batch.schema.names:  # a stage's, never an input's
                    tokens_out = int(pc.sum(batch.column(TOKENS)).as_py() or 0)
                if tally is not None and segment.last:
                    _tally_kept(tally, batch, TOKENS in ours and TOKENS in batch.schema.names)
                kept_sink.write(batch.drop_columns(internal_columns(batch)) if segment.last else batch)
                counts["output"] += batch.num_rows
        counts["input"] += documents_in
        if progress and (documents_in or nbytes):
            progress(documents_in, nbytes, tokens_out)
    for label, stage in steps:
        tallies[label].counters.update(stage.close_unit(ctx))
    kept_sink.close()
    ledger_sink.close()
    stats = {
        "source": unit.source,
        "unit": unit.name,
        "file": unit.files_label,
        "segment": segment.index,
        **counts,
        "bad_input": dict(sorted(bad_input.items())),
        "skipped": dict(sorted(skipped.items())),
        "stages": {label: t.as_dict() for label, t in tallies.items()},
        "warnings": warnings,
    }
    if segment.index == 0:
        hashes = np.sort(np.concatenate(input_ids)) if input_ids else np.empty(0, np.uint64)
        save_npy(ctx.atomic(layout.unit_ids(unit.source, unit.name)), hashes)
    if segment.index == 0 and unit.reports_file:
        facts = [files_read.get(f.key, {}) for f in unit.files]
        # as the manifest lists them, which takes these records as they are: at a million
        # files, a copy of each in the driver was 180 MB
        stats["input_files"] = [
            {"source": unit.source, "path": f.key, "bytes": fact.get("bytes"), "sha256": fact.get("sha256")}
            for f, fact in zip(unit.files, facts)
        ]
    phase = Layout.segment_phase(segment.index)
    cpu["read+write"] = time.process_time() - started - sum(cpu.values())
    cost = {"cpu_seconds": dict(sorted(cpu.items()))}
    if tally is not None:
        cost["sample"] = {"source": unit.source, **tally}
    write_json(ctx.atomic(layout.cost(phase, unit.source, unit.name)), cost)
    stats[OUTPUTS] = written_outputs(ctx, layout)  # what a rerun checks before it trusts the marker
    commit(ctx, layout.marker(phase, unit.source, unit.name), stats, store)
    return stats


def _sampled(batch: pa.RecordBatch | None, fraction: float, seed: int, ledger: bool = False) -> pa.RecordBatch | None:
    """The rows of a ``fraction`` sample, chosen by id so any worker count picks the same.
    A file that could not be read is always reported: a trial run is where to find it.
    ``ledger``: ``batch`` is ledger rows (a document may have an input field ``reason`` too)."""
    if batch is None or batch.num_rows == 0:
        return batch
    keep = pa.array(in_sample(batch.column(ID), fraction, seed))
    if ledger:
        keep = pc.or_(keep, pc.equal(batch.column("reason"), UNREADABLE_FILE))
    return batch.filter(keep)


# Sampled documents, and the documents of a pack of small files, are gathered into
# batches of about this much text before the stages run: per-batch costs (a stage's call,
# a Parquet row group) weigh as they do on large files, and a sample's projection holds.
GATHER_TEXT_BYTES = 2 << 20


def _sampled_chunks(chunks: Iterator[tuple], fraction: float, seed: int, tally: dict) -> Iterator[tuple]:
    """Each chunk's ``fraction`` sample (``seed``'s); ``tally`` gets the text bytes of every document
    read and, by group, of those sampled (``sample_estimate``)."""
    for batch, bad, nbytes, extra in chunks:
        tally["read_documents"] += sum(b.num_rows for b in (batch, bad) if b is not None)
        tally["read_bytes"] += int(text_bytes(batch).sum())
        sampled = _sampled(batch, fraction, seed)
        if sampled is not None:
            add(tally, "documents", sampled.column(ID), np.ones(sampled.num_rows))
            add(tally, "bytes", sampled.column(ID), text_bytes(sampled))
        yield sampled, _sampled(bad, fraction, seed, ledger=True), nbytes, extra


def _tally_kept(tally: dict, batch: pa.RecordBatch, tokenized: bool) -> None:
    """A sampled run's kept documents, and their tokens, by group (``sample_estimate``)."""
    ids = batch.column(ID)
    add(tally, "kept", ids, np.ones(len(ids)))
    if tokenized:
        add(tally, "tokens", ids, batch.column(TOKENS).to_numpy(zero_copy_only=False))


def _gathered(chunks: Iterator[tuple]) -> Iterator[tuple]:
    """The chunks' documents regrouped, in order, into batches of about
    ``GATHER_TEXT_BYTES`` of text (a batch whose fields differ from the pending ones starts
    a new group); quarantined rows, input bytes and file facts pass on as they come."""
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0
    for batch, bad, nbytes, extra in chunks:
        if batch is not None and batch.num_rows:
            if pending and not batch.schema.equals(pending[0].schema):
                yield _concat(pending), None, 0, {}
                pending, pending_bytes = [], 0
            pending.append(batch)
            pending_bytes += batch.column(TEXT).nbytes
        if pending_bytes >= GATHER_TEXT_BYTES:
            yield _concat(pending), bad, nbytes, extra
            pending, pending_bytes = [], 0
        elif (bad is not None and bad.num_rows) or nbytes or extra:
            yield None, bad, nbytes, extra
    if pending:
        yield _concat(pending), None, 0, {}


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _run_chain(batch, steps, tallies, ledger_sink, unit: Unit, counts: dict, cpu: Counter) -> pa.RecordBatch:
    """Pass one batch through the stages, moving each rejected row to the ledger (which
    names the unit's file, or for a pack of files the one in each row's ``_file``)."""
    file = unit.files[0].key
    for label, stage in steps:
        tally = tallies[label]
        tally.input += batch.num_rows
        started = time.process_time()
        result = stage.process(batch, unit.source)
        cpu[label] += time.process_time() - started
        batch = result.batch
        tally.changed += result.changed
        tally.counters.update(result.counters)
        if result.drop_reason is not None:
            kept, rejected, reasons = split_by_reason(batch, result.drop_reason)
            if rejected.num_rows:
                detail = result.detail
                if detail is not None:
                    detail = detail.filter(pc.is_valid(result.drop_reason))
                ledger_sink.write(
                    ledger_rows(rejected, source=unit.source, stage=label, reasons=reasons, file=file, detail=detail)
                )
                tally.rejected.update(count_values(reasons))
                counts["rejected"] += rejected.num_rows
            batch = kept
        tally.output += batch.num_rows
        if batch.num_rows == 0:
            break
    return batch


def stage_columns(config: Config) -> frozenset[str]:
    """Every column the run's stages add, under any source's options: the readers keep an
    input field of one of these names as ``input_<name>``. One set for the whole run, so
    a name means the same column in every source's documents. Worked out once per process
    and chain, like ``built_stage``: building options checks their files (a classifier's
    dictionary is walked), too slow to repeat for every unit."""
    key = json.dumps([[s.name, s.options, s.per_source] for s in config.stages], sort_keys=True, default=str)
    if key not in _stage_columns:
        classes = registry()
        _stage_columns[key] = frozenset(
            name
            for stage in config.stages
            for options in stage.all_options()
            for name in classes[stage.name].added_columns(options)
        )
    return _stage_columns[key]


def _batches(
    config: Config, layout: Layout, segment: Segment, unit: Unit, strict: bool, stage_columns: frozenset[str]
) -> Iterator[tuple]:
    """(documents, quarantined rows, input bytes, extra) for this unit's segment; ``extra``
    names the file whose read it ends (``path``) with the file's size and sha256."""
    if segment.index == 0:
        specs = [
            InputSpec(
                source=unit.source,
                file_key=file.key,
                text_field=unit.text_field,
                id_field=unit.id_field,
                block_bytes=config.run.block_bytes,
                max_doc_bytes=config.run.max_doc_bytes,
                strict=strict,
                span=unit.span,
                stage_columns=stage_columns,
                minhash=unit.minhash,
            )
            for file in unit.files
        ]
        yield from unit_inputs(unit, specs, config.run.block_bytes)
        return
    for path in part_files(layout.segment_docs(segment.index - 1, unit.source), unit.name):
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=8192):
            yield batch, None, 0, {}


def _discarded_if_changed(chunks: Iterator[tuple], ctx: UnitContext, sinks: list[ParquetSink]) -> Iterator[tuple]:
    """``chunks``; when the input turns out to have changed under the read, the unit's
    files written so far are deleted before the error goes on: nothing of a read that
    mixed two versions of a file stays in --out, not even as a temporary."""
    try:
        yield from chunks
    except InputChanged:
        for sink in sinks:
            with contextlib.suppress(Exception):  # a failed write too is moot: its file goes
                sink.close()
        for tmp in ctx.pending:
            tmp.unlink(missing_ok=True)
        raise


def commit(ctx: UnitContext, marker: Path, stats: dict, store: RunStore) -> None:
    """Rename every pending file to its final name, then write the marker, last; with a
    remote store, upload them in the same order."""
    for tmp, final in ctx.pending.items():
        os.replace(tmp, final)
    write_json_atomic(marker, stats)
    store.push(ctx.pending.values(), marker=marker)
