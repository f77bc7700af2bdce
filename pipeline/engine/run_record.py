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


# What a run's record holds, of which type, for a run to resume from it (older prep
# wrote no "inputs" or "sized": a resume then takes none).
STATE_KEYS = {"fingerprint": str, "config_file": str, "inputs": dict, "sized": dict}
STATE_REQUIRED = ("fingerprint", "config_file")


def previous_run(store: RunStore, force: bool) -> dict | None:
    """The record of the run in --out (None: no run yet). A damaged record is refused in
    one line naming it, since it no longer says which run the folder holds; with --force
    it is a run's folder to start over, as any other ({} stands for it)."""
    key = Layout().key(Layout().state)
    try:
        text = store.read_text(key)
        state = json.loads(text) if text is not None else None
    except ValueError as error:  # not UTF-8, or not JSON
        problem = f"not a JSON text ({error_line(error)})"
    else:
        if state is None or (isinstance(state, dict) and not _state_problem(state)):
            return state
        problem = _state_problem(state) if isinstance(state, dict) else f"a JSON {type(state).__name__}, not an object"
    if force:
        return {}
    raise ConfigError(
        f"{store.uri}/{key} is damaged: {problem}; it no longer says which run this folder holds: "
        "run with --force to delete the run and start over"
    )


def _state_problem(state: dict) -> str | None:
    """What is missing or wrong in a run's record, in words; None when it is whole."""
    missing = [key for key in STATE_REQUIRED if key not in state]
    if missing:
        return f"it lacks {', '.join(missing)}"
    wrong = [key for key, kind in STATE_KEYS.items() if key in state and not isinstance(state[key], kind)]
    return f"{', '.join(wrong)} of the wrong type" if wrong else None
