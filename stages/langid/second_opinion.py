"""A second opinion from Google's CLD2 (``pycld2``, its tables compiled into the wheel) where
lid.176 is known to be weak.

Why: on 1-2 KB documents of the odd-numbered lingua test sentences (67 languages), the stage
with lid.176 alone keeps 0.931 of the documents with the right label on average; its misses
are lid.176's own errors (Somali called English or Finnish, Yoruba called Irish or Spanish,
both unsure) and close relatives (Bosnian called Croatian). CLD2 is asked about two kinds of
documents:

* below their label's threshold: a label that CLD2 calls reliable replaces lid.176's and the
  document is kept, except English: a document CLD2 too calls English keeps FineWeb's rule
  (lid.176's score against 0.65), so English output does not change and boilerplate both
  call English stays dropped;
* kept with a label of a confusable set (``CONFUSABLE``): CLD2 picks the member when its
  reliable label lies in the same set, otherwise lid.176's label stands.

Measured (``benchmarks/langid_models.py``): mean 0.976 (65 of 67 languages >= 0.97), UDHR
paragraphs 0.860 -> 0.967, English unchanged, 4% of web pages asked, 1.02x the stage's CPU
time. langid.py in the same role scores 0.978 at 1.2x, lingua 0.972 at 1.6x and 1.3 GB. Why
not CLD2 alone (0.977 top-1): FineWeb's thresholds are lid.176 probabilities, and English
must keep them. Left: Malay (every model but CLD3 calls lingua's Malay test text Indonesian).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa

from stages.langid.model import model_input

# Close languages where lid.176 names the wrong member with a high score (labels as lid.176 spells them).
CONFUSABLE: tuple[frozenset[str], ...] = (frozenset({"hr", "sr", "bs", "sh"}), frozenset({"ms", "id"}))
SET_OF = {label: members for members in CONFUSABLE for label in members}
ENGLISH = "en"

# CLD2 rejects C1 control characters (cp1252 punctuation decoded as Latin-1) as invalid UTF-8.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CLD2_TO_MODEL = {"iw": "he", "jw": "jv", "un": None}

Ask = Callable[[list[str]], list[str | None]]


def _pycld2():
    try:
        import pycld2
    except ImportError:
        raise ImportError("the langid second opinion needs pycld2 (pip install pycld2)") from None
    return pycld2


def cld2_labels(texts: list[str], reliable_only: bool = True) -> list[str | None]:
    """CLD2's top label per text in lid.176's spelling; None where CLD2 cannot read the text
    or, with ``reliable_only``, does not call its answer reliable."""
    pycld2 = _pycld2()
    labels: list[str | None] = []
    for text in texts:
        try:
            reliable, _, found = pycld2.detect(_CONTROL.sub("", text))
        except pycld2.error:
            labels.append(None)
            continue
        code = found[0][1]
        labels.append(_CLD2_TO_MODEL.get(code, code.split("-")[0]) if reliable or not reliable_only else None)
    return labels


def cld2_language_names() -> dict[str, str]:
    """The languages CLD2 names: each name in lower case (``english``, ``scots gaelic``) ->
    the label an answer of that language becomes (``en``, ``gd``). Scripts and "unknown"
    are no language."""
    names = {}
    for name, code in _pycld2().LANGUAGES:
        label = _CLD2_TO_MODEL.get(code, code.split("-")[0])
        if label and not name.startswith("X_") and code != "xxx":
            names[name.lower().replace("_", " ")] = label
    return names


ASKERS: dict[str, Ask] = {"cld2": cld2_labels}
# What each second opinion names languages, by their names (a document may end with any of these labels).
LANGUAGE_NAMES: dict[str, Callable[[], dict[str, str]]] = {"cld2": cld2_language_names}


def settle(
    labels: list[str | None], below: list[bool], text: pa.Array, max_chars: int, ask: Ask
) -> tuple[list[str | None], list[bool]]:
    """Final labels, and per document whether the second opinion vouches for it (kept
    whatever lid.176's score). ``below``: lid.176's score is under its label's threshold;
    the second model reads what lid.176 read (the first ``max_chars`` characters)."""
    rows = [i for i, (label, low) in enumerate(zip(labels, below)) if label is not None and (low or label in SET_OF)]
    final, vouched = list(labels), [False] * len(labels)
    if not rows:
        return final, vouched
    sample = model_input(text.take(pa.array(rows, pa.int64())), max_chars).to_pylist()
    for i, other in zip(rows, ask(sample)):
        if other is None:
            continue
        if below[i]:
            if other != ENGLISH:
                final[i], vouched[i] = other, True
        elif other in SET_OF.get(labels[i], ()):
            final[i] = other
    return final, vouched
