"""Numbers read from text a user wrote: a command-line option, a ``name=weight`` list, a
config value.

Python's ``float`` reads ``nan``, ``inf`` and ``1e999`` (infinity) without complaint, and
TOML has ``nan`` and ``inf`` literals. Every comparison with NaN is false, so a NaN slips
past any ``x > limit`` check: ``--max-epochs nan`` once disabled the cap it sets. Every
number prep reads from text goes through ``finite`` (or, in a TOML config, ``is_number``),
which refuses them by name. And the other way, a count as prep prints it (``counted``).
"""

from __future__ import annotations

import math


def is_number(value: object) -> bool:
    """An int or a finite float (a bool is neither, though Python counts it as an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    # An int is always finite; math.isfinite converts it to a float first, which raised
    # OverflowError for one beyond 1e308 (a record's 400-digit count).
    return isinstance(value, int) or math.isfinite(value)


def finite(value: float, name: str, *, above: float | None = None, at_least: float | None = None) -> float:
    """``value`` if it is a finite number (and above ``above`` / at least ``at_least``),
    else ``ValueError`` naming ``name``: ``--max-epochs: nan is not a finite number``."""
    if not is_number(value):
        raise ValueError(f"{name}: {value!r} is not a finite number")
    if above is not None and not value > above:
        raise ValueError(f"{name}: {value:g} must be above {above:g}")
    if at_least is not None and not value >= at_least:
        raise ValueError(f"{name}: {value:g} must be at least {at_least:g}")
    return value


def parse_finite(text: str, name: str, *, above: float | None = None, at_least: float | None = None) -> float:
    """The number ``text`` spells, checked as ``finite`` does."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {text!r} is not a number") from None
    return finite(value, name, above=above, at_least=at_least)


def first_non_finite(value: object, where: str = "") -> str | None:
    """Where in a parsed document (tables, arrays, values) the first NaN or infinity is, as a
    dotted key path (``stages[2].min_score``); None when there is none. A TOML config may
    write ``nan`` and ``inf`` anywhere, and no option of prep means either."""
    return _first(value, lambda v: isinstance(v, float) and not math.isfinite(v), where)


def first_beyond_int64(value: object, where: str = "") -> str | None:
    """Where the first integer outside 64 bits is, as ``first_non_finite`` says where:
    TOML integers are Python's, unbounded, and Arrow and numpy take none beyond 64 bits
    (``max_chars = 1e23`` as an integer ended the run in Arrow's TypeError)."""
    return _first(value, lambda v: isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63, where)


def _first(value: object, bad, where: str) -> str | None:
    if bad(value):
        return where or "the value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first(item, bad, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found:
            return found
    return None


def counted(n: float, noun: str) -> str:
    """``n`` (thousands separated; a float rounded) and ``noun``, which takes an "s" unless
    ``n`` is 1: "1 cluster", "2 clusters", "0 clusters", "1 removed duplicate"."""
    shown = f"{n:,}" if isinstance(n, int) else f"{n:,.0f}"
    return f"{shown} {noun}{'' if n == 1 else 's'}"
