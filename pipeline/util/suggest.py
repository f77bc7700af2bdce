"""The "did you mean" hint every error about an unknown name carries."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


def nearest_hint(word: str, valid: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """``"; did you mean 'length'?"`` for the closest valid word, or "" when none is close.
    ``aliases`` maps other names of valid words to them (lower case: ``{"english": "en"}``),
    for words too far from their code for the spelling to find (``english`` -> ``en``)."""
    valid = list(valid)
    named = difflib.get_close_matches(word.lower(), list(aliases or ()), n=1, cutoff=0.8)
    if named and aliases[named[0]] in valid:
        return f"; did you mean {aliases[named[0]]!r}?"
    close = difflib.get_close_matches(word, valid, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""
