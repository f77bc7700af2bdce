"""Whether a config value has the type a stage's ``Options`` field declares: TOML gives
ints, floats, strings, lists and tables, and a wrong one (a string for a number, a table
for a list) is refused by name before the stage is built, not as a TypeError inside it."""

from __future__ import annotations

import types
import typing
from typing import Any


def matches_hint(value: Any, hint: Any) -> bool:
    """Whether ``value`` (as TOML gives it) fits ``hint``; an int fits a float, a bool no number."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches_hint(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = typing.get_args(hint)
        return isinstance(value, list) and (not args or all(matches_hint(v, args[0]) for v in value))
    if origin is dict:
        key_type, value_type = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(matches_hint(v, value_type) for v in value.values())
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
