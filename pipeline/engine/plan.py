"""The plan of a run: its units of work and its segments (the folders everything goes in
are ``pipeline.formats.layout``).

A unit is one input file of one source, or one piece of a large one (``[run]
split_bytes``; where files are cut is ``pipeline.readers.splits``): a file's pieces are
named after it, numbered in order (``00003-big.jsonl.part-00001``), so sorting unit names
keeps input order, and their outputs read in name order are the whole file's, whatever
the split size. The stage chain is cut at each global stage
(dedup) into segments; segment ``k`` runs per unit and, unless it is the last, leaves the
documents it kept under ``work/segments/k/`` for global stage ``k`` to map over and filter.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from pipeline.engine.config import Config, RunSettings, StageConfig
from pipeline.engine.storage import not_a_file
from pipeline.readers import detect_format
from pipeline.readers.common import Span
from pipeline.readers.splits import plan_spans
from pipeline.util.printable import printable_path

PLAN_THREADS = min(8, os.cpu_count() or 1)


@dataclass(frozen=True)
class Unit:
    source: str
    index: int  # position of the file in the source's sorted file list
    path: Path | str  # str: the URI of a file on an object store
    name: str  # unique within the source, safe as a file name
    format: str
    text_field: str
    id_field: str
    file_key: str  # how the ledger and generated ids name the file (printable, valid UTF-8)
    span: Span | None = None  # the piece of the file this unit reads (None: all of it)
    version: tuple = ()  # the file's ``input_stat`` when the run planned it: the only one it reads

    @property
    def reports_file(self) -> bool:
        """Whether this unit records the file's size and sha256 (one unit per file does)."""
        return self.span is None or self.span.start == 0


@dataclass
class Segment:
    index: int
    entry: StageConfig | None  # the global stage whose filter opens this segment (None for the first)
    stages: list[StageConfig]  # per-document stages, in order
    last: bool


def plan_units(config: Config) -> list[Unit]:
    files = [(source, index, path) for source in config.sources.values() for index, path in enumerate(source.files)]
    # Finding a file's cuts reads it (JSON lines) or its footer: files in parallel, since
    # the reads and the native newline counts release the GIL.
    with ThreadPoolExecutor(PLAN_THREADS) as pool:
        pieces = list(pool.map(lambda file: _spans(file[2], file[0].format, config.run), files))
    units = []
    keys = {source.name: _file_keys(source.files) for source in config.sources.values()}
    for (source, index, path), spans in zip(files, pieces):
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", PurePosixPath(str(path)).name)
        name = f"{index:05d}-{stem}"
        key = keys[source.name][index]
        whole = Unit(source.name, index, path, name, source.format, source.text_field, source.id_field, key)
        if spans is None:
            units.append(whole)
            continue
        width = max(5, len(str(len(spans) - 1)))
        units += [replace(whole, name=f"{name}.part-{k:0{width}d}", span=span) for k, span in enumerate(spans)]
    return units


def _spans(path: Path | str, fmt: str, run: RunSettings) -> list[Span] | None:
    """The pieces of a local file (remote files are read whole: they are fetched whole)."""
    if isinstance(path, str) or not_a_file(path) is not None:  # what is no file is never opened
        return None
    return plan_spans(path, detect_format(path) if fmt == "auto" else fmt, run.split_bytes, run.block_bytes)


def _file_keys(files: list[Path | str]) -> list[str]:
    """Names for files, relative to the folder they share (stable across machines)."""
    paths = [_key_path(f) for f in files]
    if not paths:
        return []
    common = paths[0].parent
    for path in paths[1:]:
        while common not in (path.parent, *path.parent.parents):
            common = common.parent
    return [printable_path(p.relative_to(common)) for p in paths]


def _key_path(file: Path | str) -> PurePosixPath:
    """A file's full path for its key: its real path, or for what is no file (a link to
    ``/dev/zero``) the link's own, which is what the user put there and the ledger names."""
    if isinstance(file, str):
        return PurePosixPath(file.split("://", 1)[1])
    if not_a_file(file) is not None:
        return PurePosixPath(file.parent.resolve() / file.name)
    return PurePosixPath(file.resolve())


def plan_segments(config: Config) -> list[Segment]:
    segments: list[Segment] = []
    entry: StageConfig | None = None
    current: list[StageConfig] = []
    for stage in config.stages:
        if stage.is_global:
            segments.append(Segment(len(segments), entry, current, last=False))
            entry, current = stage, []
        else:
            current.append(stage)
    segments.append(Segment(len(segments), entry, current, last=True))
    return segments


def stage_labels(config: Config) -> list[str]:
    """A unique label per configured stage: its name, numbered when a name repeats."""
    names = [s.name for s in config.stages]
    return [n if names.count(n) == 1 else f"{n}#{names[:i].count(n) + 1}" for i, n in enumerate(names)]
