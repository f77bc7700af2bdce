"""Whose --out is it: the record a run keeps in its folder (``.prep/run.json``), read
before the run takes the folder.

A folder holding the record is a run's: the names ``Layout.OWNED`` lists there were
written by a run, and --force may remove them. Any other folder with files in it is the
user's: a run may be written beside those files (with --force), never over them, and
it is refused before the lock is taken, so a refusal leaves nothing behind. A record
that cannot be read, or lacks what a resume needs, is refused naming the file: it no
longer says which run the folder holds, and --force starts that run over.
"""

from __future__ import annotations

import json

from pipeline.engine.config import ConfigError
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout
from pipeline.util.printable import error_line
from pipeline.util.records import Optional, RecordError, check_shape


def entries(store: RunStore) -> list[str]:
    """The top-level entries of --out but ``.prep``, which holds the run's lock."""
    return [name for name in store.names() if name != Layout.CONTROL]


def refuse_foreign(store: RunStore, force: bool) -> None:
    """Refuse an --out that holds files and no run's record (``.prep/run.json``): what is
    there is the user's. --force adds a run beside them, but never removes or writes over
    one: an entry with a name the run writes (``docs``) is refused by name. In a folder a
    run made, the names of ``Layout.OWNED`` are that run's, which --force starts over."""
    if store.exists(Layout().key(Layout().state)):
        return
    names = entries(store)
    if not names:
        return
    if not force:
        raise ConfigError(
            f"{store.uri} is not empty and was not made by prep run; use another --out, or --force to write "
            "a run beside its files (which removes none of them)"
        )
    taken = [name for name in names if name in Layout.OWNED]
    if taken:
        raise ConfigError(
            f"{store.uri} was not made by prep run, and its {', '.join(taken)} would be written over; --force "
            "removes only what a prep run wrote: move them, or use another --out"
        )


def refuse_links(store: RunStore) -> None:
    """Before --force starts a run's folder over (removing what ``Layout.OWNED`` names
    there): prep never makes a link, so one under such a name (``work`` linked to a
    scratch disk) is the user's, and is refused before anything is removed. Removing
    failed on it half-way, after the other names were gone, naming no file."""
    if store.remote:
        return
    links = [name for name in entries(store) if name in Layout.OWNED and (store.root / name).is_symlink()]
    if links:
        raise ConfigError(
            f"{store.uri}/{links[0]} is a link, which prep never makes; --force removes only what a prep run "
            "wrote: remove the link, or use another --out"
        )


# What a run's record holds for a run to resume from it: older prep wrote no "sized" (a
# resume then takes none), and versions by file under "inputs" rather than by unit under
# "units" (``run_state``: every unit already read is then checked once).
STATE_SHAPE = {"fingerprint": str, "config_file": str, "units": Optional(dict), "sized": Optional(dict)}


def previous_run(store: RunStore, force: bool) -> dict | None:
    """The record of the run in --out (None: no run yet). A damaged record is refused in
    one line naming it, since it no longer says which run the folder holds; with --force
    it is a run's folder to start over, as any other ({} stands for it)."""
    key = Layout().key(Layout().state)
    damaged = f"{store.uri}/{key} is damaged"
    try:
        text = store.read_text(key)
        if text is None:
            return None
        state = json.loads(text)
        check_shape(state, STATE_SHAPE, damaged)
        return state
    except RecordError as error:
        problem = str(error)
    except ValueError as error:  # not UTF-8, or not JSON
        problem = f"{damaged}: not a JSON text ({error_line(error)})"
    if force:
        return {}
    raise ConfigError(
        f"{problem}; it no longer says which run this folder holds: run with --force to delete the run and start over"
    )
