"""The files prep ships for its stages to read, beside the ``stages`` package: models in
``stages/models/`` (fastText's lid.176 and its thresholds) and word lists in
``stages/lists/`` (LDNOOBW), each with its licence notice there; and the tokenizer
vocabularies the text room reads (``pipeline/text/vocab/``).

Why a place: a stage names a shipped file by its name, and where the files sit is decided
once, so a package that moves them (a wheel, a vendored copy) changes one line.
"""

from __future__ import annotations

from pathlib import Path

STAGES = Path(__file__).resolve().parents[2] / "stages"
VOCABULARIES = Path(__file__).resolve().parents[1] / "text" / "vocab"  # tiktoken ranks, gzipped


def bundled_model(name: str) -> Path:
    """A shipped model file (``stages/models/<name>``)."""
    return STAGES / "models" / name


def bundled_list(name: str) -> Path:
    """A shipped word list (``stages/lists/<name>``)."""
    return STAGES / "lists" / name
