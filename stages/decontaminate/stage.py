"""``decontaminate``: remove evaluation data (benchmarks) from training documents.

A document that shares ``min_matches`` or more word n-grams (default 13, as GPT-3) with
a benchmark's examples is contaminated; ``mode = "drop"`` drops it, ``mode = "cut"``
removes only its paragraphs (blocks between blank lines) that hold a matched n-gram
and keeps the rest (a document left with nothing but whitespace is dropped). Words are
normalised as ``kernels`` says: lower-case, punctuation deleted, whitespace splits,
so reformatted numbers (``1000`` / ``1,000``), changed whitespace and line breaks
still match. A benchmark field of fewer than ``n`` words cannot be matched (the
index's ``meta.json`` counts the examples indexed).

Ledger: the drop reason is the benchmark's name (``decontaminate:gsm8k`` in the
manifest), the detail a JSON object ``{"benchmark", "example", "id", "ngram",
"matches", "threshold"}``: the example's position in the benchmark (and its id, where the benchmark
names an id field), the first matched n-gram as the document wrote it, how many
of the document's n-grams matched, and ``threshold``: ``min_matches``, the count that made it contaminated.

The index is built once per run, not per worker or document: every benchmark n-gram's
64-bit key, sorted and unique (``hashes.npy``), beside its first owner (``owners.npy``:
benchmark number, example position), and ``meta.json`` (what was indexed), memory-mapped
by each worker. It depends on the benchmark files alone, so the stage is a global stage
whose phases declare no map (``pipeline.phases``): a one-task finalize builds the index
before the first segment, its files declared (``reference.index_files``: a sub-folder of
the stage's work folder, ``work/decontaminate/``, per set of benchmarks and ``n``), so
the engine fetches them to the machine of every unit on a remote run, keeps them until
the run completes (with the rest of ``work/``), and builds one per distinct setting where per-source options differ. The
stage cuts no segment: it filters in the chain where the config puts it, and the ledger
files keep the names of a chain without a global stage there. ``files(options)`` names
the benchmark files, so a run's fingerprint covers their contents: a benchmark edited
before a resume is another run. ``process`` on a stage never bound to a run (a test, a
notebook) builds the index in memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.kernels.buffers import string_buffers
from pipeline.phases import Filter, Finalize, Phases
from pipeline.stage import GlobalStage, StageOutput, UnitContext, register
from stages.decontaminate.kernels import match_spans, scan_batch
from stages.decontaminate.reference import Index, build, in_memory, index_files, load, parse_benchmarks

MODES = ("drop", "cut")
# Paragraphs are separated by blank lines (whitespace-only lines count as blank).
PARAGRAPH_BREAK = re.compile(rb"\n(?:[ \t\r\f\v]*\n)+")


@register
class Decontaminate(GlobalStage):
    name = "decontaminate"

    @dataclass
    class Options:
        # One table per evaluation set: name, path, fields, and optional filter, id, format
        # (see stages/decontaminate/reference.py).
        benchmarks: list[dict[str, Any]] = field(default_factory=list)
        n: int = 13  # words per n-gram
        min_matches: int = 1  # matched n-grams that make a document contaminated
        mode: str = "drop"  # or "cut": remove only the paragraphs that hold a match

        def __post_init__(self) -> None:
            if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
                raise ValueError("decontaminate: n must be a whole number >= 1")
            if isinstance(self.min_matches, bool) or not isinstance(self.min_matches, int) or self.min_matches < 1:
                raise ValueError("decontaminate: min_matches must be a whole number >= 1")
            if self.mode not in MODES:
                raise ValueError(f"decontaminate: mode must be one of {', '.join(MODES)}, not {self.mode!r}")
            self.specs = parse_benchmarks(self.benchmarks)

    def __init__(self, options: Decontaminate.Options):
        super().__init__(options)
        self.index: Index | None = None
        self.work_dir: Path | None = None  # set by ``bind`` in a run
        self.index_from: Path | None = None  # the work folder ``index`` was mapped from

    @classmethod
    def files(cls, options: Decontaminate.Options) -> list[str]:
        return sorted({str(f) for spec in options.specs for f in spec.files()})

    def phases(self) -> Phases:
        """No map: the index reads the benchmark files only. One finalize task builds it."""
        o = self.options
        files = index_files(o.specs, o.n)
        return Phases(
            map=None,
            finalize=Finalize.once(lambda work: build(work, o.specs, o.n)),
            filter=Filter(reads=files),
            kept=files,
        )

    def open_unit(self, unit: UnitContext) -> None:
        """Map the index the finalize built, once per process and run (a process may run
        units of several runs: each maps its own run's)."""
        if self.work_dir is not None and self.index_from != self.work_dir:
            self.index, self.index_from = load(self.work_dir, self.options.specs, self.options.n), self.work_dir

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        if self.index is None:
            self.index = in_memory(self.options.specs, self.options.n)
        ix, o = self.index, self.options
        text = batch.column(TEXT)
        data, offsets = string_buffers(text)
        counts, first = scan_batch(data, offsets, o.n, ix.hashes, ix.buckets, ix.shift)
        hit = np.flatnonzero(counts >= o.min_matches)
        if len(hit) == 0:
            return StageOutput(batch=batch)
        reason = np.full(batch.num_rows, None, object)
        detail = np.full(batch.num_rows, None, object)
        drop = hit
        counters: dict[str, int] = {}
        changed = 0
        if o.mode == "cut":
            new_texts, dropped, paragraphs = [], [], 0
            for r in hit:
                kept, removed = _cut(data, int(offsets[r]), int(offsets[r + 1]), o.n, ix)
                if kept.decode("utf-8").strip():
                    paragraphs += removed
                    new_texts.append(kept.decode("utf-8"))
                else:
                    new_texts.append(None)
                    dropped.append(r)
            mask = np.zeros(batch.num_rows, bool)
            mask[hit] = True
            cut_text = pc.replace_with_mask(text, pa.array(mask), pa.array(new_texts, text.type))
            batch = set_column(batch, TEXT, pc.if_else(pc.is_null(cut_text), text, cut_text))
            drop = np.asarray(dropped, np.int64)
            changed = len(hit) - len(drop)
            counters = {"decontaminate.cut_documents": changed, "decontaminate.cut_paragraphs": paragraphs}
        for r in drop:
            position, start, end = (int(v) for v in first[r])
            bench, example = (int(v) for v in ix.owners[position])
            meta = ix.meta["benchmarks"][bench]
            reason[r] = meta["name"]
            found = {"benchmark": meta["name"], "example": example}
            if str(example) in meta["ids"]:
                found["id"] = meta["ids"][str(example)]
            ngram = " ".join(data[start:end].tobytes().decode("utf-8", "replace").split())
            detail[r] = json.dumps(
                {**found, "ngram": ngram, "matches": int(counts[r]), "threshold": o.min_matches}, ensure_ascii=False
            )
        return StageOutput(
            batch=batch,
            drop_reason=pa.array(reason, pa.string()),
            detail=pa.array(detail, pa.string()),
            changed=changed,
            counters=counters,
        )


def _cut(data: np.ndarray, start: int, end: int, n: int, ix: Index) -> tuple[bytes, int]:
    """The document ``data[start:end]`` without its paragraphs that hold a matched
    n-gram (an n-gram across a paragraph break takes both), and how many went."""
    spans = match_spans(data, start, end, n, ix.hashes, ix.buckets, ix.shift)[:, 1:] - start
    doc = data[start:end].tobytes()
    breaks = list(PARAGRAPH_BREAK.finditer(doc))
    starts = [0] + [m.end() for m in breaks]
    ends = [m.start() for m in breaks] + [len(doc)]
    # A paragraph is hit when some span overlaps it: span start < paragraph end, span end > its start.
    order = np.argsort(spans[:, 0], kind="stable")
    span_starts, span_ends = spans[order, 0], np.maximum.accumulate(spans[order, 1]) if len(spans) else spans[:, 1]
    pieces: list[bytes] = []
    removed = 0
    last_kept = -1
    for p, (ps, pe) in enumerate(zip(starts, ends)):
        k = int(np.searchsorted(span_starts, pe))  # spans starting before the paragraph's end
        if k > 0 and span_ends[k - 1] > ps:
            removed += 1
            continue
        if last_kept >= 0:
            pieces.append(doc[ends[last_kept] : starts[last_kept + 1]])  # the break after the kept one
        pieces.append(doc[ps:pe])
        last_kept = p
    return b"".join(pieces), removed
