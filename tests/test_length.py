"""The ``length`` stage, directly: one hand-built batch in, one StageOutput out.

What it promises (stages/length.py): a document is kept when its length in characters
(Unicode code points, as Python's ``len``; not bytes) lies within ``[min_chars, max_chars]``,
both ends included; shorter ones are dropped as ``too-short``, longer ones as ``too-long``;
every row gets an ``n_chars`` column; the text itself is never changed.
"""

from __future__ import annotations

import gzip
import itertools
import json

import pyarrow as pa
import pytest
from conftest import SHARED_DATA, TEXT_TYPES, make_batch

from stages.length import Length

E_ACUTE = "\u00e9"  # 1 character, 2 bytes of UTF-8
CJK = "\u4eba"  # 1 character, 3 bytes
EMOJI = "\U0001f600"  # 1 character, 4 bytes


def length(texts: list[str], text_type: pa.DataType = pa.string(), **options):
    return Length(Length.Options(**options)).process(make_batch(texts, text_type), "web")


def reasons_of(out) -> list[str | None]:
    return out.drop_reason.to_pylist()


def n_chars_of(out) -> list[int]:
    return out.batch.column("n_chars").to_pylist()


# --- the defaults ---------------------------------------------------------------------


def test_defaults_keep_everything_even_the_empty_document():
    texts = ["", "a", "x" * 100_000, EMOJI * 10]
    out = length(texts)
    assert reasons_of(out) == [None] * len(texts)
    assert out.batch.num_rows == len(texts)


def test_default_options_are_no_minimum_and_no_maximum():
    options = Length.Options()
    assert (options.min_chars, options.max_chars) == (0, None)


# --- the boundaries -------------------------------------------------------------------


def test_min_chars_is_inclusive():
    out = length(["abcd", "abcde", "abcdef"], min_chars=5)
    assert reasons_of(out) == ["too-short", None, None]


def test_max_chars_is_inclusive():
    out = length(["abcd", "abcde", "abcdef"], max_chars=5)
    assert reasons_of(out) == [None, None, "too-long"]


def test_min_equal_to_max_keeps_exactly_that_length():
    out = length(["abcd", "abcde", "abcdef"], min_chars=5, max_chars=5)
    assert reasons_of(out) == ["too-short", None, "too-long"]


def test_empty_document_is_too_short_once_there_is_a_minimum():
    assert reasons_of(length([""], min_chars=1)) == ["too-short"]


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
@pytest.mark.parametrize("char", [E_ACUTE, CJK, EMOJI], ids=["2-byte", "3-byte", "4-byte"])
def test_limits_count_characters_not_bytes(char, text_type):
    five = char * 5  # 5 characters, 10 to 20 bytes
    assert len(five.encode()) > 5
    out = length([char * 4, five, char * 6], text_type, min_chars=5, max_chars=5)
    assert reasons_of(out) == ["too-short", None, "too-long"]
    assert n_chars_of(out) == [4, 5, 6]


def test_characters_are_code_points_not_grapheme_clusters():
    # "e" + combining acute is one grapheme, two code points; a skin-toned thumbs-up and
    # a flag are one grapheme each, two code points each. Python's len agrees.
    texts = ["e\u0301", "\U0001f44d\U0001f3fd", "\U0001f1eb\U0001f1f7"]
    assert n_chars_of(length(texts)) == [len(t) for t in texts] == [2, 2, 2]


def test_whitespace_counts_as_characters():
    assert reasons_of(length(["  \n\t ", "a"], min_chars=5)) == [None, "too-short"]


# --- what comes out ------------------------------------------------------------------


def test_n_chars_column_is_added_as_int64():
    out = length(["", "abc", f"{E_ACUTE}{CJK}{EMOJI}"])
    assert out.batch.schema.names == ["id", "text", "source", "n_chars"]
    assert out.batch.schema.field("n_chars").type == pa.int64()
    assert n_chars_of(out) == [0, 3, 3]


def test_n_chars_is_added_for_dropped_rows_too():
    out = length(["a", "abcdef"], min_chars=2, max_chars=5)
    assert reasons_of(out) == ["too-short", "too-long"]
    assert n_chars_of(out) == [1, 6]


def test_an_existing_n_chars_column_is_replaced_not_duplicated():
    batch = make_batch(["abc"]).append_column("n_chars", pa.array([999], pa.int64()))
    out = Length(Length.Options()).process(batch, "web")
    assert out.batch.schema.names.count("n_chars") == 1
    assert n_chars_of(out) == [3]


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_text_and_other_columns_are_untouched(text_type):
    batch = make_batch(["keep me", "x"], text_type)
    out = Length(Length.Options(min_chars=2)).process(batch, "web")
    for name in ("id", "text", "source"):
        assert out.batch.column(name).equals(batch.column(name))
    assert out.changed == 0
    assert out.counters == {}


def test_drop_reasons_are_aligned_with_rows_and_removal_is_left_to_the_runner():
    out = length(["a", "abc", "abcdefgh", "abcd"], min_chars=2, max_chars=4)
    assert out.batch.num_rows == 4
    assert out.drop_reason.type == pa.string()
    assert reasons_of(out) == ["too-short", None, "too-long", None]


def test_sliced_batch_with_offset_arrays_is_measured_row_for_row():
    batch = make_batch(["skipped, quite long", "a", EMOJI * 3, "abcdef"])
    sliced = batch.slice(1)
    assert sliced.column("text").offset == 1
    out = Length(Length.Options(min_chars=2, max_chars=5)).process(sliced, "web")
    assert out.batch.column("id").to_pylist() == ["doc-1", "doc-2", "doc-3"]
    assert n_chars_of(out) == [1, 3, 6]
    assert reasons_of(out) == ["too-short", None, "too-long"]


def test_empty_batch_is_fine():
    out = length([], min_chars=1, max_chars=2)
    assert out.batch.num_rows == 0
    assert len(out.drop_reason) == 0
    assert n_chars_of(out) == []


# --- options are checked when they are built ------------------------------------------


def test_negative_min_chars_is_refused():
    with pytest.raises(ValueError, match="min_chars"):
        Length.Options(min_chars=-1)


def test_max_chars_below_min_chars_is_refused():
    with pytest.raises(ValueError, match="max_chars"):
        Length.Options(min_chars=10, max_chars=9)


# --- real text ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    """The UDHR in 388 languages (many scripts, some text outside the BMP) and web pages."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    texts = []
    for path, n in (("langid/udhr2_docs.jsonl.gz", 400), ("web/dolma_ccmain_20190717_00140.jsonl.gz", 150)):
        with gzip.open(SHARED_DATA / path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in itertools.islice(f, n)]
    return texts


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_n_chars_equals_python_len_on_real_text(real_texts, text_type):
    out = length(real_texts, text_type)
    assert n_chars_of(out) == [len(t) for t in real_texts]
    assert any(len(t.encode()) > len(t) for t in real_texts)  # the sample is not all ASCII


def test_real_text_is_dropped_exactly_where_python_len_says(real_texts):
    lengths = sorted(len(t) for t in real_texts)
    low, high = lengths[len(lengths) // 4], lengths[3 * len(lengths) // 4]
    out = length(real_texts, min_chars=low, max_chars=high)
    expected = ["too-short" if len(t) < low else "too-long" if len(t) > high else None for t in real_texts]
    assert reasons_of(out) == expected
    assert set(expected) == {"too-short", None, "too-long"}
