"""Per-language score thresholds and groups of close languages.

Why: lid.176 splits its probability between close relatives (Croatian, Serbian, Bosnian;
Norwegian Bokmal, Nynorsk, Danish; Slovenian, Croatian), so on correct Croatian pages its
top score is around 0.4, and one threshold for every language (FineWeb's 0.65, tuned on
English) drops whole languages: all of the Croatian documents of 1-2 KB, most Norwegian.

The thresholds (``stages/models/lid.176.thresholds.json``) follow FineWeb-2's rule, from
the score distribution of each language on held-out data: for the documents the model
labels ``l``, ``max(0.3, min(0.9, median - standard deviation))``, then capped at 0.65 so
that no language is held to a stricter bar than FineWeb's English (0.65 itself, kept as
it is). Without the cap, a language the model is sure of but never certain of (Basque
scores about 0.91 on clean text, with a small spread) would get 0.88 and lose a fifth of
its clean pages. The held-out data are documents of 1-2 KB built from the even-numbered
lingua test sentences (``benchmarks/langid_thresholds.py`` derives the table; the odd ones
and UDHR measure it, ``benchmarks/langid.py``). A language the table lacks gets 0.65.

Groups: documents whose top label is in a group are judged on the group's probability,
the sum of its members' among the top labels, so a Croatian page the model calls 0.45
``hr`` and 0.35 ``sr`` counts as 0.8 of Serbo-Croatian. ``lang`` still names the member.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from pipeline.formats.bundled import bundled_model

THRESHOLDS_FILE = bundled_model("lid.176.thresholds.json")
ENGLISH_THRESHOLD = 0.65  # FineWeb's, tuned on English with this model's scores
UNLISTED_THRESHOLD = 0.65
FLOOR, CEILING, CAP = 0.3, 0.9, 0.65

# Close languages lid.176 confuses (labels as the model spells them: "no" is Bokmal).
DEFAULT_GROUPS: dict[str, list[str]] = {"hbs": ["hr", "sr", "bs", "sh"], "nor": ["no", "nn"]}


def fineweb2_threshold(median: float, deviation: float) -> float:
    """FineWeb-2's per-language threshold, capped at FineWeb's English one (see above)."""
    return min(CAP, max(FLOOR, min(CEILING, median - deviation)))


@functools.lru_cache(maxsize=1)
def per_language(path: Path = THRESHOLDS_FILE) -> dict[str, float]:
    """The bundled table, checked: a damaged install must not judge languages by nothing."""
    try:
        table = json.loads(path.read_text())["thresholds"]
        thresholds = {str(label): float(entry["threshold"]) for label, entry in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"the language-ID thresholds {path} are missing or damaged ({error}); reinstall prep"
        ) from None
    if not all(0.0 <= t <= 1.0 for t in thresholds.values()):
        raise ValueError(f"the language-ID thresholds {path} hold a value outside [0, 1]; reinstall prep")
    return thresholds


def group_of(groups: dict[str, list[str]]) -> dict[str, str]:
    """Label -> its group's name."""
    return {label: name for name, members in groups.items() for label in members}


def group_score(top: list[tuple[float, str]], group: str | None, membership: dict[str, str]) -> float:
    """The probability of the top label's group among ``top`` (the top label's own without one)."""
    if not top:
        return 0.0
    if group is None:
        return top[0][0]
    return min(1.0, sum(p for p, label in top if membership.get(label) == group))
