"""What a task fetches into its machine's mirror before it runs, when the run folder lives
on object storage: a unit's documents from the segment before, and the files of a global
stage's work folder that a step reads (partition slices of them: ``slices.py``).

Both kinds of task need them, a segment's unit (``unit.segment_task``) and a global stage's
steps (``global_run``), so they live below both.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from pipeline.engine.plan import Unit
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout, is_part_file


def pull_unit_documents(store: RunStore, layout: Layout, segment_index: int, unit: Unit) -> None:
    """The documents a unit kept in segment ``segment_index``, which the next phase reads."""
    folder = layout.key(layout.segment_docs(segment_index, unit.source))
    store.pull(folder, keep=lambda rel: is_part_file(PurePosixPath(rel).name, unit.name))


def pull_work(store: RunStore, folder: str, patterns: tuple[str, ...] | None) -> None:
    """The files of a global stage's work folder (``folder``, as ``Layout.key`` names it)
    that a step reads (globs of its declared families: ``pipeline.phases``); None: all."""
    store.pull(folder, keep=None if patterns is None else matching(folder, patterns))


def matching(folder: str, patterns: tuple[str, ...]):
    """Whether a path relative to the run's root matches a glob relative to ``folder``."""
    prefix = len(folder) + 1
    return lambda rel: any(fnmatch.fnmatch(rel[prefix:], p) for p in patterns)
