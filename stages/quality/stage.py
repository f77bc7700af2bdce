"""``quality``: Gopher, C4 and FineWeb heuristics for web text, The Stack / StarCoder
rules for code, light rules for math; numba kernels over the batch's Arrow buffers.

Each document's signals become columns (``gq_*`` Gopher quality, ``gr_*`` Gopher
repetition, ``c4_*``, ``fw_*`` FineWeb, ``code_*``, ``blob_len``; null where a rule set
does not compute them), so thresholds can be changed later without recomputing. A web
page a Gopher rule drops is judged no further (no C4, no FineWeb), as in datatrove's
chain of filters: the ledger keeps a dropped page's reason, text and, as ``detail``, the
value and threshold of the rule that dropped it (``{"value": 12, "threshold": 50}``). For
web sources C4 removes lines: kept documents carry C4's rewritten text and count as
``changed``; rejected ones keep their original text for the ledger.

Text without spaces (Chinese, Japanese, Thai) is split as spaCy's English tokenizer
splits it, like datatrove with its default ``language="en"``: a run of CJK characters is
one "word". The word rules therefore reject such pages (too few words, overlong mean
word length), exactly as the reference does; these rules are English rules. Run this
stage after ``langid`` limited to English sources, or turn ``gopher_quality`` off for
sources in other languages (see the README of the stage options).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT, set_column
from pipeline.kernels.buffers import is_string, string_array, string_buffers
from pipeline.stage import Stage, StageOutput, register, threshold_detail
from pipeline.text.char_tables import kernel_tables, tables
from stages.quality import kernels
from stages.quality.chunk_memo import chunk_memo
from stages.quality.rules import DECIDE, Decider, QualityOptions, gopher_rules, rule_table
from stages.quality.signals import FW_LINES, INT, NGRAM_BASE, columns, pack_params
from stages.quality.substrings import Phrases


def _blob(strings: list[str], lower: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``strings`` as one UTF-8 byte array and the offsets of each (Arrow's layout)."""
    encoded = [(string.lower() if lower else string).encode() for string in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(item) for item in encoded])
    # Read-only, like the kernels' own constant strings: one compiled search serves both.
    return np.frombuffer(b"".join(encoded) or b"\0", np.uint8), offsets


def _columns(options: QualityOptions) -> list[tuple[str, int, pa.DataType]]:
    """The signal columns the stage writes under ``options`` (their n-gram sizes add some)."""
    return columns([size for size, _ in options.top_ngrams()], [size for size, _ in options.dup_ngrams()])


@register
class QualityStage(Stage):
    name = "quality"
    Options = QualityOptions

    def __init__(self, options: QualityOptions):
        super().__init__(options)
        self._tables = kernel_tables(tables())
        self._top_ngram_sizes = np.array([size for size, _ in options.top_ngrams()], np.int64)
        self._dup_ngram_sizes = np.array([size for size, _ in options.dup_ngrams()], np.int64)
        self._stop_words = _blob(options.gopher_stop_words)
        self._phrases = Phrases(options.c4_policy_substrings).arrays()
        self._autogen_markers = _blob(options.code_autogen_markers, lower=True)
        self._params = pack_params(options)
        self._gopher_rules = rule_table(gopher_rules(options))
        self.columns = _columns(options)
        self._n_signals = NGRAM_BASE + len(self._top_ngram_sizes) + len(self._dup_ngram_sizes)

    @classmethod
    def added_columns(cls, options: QualityOptions) -> tuple[str, ...]:
        return tuple(name for name, _, _ in _columns(options))

    def signals(
        self, text: pa.Array, rule_set: str, web_kernel: Callable = kernels.web_batch
    ) -> tuple[np.ndarray, pa.Array | None]:
        """The signal matrix of ``text`` under a rule set, and (web with C4 on) the rewritten
        text. ``web_kernel``: ``web_batch``, or what types its source to compile its callees.
        A web document a Gopher rule drops has the signals up to that rule's and no rewritten
        text (see ``web_batch``): what the stage writes of a dropped document is its reason."""
        data, offsets = string_buffers(text)
        signals = np.full((len(offsets) - 1, self._n_signals), np.nan)
        if rule_set == "code":
            kernels.code_batch(self._tables, data, offsets, self._params, *self._autogen_markers, signals)
            return signals, None
        if rule_set == "math":
            kernels.math_batch(self._tables, data, offsets, signals)
            return signals, None
        out = np.empty(max(int(offsets[-1] - offsets[0]), 1), np.uint8)
        out_offsets = np.zeros(len(offsets), np.int64)
        no_space_min = float(self.options.no_space_script_min_frac)
        web_kernel(
            self._tables,
            data,
            offsets,
            self._params,
            no_space_min,
            *self._stop_words,
            *self._phrases,
            self._top_ngram_sizes,
            self._dup_ngram_sizes,
            self._gopher_rules,
            signals,
            out,
            out_offsets,
            chunk_memo(),
        )
        rewritten = string_array(out[: out_offsets[-1]], out_offsets, text.type) if self.options.c4 else None
        return signals, rewritten

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        rule_set = self.options.rule_set(source)
        text = batch.column(TEXT)
        if not is_string(text.type):
            text = text.cast(pa.large_string())  # e.g. the null type of an empty column
        signals, rewritten = self.signals(text, rule_set)
        decider = Decider(batch.num_rows)
        DECIDE[rule_set](self.options, signals, decider)
        if rule_set == "web":
            self._check_skipped(signals, decider)
        names = pa.array([None] + decider.names, pa.string())
        reasons = names.take(pa.array(decider.code))
        changed = 0
        if rewritten is not None:
            keep = pa.array(decider.code == 0)
            new_text = pc.if_else(keep, rewritten.cast(text.type), text)
            differs = pc.and_(keep, pc.not_equal(new_text, text))
            changed = int(pc.sum(differs.cast(pa.int64())).as_py() or 0)
            batch = set_column(batch, TEXT, new_text)
        for name, column, column_type in self.columns:
            values = signals[:, column]
            missing = np.isnan(values)
            if column_type == INT:
                values = np.where(missing, 0, values).astype(np.int32)
            else:
                values = values.astype(np.float32)
            batch = set_column(batch, name, pa.array(values, column_type, mask=missing))
        counters = {f"quality.{rule_set}.{name}": count for name, count in _reason_counts(decider).items()}
        dropped = decider.code > 0
        value = pa.array(decider.value, mask=~dropped)
        detail = threshold_detail(value, pa.array(decider.threshold, mask=~dropped))
        return StageOutput(batch=batch, drop_reason=reasons, changed=changed, counters=counters, detail=detail)

    def _check_skipped(self, signals: np.ndarray, decider: Decider) -> None:
        """Every page the kernel stopped judging (FineWeb never ran: no line count) is dropped
        by a Gopher rule here too: the kernel's early stop and ``decide_web`` read the same
        rules, and a page kept without C4's rewriting would be a silent error."""
        skipped = np.isnan(signals[:, FW_LINES])
        gopher = (decider.code >= 1) & (decider.code <= self._gopher_rules[0].shape[0])
        if np.any(skipped & ~gopher):
            raise RuntimeError("quality: the web kernel stopped judging a page that no Gopher rule drops")


def _reason_counts(decider: Decider) -> dict[str, int]:
    counts = np.bincount(decider.code, minlength=len(decider.names) + 1)
    out: dict[str, int] = {}
    for code, name in enumerate(decider.names, start=1):
        if counts[code]:
            out[name] = out.get(name, 0) + int(counts[code])
    return out
