"""Language detection with fastText's lid.176 model: the top labels and probabilities of each document.

The model is the compressed ``lid.176.ftz`` (176 languages, 917 KB), bundled in
``stages/models/`` (its licence in ``NOTICE.md`` there), read with fastText's native
predictor. Nothing is downloaded, and a user may point ``model_path`` at another fastText
LID model (FineWeb used the uncompressed ``lid.176.bin``).

Why fastText: it scores documents at tens of thousands per second on one core, and its
score is the one FineWeb's 0.65 threshold was tuned on. Labels are the model's: ISO 639-1
where one exists (``en``, ``de``, ``no`` for Norwegian), else ISO 639-3 (``ceb``, ``war``).

Per batch, the text work is native: Arrow slices each document to ``max_chars`` characters
and turns line breaks into spaces (fastText reads one line), RE2 finds documents without a
letter (they get no label) and Japanese-labelled text without kana. The only Python loop is
one native ``predict`` call per document, which the model's Python binding requires (its
batch call returns no scores).

Han-only text: the compressed model often calls Chinese sentences Japanese. Japanese prose
practically always contains kana, so a ``ja`` label on text without any hiragana or katakana
is turned into ``zh`` with the two labels' probability mass as score (measured on the lingua
sentences: zh 0.96 -> 0.99+, ja unchanged).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.bundled import bundled_model

_LABEL_PREFIX = "__label__"
_HAS_LETTER = r"\pL"
_HAS_KANA = r"[\p{Hiragana}\p{Katakana}]"


BUNDLED_MODEL = bundled_model("lid.176.ftz")
BUNDLED_SHA256 = "8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83"


def bundled_model_path() -> Path:
    """The bundled ``lid.176.ftz``, checked against its published hash (a damaged install
    would otherwise label every document wrong without a word)."""
    try:
        digest = hashlib.sha256(BUNDLED_MODEL.read_bytes()).hexdigest()
    except OSError as error:
        raise FileNotFoundError(
            f"the bundled language-ID model is missing: {BUNDLED_MODEL} ({error.strerror})"
        ) from None
    if digest != BUNDLED_SHA256:
        raise ValueError(f"the bundled language-ID model {BUNDLED_MODEL} is damaged (sha256 {digest[:12]}...)")
    return BUNDLED_MODEL


@functools.lru_cache(maxsize=4)
def load_model(path: str):
    """Load a fastText model once per process; returns the native predictor object."""
    import fasttext  # fasttext-community: fastText's own Python binding

    return fasttext.load_model(path).f


def model_input(text: pa.Array, max_chars: int) -> pa.Array:
    """What the model reads: the first ``max_chars`` characters on one line."""
    if max_chars > 0:
        text = pc.utf8_slice_codeunits(text, 0, max_chars)
    return pc.replace_substring(text, "\n", " ")


def predict(model, texts: list[str | None], k: int = 1) -> list[list[tuple[float, str]]]:
    """Top-``k`` (probability, label) pairs per text; ``texts`` must hold no newline."""
    out = []
    for t in texts:
        out.append(model.predict((t or "") + "\n", k, 0.0, "replace"))
    return out


TOP_K = 4  # labels read per document: the top two are kept, a group sums its members among them


@dataclass
class Detection:
    """Per document: the top label (null when the text has no letter) and its probability,
    the runner-up and its probability, and the top ``TOP_K`` (probability, label) pairs."""

    lang: pa.Array
    score: np.ndarray
    second: pa.Array
    second_score: np.ndarray
    top: list[list[tuple[float, str]]]


def detect(model, text: pa.Array, max_chars: int) -> Detection:
    sample = model_input(text, max_chars)
    has_letter = pc.fill_null(pc.match_substring_regex(sample, _HAS_LETTER), False)
    letters = has_letter.to_numpy(zero_copy_only=False)
    top = [
        [(min(p, 1.0), label[len(_LABEL_PREFIX) :]) for p, label in pairs] if has else []
        for pairs, has in zip(predict(model, sample.to_pylist(), k=TOP_K), letters)
    ]
    first = [pairs[0] if pairs else (0.0, None) for pairs in top]
    second = [pairs[1] if len(pairs) > 1 else (0.0, None) for pairs in top]
    lang = pa.array([label for _, label in first], pa.string())
    scores = np.array([p for p, _ in first], np.float32)
    lang, scores = _han_without_kana_is_chinese(model, sample, lang, scores)
    return Detection(
        lang=lang,
        score=scores,
        second=pa.array([label for _, label in second], pa.string()),
        second_score=np.array([p for p, _ in second], np.float32),
        top=top,
    )


def _han_without_kana_is_chinese(model, sample: pa.Array, lang: pa.Array, scores: np.ndarray):
    """Relabel ``ja`` as ``zh`` where the text has no kana (see the module docstring)."""
    no_kana = pc.invert(pc.fill_null(pc.match_substring_regex(sample, _HAS_KANA), False))
    suspect = pc.fill_null(pc.and_(pc.equal(lang, "ja"), no_kana), False)
    rows = np.flatnonzero(suspect.to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return lang, scores
    for row, top in zip(rows, predict(model, sample.take(pa.array(rows)).to_pylist(), k=3)):
        probs = {label[len(_LABEL_PREFIX) :]: p for p, label in top}
        scores[row] = min(1.0, probs.get("ja", 0.0) + probs.get("zh", 0.0))
    mask = np.zeros(len(lang), dtype=bool)
    mask[rows] = True
    lang = pc.if_else(pa.array(mask), pa.scalar("zh"), lang)
    return lang, scores
