"""What a task fetches into its machine's mirror before it runs, when the run folder lives
on object storage: a unit's documents from the segment before, and the files of a global
stage's work folder that a step reads (partition slices of them: ``slices.py``).

Both kinds of task need them, a segment's unit (``unit.segment_task``) and a global stage's
steps (``global_run``), so they live below both.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine.config import ConfigError
from pipeline.engine.plan import Unit
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout, is_part_file, part_files, part_name
from pipeline.util.numbers import counted
from pipeline.util.printable import error_line


def unit_documents(store: RunStore, layout: Layout, segment_index: int, unit: Unit) -> list[Path]:
    """The parts of the documents a unit kept in segment ``segment_index``, which the next
    phase reads, fetched and checked against the count that segment's marker recorded.

    Why: they sit in ``work/`` between segments, where a user may delete or cut one short
    while the run is stopped (to free space, by a bad copy). Read as they were, a deleted
    part lost its documents without a word, and the run wrote every output before its
    balance failed as "a bug in prep"; a cut one failed on a Parquet error naming no file.
    The unit's marker is there: a phase runs only once the segment before is done."""
    folder = layout.segment_docs(segment_index, unit.source)
    store.pull(layout.key(folder), keep=lambda rel: is_part_file(PurePosixPath(rel).name, unit.name))
    marker = layout.key(layout.marker(Layout.segment_phase(segment_index), unit.source, unit.name))
    kept = json.loads(store.read_text(marker))["output"]
    parts, found = part_files(folder, unit.name), 0
    for part in parts:
        try:
            with pq.ParquetFile(part) as parquet:
                found += parquet.metadata.num_rows
        except (OSError, pa.ArrowInvalid) as error:
            raise damaged_work(store, layout.key(part), error_line(error)) from None
    if found != kept:
        first = layout.key(folder / part_name(unit.name, 0))
        parts_held = f"{counted(found, 'document')} in its {counted(len(parts), 'part')}"
        why = f"{parts_held} where segment {segment_index} kept {kept:,}"
        raise damaged_work(store, first, why)
    return parts


def damaged_work(store: RunStore, key: str, why: str) -> ConfigError:
    """The refusal of a resume whose work file ``key`` was deleted or changed while the run
    was stopped: what was derived from it is in other work files and markers, which only
    starting over makes agree again."""
    return ConfigError(
        f"{store.uri}/{key}: a work file of this run is missing or damaged ({why}), so the run cannot "
        "resume: run with --force to start over"
    )


def pull_work(store: RunStore, folder: str, patterns: tuple[str, ...] | None) -> None:
    """The files of a global stage's work folder (``folder``, as ``Layout.key`` names it)
    that a step reads (globs of its declared families: ``pipeline.phases``); None: all."""
    store.pull(folder, keep=None if patterns is None else matching(folder, patterns))


def matching(folder: str, patterns: tuple[str, ...]):
    """Whether a path relative to the run's root matches a glob relative to ``folder``."""
    prefix = len(folder) + 1
    return lambda rel: any(fnmatch.fnmatch(rel[prefix:], p) for p in patterns)
