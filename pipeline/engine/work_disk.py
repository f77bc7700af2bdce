"""The run's work folder (``work/``): what it takes on disk, and removing what nothing
will read again: part of it as the run goes, the rest when it completes.

Why: ``work/`` holds the documents between segments (a copy of what passed each
segment) and each global stage's files (dedup's bands, forests and decisions), about as
much again as the input. Kept to the end, a run needs twice the disk it should and leaves
it taken. Once every unit of segment ``k`` has its marker, nothing reads the documents
segment ``k - 1`` left (the global stage's map and segment ``k`` read them, and a resume
redoes only units without a marker), nor the files of the global stage opening segment
``k``, except what a later run may import (``Phases.kept``: dedup's index for
``index_from``). Those are removed then. A kill during the removal leaves a run whose
markers say the same, so the rerun skips the work and removes the rest.

Once the run completes (``finish_work``), the run itself never reads ``work/`` again: the
id hashes served the duplicate-id count, which is recorded under ``stats/`` for a rerun;
a rerun finds every marker and runs nothing; ``prep report``, ``show`` and ``rejects``
read the output folders. Only another run may read it: a later ``index_from`` imports
dedup's index (``Phases.kept``). So ``work/`` is removed unless ``--keep-work``: by
default, because most runs are never imported and the index can be larger than the kept
documents (101 MB on the shared corpus, more than its ``docs/``), and because whoever
plans an incremental run knows it before the first one; an ``index_from`` to a removed index says in one line
to run again with ``--keep-work``. A kill during the removal leaves a run whose markers
all exist, so the next ``prep run`` of it removes the rest and writes the same manifest.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from pipeline.engine.config import Config
from pipeline.engine.plan import Segment
from pipeline.engine.storage import RunStore
from pipeline.engine.unit import built_stage
from pipeline.formats.layout import Layout
from pipeline.phases import globs

# cost.json's key: {"peak_bytes", "left_bytes", "completed_before"} of work/ (sizes differ
# run to run with the files in flight when it is measured, so they are kept out of the
# manifest)
WORK_DISK = "work_disk"


class WorkDisk:
    """The largest size of ``work/`` seen by this process: measured at the end of each
    phase and before each finalize round removes its inputs, when the folder is largest
    (it only grows within a phase). A resumed run sees only its own phases.

    Made when the run starts, before it writes its manifest: whether the run had
    completed before (its manifest there) says what its work files are after a redo of
    some of its units (a cut output): those of the units redone, the rest of work/ gone
    with the earlier completion, so none a later run imports (``summary``)."""

    def __init__(self, store: RunStore):
        self.store = store
        self.peak = 0
        self.completed_before = store.exists(Layout().key(Layout().manifest))

    def note(self) -> None:
        self.peak = max(self.peak, self.store.size([Layout.WORK]))

    def figures(self) -> dict:
        """``peak_bytes``, what ``work/`` holds now (``left_bytes``: after ``finish_work``,
        what the run leaves) and ``completed_before``."""
        left = self.store.size([Layout.WORK])
        return {"peak_bytes": max(self.peak, left), "left_bytes": left, "completed_before": self.completed_before}


def drop_finished(config: Config, store: RunStore, segment: Segment) -> None:
    """Once every unit of ``segment`` is done: remove the documents the segment before
    it left, and the work folder of the global stage opening it but for the files its
    ``kept`` names."""
    layout = Layout(store.root)
    if segment.index > 0:
        store.remove(layout.key(layout.segment_folder(segment.index - 1)))
    if segment.entry is not None:
        kept = globs(built_stage(config.stages.index(segment.entry), segment.entry, "").phases().kept)
        _drop_all_but(store, layout.key(layout.global_work(segment.index)), kept)
    _remove_empty_folders(layout.out / Layout.WORK)  # work/segments once the last is gone, too


def keeps_work(store: RunStore, asked: bool) -> bool:
    """Whether the run leaves ``work/`` when it completes: when ``asked`` (``--keep-work``),
    and when it had completed before, asked or not. Its manifest is written after
    ``finish_work``, so what such a run has in ``work/`` is what it kept: the same command
    again without the flag must not remove an index kept for ``index_from`` (``rm -r
    OUT/work`` does). Asked before the run writes its manifest."""
    return asked or store.exists(Layout().key(Layout().manifest))


def finish_work(store: RunStore, keep: bool) -> None:
    """The run is complete and its duplicate-id count recorded: remove ``work/``, or with
    ``keep`` (``--keep-work``) only the id hashes, which nothing imports, and the folders
    that leaves empty: a rerun that redid a unit of a completed run (whose work/ was gone)
    left an empty work/ behind."""
    layout = Layout(store.root)
    store.remove(layout.key(layout.id_work) if keep else Layout.WORK)
    _remove_empty_folders(layout.out / Layout.WORK)
    if (layout.out / Layout.WORK).is_dir() and not any((layout.out / Layout.WORK).iterdir()):
        (layout.out / Layout.WORK).rmdir()


def _drop_all_but(store: RunStore, folder: str, kept: tuple[str, ...]) -> None:
    """Remove the files under ``folder`` but those matching ``kept`` (globs relative to it)."""
    if not kept:
        store.remove(folder)
        return
    start = len(folder) + 1
    for rel in _files_under(store, folder):
        if not any(fnmatch.fnmatch(rel[start:], pattern) for pattern in kept):
            store.remove(rel)


def _files_under(store: RunStore, folder: str) -> list[str]:
    """The files under ``folder`` (relative to the run's root), in the store."""
    if store.remote:
        return [rel for rel, _ in store.listing(folder, lambda _: True)]
    return [p.relative_to(store.root).as_posix() for p in (store.root / folder).rglob("*") if p.is_file()]


def _remove_empty_folders(folder: Path) -> None:
    """The folders under ``folder`` left empty (deepest first: a parent empties last)."""
    for parent, _, _ in os.walk(folder, topdown=False) if folder.is_dir() else []:
        if Path(parent) != folder and not os.listdir(parent):
            os.rmdir(parent)
