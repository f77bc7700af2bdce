"""What a unit wrote into the run's output folders (``docs/``, ``rejects/``, ``tokens/``),
recorded by size in its marker, and the check a rerun makes of those files before it
takes the marker's word that the unit is done.

Why: a marker said only that its unit had finished, so a docs Parquet file cut short (a
full disk under a copy, a bad sync) after its unit was marked done made the rerun say
"already complete" and the damage stayed. Now a rerun redoes a unit whose output is not
there, has another size, or (for Parquet, on a local disk) has a footer that does not
read. An object store replaces an object whole, so there its size tells.

A unit of a later segment reads the documents the segment before left in ``work/``, which
is removed once every unit of its segment is done (``work_disk.drop_finished``): such a
unit cannot be redone alone, and the rerun is refused naming the file.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.engine.config import ConfigError
from pipeline.engine.plan import Unit
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout
from pipeline.stage import UnitContext
from pipeline.util.printable import error_line

OUTPUTS = "outputs"  # the marker's key: {file key: size in bytes}


def written_outputs(ctx: UnitContext, layout: Layout) -> dict[str, int]:
    """The unit's pending files under the output folders, by key, with their sizes (read
    before the commit renames them)."""
    pending = {layout.key(final): tmp for tmp, final in ctx.pending.items()}
    return {key: pending[key].stat().st_size for key in sorted(pending) if key.split("/")[0] in Layout.OUTPUT_FOLDERS}


class OutputCheck:
    """Checks the outputs markers recorded against the run folder; an object store's
    folders are listed once each (a request per file was a million at a million units)."""

    def __init__(self, store: RunStore):
        self.store = store
        self._listed: dict[str, dict[str, int]] = {}

    def damage(self, recorded: dict[str, int]) -> str | None:
        """What is wrong with the first of ``recorded`` (file key -> size) that is not as
        written, in words naming it; None when all are (or the marker recorded none: an
        older prep's)."""
        for key, size in recorded.items():
            found = self._size(key)
            if found is None:
                return f"{key} is not there"
            if found != size:
                return f"{key} has {found:,} bytes where {size:,} were written"
            if key.endswith(".parquet") and not self.store.remote:
                try:
                    pq.read_metadata(self.store.root / key)
                except (OSError, pa.ArrowInvalid) as error:
                    return f"{key} does not read as Parquet ({error_line(error)})"
        return None

    def _size(self, key: str) -> int | None:
        if not self.store.remote:
            path = self.store.root / key
            return path.stat().st_size if path.is_file() else None
        folder = key.rsplit("/", 1)[0]
        if folder not in self._listed:
            self._listed[folder] = self.store.sizes(folder, lambda rel: rel.rsplit("/", 1)[0] == folder)
        return self._listed[folder].get(key)


def refuse_redo(store: RunStore, damage: str) -> ConfigError:
    """The refusal of a rerun whose damaged output was made from work files now removed."""
    return ConfigError(
        f"{store.uri}/{damage}, and the work files its unit read were removed when its segment was done, "
        "so it cannot be redone alone: run with --force to start over"
    )


def checked_markers(store: RunStore, segment_index: int, units: list[Unit]) -> tuple[list[dict], list[Unit], str]:
    """The segment's units split by their markers: the stats of those done whose outputs
    are as written, the units to run (no marker, a marker that does not read, or an output
    changed since), and the line that says which were redone ("" for none). A later
    segment's unit whose segment is done reads files now removed: refused (``refuse_redo``)."""
    layout, phase = Layout(store.root), Layout.segment_phase(segment_index)
    check = OutputCheck(store)
    done, todo, damaged = [], [], []
    for unit in units:
        marker = layout.marker(phase, unit.source, unit.name)
        if not marker.exists():
            todo.append(unit)
            continue
        try:
            stats = json.loads(marker.read_text())
        except ValueError:  # not UTF-8 or not JSON: cut short, edited
            stats = None
        if isinstance(stats, dict):
            damage = check.damage(stats.get(OUTPUTS, {}))
        else:
            damage = f"{layout.key(marker)} does not read as a unit's marker"
        if damage is None:
            done.append(stats)
        else:
            damaged.append(damage)
            todo.append(unit)
    if not damaged:
        return done, todo, ""
    if segment_index > 0 and len(damaged) == len(todo):  # every unit had its marker: the segment was done
        raise refuse_redo(store, damaged[0])
    more = f" (and {len(damaged) - 1:,} more)" if len(damaged) > 1 else ""
    plural = "s whose outputs" if len(damaged) > 1 else " whose output"
    return done, todo, f"redoing {len(damaged):,} unit{plural} changed after being done: {damaged[0]}{more}"
