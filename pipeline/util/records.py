"""JSON record files read back from a folder (a run's manifest, a mixture's ``mix.json``,
dedup's ``units.json``), checked against the shape their reader expects.

A folder is input like any other: copied half-way, edited by hand, or not the folder the
user meant. Read without a check, a manifest that is a list, lacks a key or holds a string
where a count belongs surfaces as ``TypeError`` or ``KeyError`` deep in the reader, naming
neither the file nor the key. ``read_record`` says both, on one line, where the file enters.

A shape is written as the data is:

* a type (``int``, ``float``, ``str``, ``bool``, ``list``, ``dict``) or a tuple of shapes,
  any of which may match (``(str, None)``; ``None`` is JSON's null). ``int`` is never a
  bool; ``float`` is any finite number;
* a dict ``{key: shape}``: an object with at least these keys (``Optional(shape)`` for a key
  that may be missing); other keys are allowed;
* ``Each(shape)``: an object whose every value has the shape (counts per rule, sources);
* ``[shape]``: an array whose every item has the shape;
* ``COUNT``: a count of things (tokens, documents, a position): an integer from 0 to
  2^63 - 1. JSON integers have no bound: an edited ``mix.json``'s ``tokens: -5`` drew a
  report of negative tokens and printed negative GPU-hours, and one beyond 64 bits ended
  in an ``OverflowError`` naming no file;
* ``AMOUNT``: a measure (seconds, hours, a fraction): a number from 0 below 2^63, for
  the same reasons (a negative time drew a bar off the report's left edge).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.util.file_kind import refuse_special
from pipeline.util.numbers import is_number
from pipeline.util.printable import printable, printable_path


class RecordError(ValueError):
    """A record file that is not what its reader expects: the message names the file and
    what is wrong with it."""


@dataclass(frozen=True)
class Each:
    """An object whose every value has ``shape``."""

    shape: Any


@dataclass(frozen=True)
class Optional:
    """A key of an object that may be missing; when present, its value has ``shape``."""

    shape: Any


class _Count:
    """The shape of a count (``COUNT``)."""


COUNT = _Count()


class _Amount:
    """The shape of a measure (``AMOUNT``)."""


AMOUNT = _Amount()

# Counts and amounts lie below this (a count is a 64-bit integer).
LIMIT = 2**63


def read_json(path: str | Path) -> Any:
    """The JSON value in ``path``; ``RecordError`` naming the file when it cannot be read,
    is not UTF-8 or is not JSON (``FileNotFoundError`` stays itself: callers say what a
    missing file means)."""
    name = printable_path(path)
    try:
        refuse_special(path)  # a FIFO would block the read for good
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise RecordError(f"{name}: cannot read it ({error.strerror or error})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(f"{name}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        what = "empty" if not text.strip() else f"not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        raise RecordError(f"{name}: {what}") from None
    except RecursionError:
        raise RecordError(f"{name}: not a record (nested too deeply)") from None
    except ValueError:  # not a JSONDecodeError: a number of more than 4,300 digits, which int() refuses
        raise RecordError(f"{name}: not a record (a number too long to read)") from None


def read_record(path: str | Path, shape: Any) -> Any:
    """The JSON value in ``path``, checked against ``shape`` (see the module's docstring)."""
    value = read_json(path)
    check_shape(value, shape, path)
    return value


def check_shape(value: Any, shape: Any, path: str | Path, where: str = "") -> None:
    """``RecordError`` naming ``path`` and the first key path (``sources.web.output``)
    whose value does not have ``shape``."""
    if isinstance(shape, dict):
        _expect(isinstance(value, dict), value, "an object", path, where)
        for key, inner in shape.items():
            if isinstance(inner, Optional):
                if key in value:
                    check_shape(value[key], inner.shape, path, _join(where, key))
            elif key not in value:
                raise RecordError(f"{printable_path(path)}: {printable(_join(where, key))} is missing")
            else:
                check_shape(value[key], inner, path, _join(where, key))
    elif isinstance(shape, Each):
        _expect(isinstance(value, dict), value, "an object", path, where)
        for key, item in value.items():
            check_shape(item, shape.shape, path, _join(where, key))
    elif isinstance(shape, list):
        _expect(isinstance(value, list), value, "an array", path, where)
        for index, item in enumerate(value):
            check_shape(item, shape[0], path, f"{where}[{index}]")
    else:
        choices = shape if isinstance(shape, tuple) else (shape,)
        if not any(_is(value, choice) for choice in choices):
            _expect(False, value, " or ".join(_name(choice) for choice in choices), path, where)


def _is(value: Any, shape: Any) -> bool:
    if shape is None:
        return value is None
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if shape is float:
        return is_number(value)
    if shape is COUNT:
        return _is(value, int) and 0 <= value < LIMIT
    if shape is AMOUNT:
        return is_number(value) and 0 <= value < LIMIT
    if isinstance(shape, type):
        return isinstance(value, shape)
    try:
        check_shape(value, shape, "")
    except RecordError:
        return False
    return True


NAMES = {None: "null", int: "an integer", float: "a number", str: "a string", bool: "true or false"}
NAMES.update({list: "an array", dict: "an object", COUNT: "a count", AMOUNT: "a number of at least 0"})


def _name(shape: Any) -> str:
    if isinstance(shape, (dict, Each)):
        return "an object"
    if isinstance(shape, list):
        return "an array"
    return NAMES.get(shape, str(shape))


def _describe(value: Any) -> str:
    if _is(value, int) and not _is(value, COUNT):  # what is wrong with it may be its value
        return f"{value:,}" if -LIMIT <= value < 0 else "beyond 64 bits"
    if is_number(value) and not _is(value, AMOUNT):  # a number below 0 or beyond: say which
        return f"{value:,}"
    for shape in (None, bool, int, float, str, list, dict):
        if _is(value, shape):
            return _name(shape)
    return repr(value)  # NaN or infinity


def _expect(ok: bool, value: Any, expected: str, path: str | Path, where: str) -> None:
    if not ok:
        what = printable(where) if where else "the file"
        raise RecordError(f"{printable_path(path)}: {what} is {_describe(value)}, expected {expected}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)
