"""The files a run read, for its manifest: each unit of segment 0 lists the files it read
(source, path, bytes, sha256) in its marker, and the manifest streams them from there.

Why from the markers: the driver used to collect every unit's list as the units
finished, about 450 bytes a file and the largest part of its memory at many files (450 MB
at a million). Now a task's stats reach the driver without the list (``without_files``),
and memory grows with the units, not with the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pipeline.engine.plan import Unit
from pipeline.engine.storage import RunStore
from pipeline.engine.unit_outputs import OUTPUTS
from pipeline.formats.layout import Layout

FILES = "input_files"


def without_files(stats: dict) -> dict:
    """A unit's stats as the driver keeps them: without the files it read, nor those it
    wrote (``unit_outputs``)."""
    stats.pop(FILES, None)
    stats.pop(OUTPUTS, None)
    return stats


def files_read(store: RunStore, units: list[Unit]) -> Iterator[dict]:
    """Every file the run read, by source name, then in input order: one unit per file
    lists it (a file may be cut in pieces, or packed with others). Markers written on other
    machines are fetched first."""
    layout = Layout(store.root)
    phase = Layout.segment_phase(0)
    store.pull(layout.key(layout.markers(phase)))
    for unit in sorted((u for u in units if u.reports_file), key=lambda u: u.source):
        yield from json.loads(layout.marker(phase, unit.source, unit.name).read_text()).get(FILES, [])
