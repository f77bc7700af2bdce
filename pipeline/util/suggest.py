"""The "did you mean" hint every error about an unknown name carries."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest_hint(word: str, valid: Iterable[str]) -> str:
    """``"; did you mean 'length'?"`` for the closest valid word, or "" when none is close."""
    close = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""
