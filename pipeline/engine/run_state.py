"""The run's state file (``.prep/run.json``): what makes the run this run (its
fingerprint, config and sized options) and the version of the inputs each unit planned,
so a resume can tell an input touched since the run read it.

Versions are kept by unit, one digest of its files' ``input_stat`` each, not by file:
the state, and what the driver holds to write and check it, then grow with the units,
not with the files (packed small files are up to ``plan.PACK_FILES`` to a unit). At a
million one-line files the per-file table was about 130 MB of text and 350 MB parsed.
A unit whose digest differs is checked file by file against the sha256 its marker
recorded, so a changed time alone is still no change. A state written by an older prep
(versions by file, under ``inputs``) matches no unit: every unit already read is checked
that way once, and the state is written again.
"""

from __future__ import annotations

import hashlib
import json

from pipeline.engine.config import ConfigError
from pipeline.engine.input_files import input_sha256
from pipeline.engine.plan import Unit
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout
from pipeline.util.atomic import atomic_path
from pipeline.util.printable import printable_path


def unit_version(unit: Unit) -> str:
    """One digest of the planned versions of a unit's files (their keys included)."""
    digest = hashlib.blake2b(digest_size=16)
    for file in unit.files:
        digest.update(json.dumps([file.key, file.version]).encode())
    return digest.hexdigest()


def _unit_key(unit: Unit) -> str:
    return Layout.unit_key(unit.source, unit.name)


def write_state(store: RunStore, head: dict, units: list[Unit]) -> None:
    """Write the state file: ``head`` (fingerprint, config, sized), and ``units``, each
    unit's version, streamed to the file rather than built as one text."""
    layout = Layout(store.root)
    with atomic_path(layout.state) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write('{"units":{')
        for k, unit in enumerate(units):
            f.write(f'{"," if k else ""}{json.dumps(_unit_key(unit))}:"{unit_version(unit)}"')
        f.write("}," + json.dumps(head, sort_keys=True, separators=(",", ":"))[1:])
    store.push([layout.state])


def same_inputs(recorded: dict, units: list[Unit]) -> bool:
    """Whether every unit planned the versions the state recorded (``recorded``: its
    ``units``), the usual case of a resume."""
    return len(recorded) == len(units) and all(recorded.get(_unit_key(u)) == unit_version(u) for u in units)


def check_inputs(store: RunStore, units: list[Unit], recorded: dict) -> None:
    """An input whose version changed since the run read it makes the output stale: refuse.

    Only units already read matter (a unit not yet done reads its files as they are now).
    A unit whose version differs has each file hashed again and compared with the sha256
    recorded when it was read (by the file's first piece, for a file cut in pieces)."""
    layout = Layout(store.root)
    first_piece = {(u.source, u.files[0].key): u for u in units if u.span is not None and u.reports_file}

    def marker(unit: Unit) -> str | None:
        return store.read_text(layout.key(layout.marker(Layout.segment_phase(0), unit.source, unit.name)))

    for unit in units:
        if recorded.get(_unit_key(unit)) == unit_version(unit) or marker(unit) is None:
            continue
        reader = first_piece.get((unit.source, unit.files[0].key), unit) if unit.span is not None else unit
        read = {f["path"]: f.get("sha256") for f in json.loads(marker(reader) or "{}").get("input_files", [])}
        for file in unit.files:
            if read.get(file.key) is None or input_sha256(file.path) != read[file.key]:
                raise ConfigError(
                    f"input {printable_path(file.path)} ({unit.source}) changed after this run read it, "
                    f"so {store.uri} is stale; "
                    "restore the file, or run with --force to start over"
                )
