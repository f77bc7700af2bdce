"""A loader state, checked whole before it moves the loader (no torch here).

Why every key is checked: a state comes back from a checkpoint file that anyone (or any
bug) may have edited, and a wrong value would not fail, it would resume somewhere else:
a negative or float epoch, ``samples`` as a string or ``True`` (a bool is an int to
Python, not to us). So each key must be there, of its type, in its range, and no other
key may appear; the first one that is not is named in a one-line ``ValueError``.

The world size and batch size are recorded but may differ on resume (the loader resumes
at the saved global sample count); the data's identity, window count, seq_len and seed
must be the dataset's, and the window order this loader's (``sampler.WINDOW_ORDER_SCHEME``).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from pipeline.loader.sampler import WINDOW_ORDER_SCHEME

STATE_VERSION = 1
# Before the window order kept a mixture's shares, states had no "window_order".
FORMER_WINDOW_ORDER = "plain blocks of 4,096 windows (before share windows)"
# Each key, and the least value it may take (None: a string).
STATE_KEYS: dict[str, int | None] = {
    "version": 1,
    "window_order": None,
    "dataset": None,
    "num_samples": 0,
    "seq_len": 1,
    "seed": 0,
    "epoch": 0,
    "samples": 0,
    "world_size": 1,
    "batch_size": 1,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_key(key: str, value: Any) -> None:
    least = STATE_KEYS[key]
    if least is None:
        if not isinstance(value, str):
            raise ValueError(f"loader state: {key} must be a string, not {type(value).__name__} {value!r}")
    elif not _is_int(value):
        raise ValueError(f"loader state: {key} must be an integer, not {type(value).__name__} {value!r}")
    elif value < least:
        raise ValueError(f"loader state: {key} is {value}, below its least value {least}")


def check_state(state: Any, expected: dict[str, Any]) -> dict[str, int | str]:
    """``state`` with plain ints, once every key is valid and those of ``expected`` (key: the
    dataset's value) match; else a one-line ``ValueError`` naming the first key at fault."""
    if not isinstance(state, Mapping):
        raise ValueError(f"loader state must be a dict, not {type(state).__name__}")
    if "version" in state:  # first: another version may have other keys
        _check_key("version", state["version"])
        if state["version"] != STATE_VERSION:
            raise ValueError(f"unsupported loader state version {state['version']!r} (this loader: {STATE_VERSION})")
    unknown = sorted(str(key) for key in state if key not in STATE_KEYS)
    if unknown:
        raise ValueError(f"loader state has unknown key {unknown[0]!r} (known: {', '.join(STATE_KEYS)})")
    state = {"window_order": FORMER_WINDOW_ORDER, **state}
    for key in STATE_KEYS:
        if key not in state:
            raise ValueError(f"loader state has no {key!r}")
        _check_key(key, state[key])
    if state["window_order"] != WINDOW_ORDER_SCHEME:
        raise ValueError(
            f"loader state was saved under window order {state['window_order']!r}, this loader draws "
            f"{WINDOW_ORDER_SCHEME!r}: resuming would give other batches; resume with the loader version that saved it"
        )
    for key, value in expected.items():
        if state[key] != value:
            raise ValueError(f"loader state is for other data: {key} {state[key]!r} != {value!r}")
    if state["samples"] > state["num_samples"]:
        raise ValueError(f"loader state has {state['samples']} samples consumed, outside 0..{state['num_samples']}")
    return {key: int(value) if _is_int(value) else value for key, value in state.items()}
