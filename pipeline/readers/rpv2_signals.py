"""RedPajama-V2's quality signals file (``quality_signals/<...>.signals.json.gz``) as
columns, one row per document, in Arrow, never a Python object per document.

Each line of the file is ``{"id", "id_int", "metadata", "quality_signals"}``, and each
signal is a list of ``[start, end, value]`` spans of the document's characters
(RedPajama-Data ``app/src/core/schema/rp.py``). What becomes of them:

* document-level signals (``ccnet_*``, ``rps_doc_*``, one span over the whole document):
  a float64 column under RedPajama's own name, the span's value (null where RedPajama
  wrote null, e.g. ``rps_doc_mean_word_length`` of a document without words);
* line-level signals (``rps_lines_*``, one span a line): ``<name>_sum`` (the sum of the
  lines' values) and ``<name>_frac`` (that sum over the lines that have a value: for a
  0/1 signal, the fraction of lines where it holds), float64, null where no line has a
  value; RedPajama's spelling is kept (``..._terminal_punctution_mark``);
* the lines themselves in one column, ``rps_lines_spans``, a struct of lists: the line
  boundaries ``start`` and ``end`` (characters, end exclusive, from the first line
  signal) and each line signal's value per line, for a stage that removes lines.

The names are RedPajama's (``core/quality_signals``, the dataset card): every file gives
the same columns, whatever it holds; a signal a file lacks is null, one it has and this
list lacks is not read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

CCNET = (
    "ccnet_bucket",
    "ccnet_language_score",
    "ccnet_length",
    "ccnet_nlines",
    "ccnet_original_length",
    "ccnet_original_nlines",
    "ccnet_perplexity",
)
RPS_DOC = tuple(
    f"rps_doc_{name}"
    for name in (
        "books_importance",
        "books_importance_length_correction",
        "curly_bracket",
        "frac_all_caps_words",
        "frac_chars_dupe_10grams",
        "frac_chars_dupe_5grams",
        "frac_chars_dupe_6grams",
        "frac_chars_dupe_7grams",
        "frac_chars_dupe_8grams",
        "frac_chars_dupe_9grams",
        "frac_chars_top_2gram",
        "frac_chars_top_3gram",
        "frac_chars_top_4gram",
        "frac_lines_end_with_ellipsis",
        "frac_no_alph_words",
        "frac_unique_words",
        "ldnoobw_words",
        "lorem_ipsum",
        "mean_word_length",
        "ml_palm_score",
        "ml_wikipedia_score",
        "ml_wikiref_score",
        "num_sentences",
        "openwebtext_importance",
        "openwebtext_importance_length_correction",
        "stop_word_fraction",
        "symbol_to_word_ratio",
        "unigram_entropy",
        "ut1_blacklist",
        "wikipedia_importance",
        "wikipedia_importance_length_correction",
        "word_count",
    )
)
DOC_SIGNALS = CCNET + RPS_DOC
LINE_SIGNALS = (
    "rps_lines_ending_with_terminal_punctution_mark",
    "rps_lines_javascript_counts",
    "rps_lines_num_words",
    "rps_lines_numerical_chars_fraction",
    "rps_lines_start_with_bulletpoint",
    "rps_lines_uppercase_letter_fraction",
)
SPANS = "rps_lines_spans"

_SPAN_LISTS = pa.list_(pa.list_(pa.float64()))
FILE_SCHEMA = pa.schema(
    [("id", pa.string()), ("quality_signals", pa.struct([(n, _SPAN_LISTS) for n in DOC_SIGNALS + LINE_SIGNALS]))]
)
SPANS_TYPE = pa.struct(
    [("start", pa.list_(pa.int64())), ("end", pa.list_(pa.int64()))]
    + [(name, pa.list_(pa.float64())) for name in LINE_SIGNALS]
)
COLUMNS = pa.schema(
    [(name, pa.float64()) for name in DOC_SIGNALS]
    + [(f"{name}_{kind}", pa.float64()) for name in LINE_SIGNALS for kind in ("sum", "frac")]
    + [(SPANS, SPANS_TYPE)]
)


class SignalsError(ValueError):
    """A signals file whose spans are not ``[start, end, value]``."""


def read_signals(path: Path) -> tuple[pa.Array, pa.Table]:
    """One file's ids and its signals as ``COLUMNS``; raises ``READ_ERRORS`` for a file
    that cannot be read or parsed, ``SignalsError`` for spans of the wrong shape."""
    with pa.input_stream(str(path), compression="detect") as stream:
        options = pajson.ParseOptions(explicit_schema=FILE_SCHEMA, unexpected_field_behavior="ignore")
        table = pajson.read_json(stream, parse_options=options).combine_chunks()
    signals = table.column("quality_signals").chunk(0) if table.num_rows else None
    n = table.num_rows
    columns = []
    for name in DOC_SIGNALS:
        columns.append(_first_value(signals.field(name), n) if n else pa.nulls(0, pa.float64()))
    lines = {name: _spans_of(signals.field(name)) if n else None for name in LINE_SIGNALS}
    for name in LINE_SIGNALS:
        columns += _sum_and_frac(*lines[name], n) if n else [pa.nulls(0, pa.float64())] * 2
    columns.append(_spans(lines, n))
    ids = table.column("id").chunk(0) if n else pa.array([], pa.string())
    return ids, pa.Table.from_arrays(columns, schema=COLUMNS)


def empty_columns(n: int) -> pa.Table:
    """The signal columns of ``n`` documents that have none (tail, or no signals file)."""
    return pa.Table.from_arrays([pa.nulls(n, field.type) for field in COLUMNS], schema=COLUMNS)


def _spans_of(column: pa.ListArray) -> tuple[np.ndarray, pa.Array]:
    """Per row the number of spans (0 for null), and the spans themselves, rows one after
    another, each checked to be ``[start, end, value]``."""
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    inner = column.flatten()
    if len(inner):
        widths = pc.list_value_length(inner)
        if widths.null_count or pc.min(widths).as_py() != 3 or pc.max(widths).as_py() != 3:
            raise SignalsError("a span is not [start, end, value]")
    return lengths, inner


def _first_value(column: pa.ListArray, n: int) -> pa.Array:
    """A document-level signal: the value of its (first) span."""
    lengths, inner = _spans_of(column)
    if not len(inner):
        return pa.nulls(n, pa.float64())
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    values = pc.list_element(inner, 2).take(pa.array(np.where(lengths > 0, firsts, 0)))
    return pc.if_else(pa.array(lengths > 0), values, pa.scalar(None, pa.float64()))


def _sum_and_frac(lengths: np.ndarray, inner: pa.Array, n: int) -> list[pa.Array]:
    if not len(inner):
        return [pa.nulls(n, pa.float64())] * 2
    values = pc.list_element(inner, 2)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    filled = pc.fill_null(values, 0.0).to_numpy(zero_copy_only=False)
    parent = np.repeat(np.arange(n), lengths)
    sums = np.bincount(parent, weights=filled, minlength=n)
    counted = np.bincount(parent, weights=valid, minlength=n)
    none = counted == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        fracs = sums / counted
    return [pa.array(sums, mask=none), pa.array(fracs, mask=none)]


def _spans(lines: dict[str, tuple | None], n: int) -> pa.Array:
    """``rps_lines_spans``: each field a list per document, on its signal's own lines."""
    if not n:
        return pa.nulls(0, SPANS_TYPE)
    lengths, inner = lines[LINE_SIGNALS[0]]
    fields = [
        _lists(lengths, pc.cast(pc.list_element(inner, 0), pa.int64()) if len(inner) else pa.array([], pa.int64())),
        _lists(lengths, pc.cast(pc.list_element(inner, 1), pa.int64()) if len(inner) else pa.array([], pa.int64())),
    ]
    for name in LINE_SIGNALS:
        lengths, inner = lines[name]
        fields.append(_lists(lengths, pc.list_element(inner, 2) if len(inner) else pa.array([], pa.float64())))
    return pa.StructArray.from_arrays(fields, fields=list(SPANS_TYPE))


def _lists(lengths: np.ndarray, values: pa.Array) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)
