"""``langid``: label each document's language with fastText's lid.176 model and keep the wanted ones.

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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.stage import Stage, StageOutput, register

LANG, LANG_SCORE = "lang", "lang_score"

_LABEL_PREFIX = "__label__"
_HAS_LETTER = r"\pL"
_HAS_KANA = r"[\p{Hiragana}\p{Katakana}]"


BUNDLED_MODEL = Path(__file__).resolve().parent / "models" / "lid.176.ftz"
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


def _model_input(text: pa.Array, max_chars: int) -> pa.Array:
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


def detect(model, text: pa.Array, max_chars: int) -> tuple[pa.Array, pa.Array]:
    """Language label (null when the text has no letter) and float32 score for each document."""
    sample = _model_input(text, max_chars)
    labels: list[str | None] = []
    scores = np.zeros(len(sample), dtype=np.float32)
    for i, top in enumerate(predict(model, sample.to_pylist())):
        if top:
            scores[i] = top[0][0]
            labels.append(top[0][1][len(_LABEL_PREFIX) :])
        else:
            labels.append(None)
    lang = pa.array(labels, pa.string())
    has_letter = pc.fill_null(pc.match_substring_regex(sample, _HAS_LETTER), False)
    lang = pc.if_else(has_letter, lang, pa.scalar(None, pa.string()))
    scores = np.where(has_letter.to_numpy(zero_copy_only=False), np.minimum(scores, 1.0), 0.0)
    lang, scores = _han_without_kana_is_chinese(model, sample, lang, scores.astype(np.float32))
    return lang, pa.array(scores, pa.float32())


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


@register
class LangId(Stage):
    """Adds ``lang``/``lang_score``; drops documents not in ``languages`` at ``min_score``."""

    name = "langid"

    @dataclass
    class Options:
        # Languages to keep (model labels); an empty list keeps every document and only labels.
        languages: list[str] = field(default_factory=lambda: ["en"])
        # FineWeb keeps English at fastText score >= 0.65.
        min_score: float = 0.65
        # Documents of these sources pass untouched with a null ``lang`` (language ID on code
        # says nothing useful and would drop most of it).
        skip_sources: list[str] = field(default_factory=lambda: ["code"])
        # Characters read per document: on web pages the label at 2000 characters matches the
        # whole-document label 99.7% of the time (benchmarks/langid.py), and the cap keeps model
        # time per document bounded (a 100 MB document costs what a 2000-character one does).
        max_chars: int = 2000
        # Another fastText language-ID model; empty means the bundled lid.176.ftz.
        model_path: str = ""

        def __post_init__(self) -> None:
            if not 0.0 <= self.min_score <= 1.0:
                raise ValueError("min_score must lie in [0, 1]")
            if self.max_chars < 0:
                raise ValueError("max_chars must be >= 0 (0 reads whole documents)")
            if self.model_path and not Path(self.model_path).is_file():
                raise FileNotFoundError(f"model_path {self.model_path!r} does not exist")

    @classmethod
    def files(cls, options: LangId.Options) -> list[str]:
        return [options.model_path or str(bundled_model_path())]

    def _model(self):
        return load_model(self.options.model_path or str(bundled_model_path()))

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        n = batch.num_rows
        if source in self.options.skip_sources:
            batch = set_column(batch, LANG, pa.nulls(n, pa.string()))
            batch = set_column(batch, LANG_SCORE, pa.nulls(n, pa.float32()))
            return StageOutput(batch=batch, drop_reason=pa.nulls(n, pa.string()))
        lang, score = detect(self._model(), batch.column(TEXT), self.options.max_chars)
        batch = set_column(set_column(batch, LANG, lang), LANG_SCORE, score)
        return StageOutput(batch=batch, drop_reason=self._reasons(lang, score))

    def _reasons(self, lang: pa.Array, score: pa.Array) -> pa.Array:
        """``lang:<label>`` for an unwanted language, ``lang:low-score`` below ``min_score``."""
        none = pa.scalar(None, pa.string())
        if not self.options.languages:
            return pa.nulls(len(lang), pa.string())
        wanted = pc.fill_null(pc.is_in(lang, pa.array(self.options.languages, pa.string())), False)
        low = pc.less(score, pa.scalar(self.options.min_score, pa.float32()))
        other = pc.binary_join_element_wise(pa.scalar("lang:"), lang, "")
        reason = pc.if_else(low, pa.scalar("lang:low-score"), none)
        has_label = pc.is_valid(lang)
        return pc.if_else(pc.and_(has_label, pc.invert(wanted)), other, reason)
