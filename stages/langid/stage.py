"""``langid``: label each document's language and keep the wanted ones.

Columns: ``lang`` and ``lang_score`` (the top label and its probability), ``lang_2`` and
``lang_2_score`` (the runner-up), so a corpus can be re-decided later without running the
model again. A document is kept when its label is wanted (``languages``: a list of labels
or group names, or "all") and its score clears the label's threshold: one number for every
language, or per language (the default, see ``thresholds.py``: English keeps FineWeb's 0.65).
With ``second_opinion`` (CLD2, on by default, see ``second_opinion.py``) the label of a document
below its threshold or in a confusable set may be CLD2's; ``lang_score`` is then lid.176's
probability of that label (0 when it is not among lid.176's top four) and ``lang_2`` stays
lid.176's runner-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats import fasttext_model
from pipeline.formats.documents import TEXT, set_column
from pipeline.stage import Stage, StageOutput, register, threshold_detail
from pipeline.util.suggest import nearest_hint
from stages.langid import second_opinion, thresholds
from stages.langid.model import bundled_model_path, detect, load_model

LANG, LANG_SCORE = "lang", "lang_score"
LANG_2, LANG_2_SCORE = "lang_2", "lang_2_score"
# The columns the stage adds, in order (null for skipped sources).
COLUMNS = ((LANG, pa.string()), (LANG_SCORE, pa.float32()), (LANG_2, pa.string()), (LANG_2_SCORE, pa.float32()))
PER_LANGUAGE = "per-language"


@register
class LangId(Stage):
    """Adds the language columns; drops documents not in ``languages`` or below their threshold."""

    name = "langid"

    @dataclass
    class Options:
        # Languages to keep: model labels ("en", "de") or group names ("hbs"); "all" keeps
        # every language whose document clears its threshold; an empty list only labels.
        languages: list[str] | str = field(default_factory=lambda: ["en"])
        # "per-language": each language's own threshold (English: FineWeb's 0.65); a number:
        # that threshold for every language.
        min_score: float | str = PER_LANGUAGE
        # Thresholds for single languages, over either of the above (e.g. {hr = 0.3}).
        min_scores: dict[str, float] = field(default_factory=dict)
        # Close languages judged on their summed probability ({} turns grouping off).
        groups: dict[str, list[str]] = field(default_factory=lambda: dict(thresholds.DEFAULT_GROUPS))
        # Documents of these sources pass untouched with a null ``lang`` (language ID on code
        # says nothing useful and would drop most of it).
        skip_sources: list[str] = field(default_factory=lambda: ["code"])
        # Characters read per document: on web pages the label at 2000 characters matches the
        # whole-document label 99.7% of the time (benchmarks/langid.py), and the cap keeps model
        # time per document bounded (a 100 MB document costs what a 2000-character one does).
        max_chars: int = 2000
        # Another fastText language-ID model; empty means the bundled lid.176.ftz.
        model_path: str = ""
        # "cld2": CLD2 names the language of documents below their threshold (English aside)
        # and picks the member of a confusable set (Bosnian/Croatian, Malay/Indonesian);
        # "" leaves every label to the model. 1-2 KB documents, 67 languages, kept with the
        # right label: mean 0.976 against 0.931 (benchmarks/langid_models.py).
        second_opinion: str = "cld2"

        def __post_init__(self) -> None:
            if isinstance(self.languages, str) and self.languages != "all":
                raise ValueError(f'languages must be a list of labels or "all", not {self.languages!r}')
            if isinstance(self.min_score, str) and self.min_score != PER_LANGUAGE:
                raise ValueError(f'min_score must be a number in [0, 1] or "{PER_LANGUAGE}", not {self.min_score!r}')
            scores = [self.min_score, *self.min_scores.values()]
            if any(not isinstance(s, str) and not 0.0 <= s <= 1.0 for s in scores):
                raise ValueError("min_score and min_scores must lie in [0, 1]")
            if self.max_chars < 0:
                raise ValueError("max_chars must be >= 0 (0 reads whole documents)")
            if self.second_opinion and self.second_opinion not in second_opinion.ASKERS:
                raise ValueError(f"second_opinion must be one of {sorted(second_opinion.ASKERS)} or empty")
            if self.model_path and not Path(self.model_path).is_file():
                raise FileNotFoundError(f"model_path {self.model_path!r} does not exist")
            self._check_labels()

        def _check_labels(self) -> None:
            """Every label an option names is one a document can get: the model's, or the
            second opinion's (a label nothing gives would keep nothing, or change nothing)."""
            model = self.model_path or str(bundled_model_path())
            labels = set(fasttext_model.file_labels(model))
            if self.second_opinion:
                labels |= set(second_opinion.LANGUAGE_NAMES[self.second_opinion]().values())
            wanted = [] if self.languages == "all" else self.languages
            named = [("groups", label) for members in self.groups.values() for label in members]
            named += [("min_scores", label) for label in self.min_scores]
            named += [("languages", label) for label in wanted if label not in self.groups]
            for option, label in named:
                if label not in labels:
                    valid = sorted(labels) + (sorted(self.groups) if option == "languages" else [])
                    hint = nearest_hint(label, valid, second_opinion.cld2_language_names())
                    groups = f", or a group: {', '.join(sorted(self.groups))}" if option == "languages" else ""
                    raise ValueError(
                        f"{option}: {label!r} is not a language label of {Path(model).name}{hint} "
                        f"(labels are ISO codes such as en, de, zh, ceb: {len(labels)} in all{groups})"
                    )

    def __init__(self, options: LangId.Options):
        super().__init__(options)
        self.membership = thresholds.group_of(options.groups)
        table = thresholds.per_language() if options.min_score == PER_LANGUAGE else {}
        self.default_threshold = (
            thresholds.UNLISTED_THRESHOLD if options.min_score == PER_LANGUAGE else float(options.min_score)
        )
        self.thresholds = {**table, **options.min_scores}
        self.ask = second_opinion.ASKERS.get(options.second_opinion)

    @classmethod
    def added_columns(cls, options: LangId.Options) -> tuple[str, ...]:
        return tuple(name for name, _ in COLUMNS)

    @classmethod
    def files(cls, options: LangId.Options) -> list[str]:
        model = options.model_path or str(bundled_model_path())
        return [model, str(thresholds.THRESHOLDS_FILE)] if options.min_score == PER_LANGUAGE else [model]

    def _model(self):
        return load_model(self.options.model_path or str(bundled_model_path()))

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        n = batch.num_rows
        if source in self.options.skip_sources:
            for name, kind in COLUMNS:
                batch = set_column(batch, name, pa.nulls(n, kind))
            return StageOutput(batch=batch, drop_reason=pa.nulls(n, pa.string()))
        text = batch.column(TEXT)
        found = detect(self._model(), text, self.options.max_chars)
        labels = found.lang.to_pylist()
        judged, limit = self._judged(labels, found)
        below = [label is not None and bool(j < t) for label, j, t in zip(labels, judged, limit)]
        vouched = [False] * n
        if self.ask is not None:
            labels, vouched = second_opinion.settle(labels, below, text, self.options.max_chars, self.ask)
        scores = [
            score if label == first else dict((label_, p) for p, label_ in top).get(label, 0.0)
            for label, first, score, top in zip(labels, found.lang.to_pylist(), found.score.tolist(), found.top)
        ]
        values = (labels, scores, found.second, found.second_score)
        for (name, kind), column in zip(COLUMNS, values):
            batch = set_column(batch, name, pa.array(column, kind))
        reasons = self._reasons(labels, below, vouched)
        return StageOutput(batch=batch, drop_reason=reasons, detail=self._detail(reasons, labels, scores, judged))

    def _judged(self, labels: list[str | None], found) -> tuple[np.ndarray, np.ndarray]:
        """Per document: the score its label is judged on (its group's, for a group
        member; its own, 0, without a label) and that label's threshold, as float32."""
        judged = np.asarray(found.score, np.float32).copy()
        for row, (label, top) in enumerate(zip(labels, found.top)):
            if label is None:
                continue
            # A relabelled document (ja without kana -> zh) has no group: its score is its own.
            group = self.membership.get(label)
            if group:
                judged[row] = thresholds.group_score(top, group, self.membership)
        return judged, self._limits(labels)

    def _limits(self, labels: list[str | None]) -> np.ndarray:
        """Each document's label's threshold, as float32: looked up once per distinct label
        (a batch has a few dozen) and spread by the labels' dictionary indices."""
        encoded = pa.array(labels, pa.string()).dictionary_encode()
        per_label = [self.thresholds.get(label, self.default_threshold) for label in encoded.dictionary.to_pylist()]
        table = np.asarray([*per_label, self.default_threshold], np.float32)  # the last: no label
        return table[pc.fill_null(encoded.indices, len(per_label)).to_numpy()]

    def _detail(self, reasons: pa.Array, labels: list[str | None], scores: list[float], judged: np.ndarray) -> pa.Array:
        """The ledger's why, against the final label's threshold: for ``lang:low-score``
        the score it was judged on (the label is lid.176's, as below its threshold no
        second opinion relabels it unvouched); for ``lang:<label>``, an unwanted language
        whatever its score, that label and its ``lang_score``."""
        dropped = pc.is_valid(reasons).to_numpy(zero_copy_only=False)
        low = pc.fill_null(pc.equal(reasons, "lang:low-score"), False).to_numpy(zero_copy_only=False)
        unwanted = dropped & ~low
        value = np.where(unwanted, np.asarray(scores, np.float32), judged)
        return threshold_detail(
            pa.array(value, pa.float32()),
            pa.array(self._limits(labels), pa.float32(), mask=~dropped),
            pa.array(labels, pa.string(), mask=~unwanted),
        )

    def _reasons(self, labels: list[str | None], below: list[bool], vouched: list[bool]) -> pa.Array:
        """``lang:<label>`` for an unwanted language, ``lang:low-score`` below its threshold."""
        wanted = self.options.languages
        if not wanted:
            return pa.nulls(len(labels), pa.string())
        reasons: list[str | None] = []
        for label, low, sure in zip(labels, below, vouched):
            if label is None:
                reasons.append("lang:low-score")  # no letter: no language to keep it for
            elif wanted != "all" and label not in wanted and self.membership.get(label) not in wanted:
                reasons.append(f"lang:{label}")
            else:
                reasons.append("lang:low-score" if low and not sure else None)
        return pa.array(reasons, pa.string())
