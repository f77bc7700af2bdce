"""``normalize``'s scan (stages/normalize_scan.py): which steps each document needs.

The stage skips a step on a document the scan says it cannot change, so the one promise
is that skipping changes nothing: the stage's output must equal running every step on
every document (``_rewrite`` without the scan's bits), for every character in the
contexts where NFC or a removal could touch it, and on real text.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pytest
from conftest import SHARED_DATA, TEXT_TYPES, make_batch

from stages.normalize import Normalize
from stages.normalize_scan import BLANK, CR, NFC, UNWANTED, needs

OPTIONS = [{}, {"newlines": False}, {"strip_controls": False}, {"newlines": False, "strip_controls": False}]


def assert_skipping_changes_nothing(texts: list[str], text_type: pa.DataType, **options) -> None:
    stage = Normalize(Normalize.Options(**options))
    batch = make_batch(texts, text_type)
    fast = stage.process(batch, "web")
    full = stage._rewrite(batch, batch.column("text"), None)
    got, expected = fast.batch.column("text"), full.batch.column("text")
    assert got.type == expected.type
    differ = np.flatnonzero(np.asarray(got.to_pylist(), object) != np.asarray(expected.to_pylist(), object))
    assert not len(differ), f"{len(differ)} differ, first {[ascii(texts[i]) for i in differ[:5]]}"
    assert fast.drop_reason.to_pylist() == full.drop_reason.to_pylist()
    assert fast.changed == full.changed


def every_character_in_context() -> list[str]:
    """Each code point alone and after what it could merge with: an ASCII letter (a
    combining mark), a Hangul leading jamo and syllable (vowel and trailing jamo), and
    between spaces (a document that may end up blank); then some beyond the BMP."""
    codes = [c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    codes += [0x10000, 0x1D15E, 0x1F600, 0x1FFFE, 0x1FFFF, 0x2FFFE, 0xEFFFF, 0x10FFFE, 0x10FFFF]
    texts = []
    for code in codes:
        char = chr(code)
        texts += [char, "e" + char, "\u1100" + char, "\uac00" + char + "x", " " + char + " "]
    return texts


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_skipping_changes_nothing_for_any_character(options):
    assert_skipping_changes_nothing(every_character_in_context(), pa.string(), **options)


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_skipping_changes_nothing_when_steps_meet(text_type):
    # A removal that brings a base and its mark together, \r beside a mark, a BOM between
    # jamo, a non-character beyond the BMP before a mark, a control far into a page.
    texts = ["e\x00\u0301", "e\r\u0301", "\r\n\x85e\u0301 x", "\u1100\ufeff\u1161", "\U0001fffe\u0301"]
    texts += ["a\r\n" * 50 + "\x01"]
    texts += ["", " ", "\t\n", "\r", "\ufeff", "\x00", "\u00a0", "plain"]
    assert_skipping_changes_nothing(texts, text_type)


def test_each_document_gets_the_bits_of_the_steps_it_needs():
    texts = ["plain", "a\r\nb", "a\x00b", "e\u0301", "\u1100\u1161x", "", " \n", "\u00e9", "\U0001f600x", "x\U0001fffe"]
    bits = needs(pa.array(texts), newlines=True, strip_controls=True).tolist()
    assert bits == [0, CR, UNWANTED, NFC, NFC, BLANK, BLANK, BLANK, NFC, NFC | UNWANTED]
    assert needs(pa.array(texts[:4]), newlines=False, strip_controls=False).tolist() == [0, 0, 0, NFC]


def test_a_sliced_array_is_read_in_its_window():
    texts = pa.array(["e\u0301", "plain", "a\r", "x"], pa.large_string()).slice(1, 2)
    assert needs(texts, newlines=True, strip_controls=True).tolist() == [0, CR]


REAL = ["web/web_gold", "web/web_html", "langid/udhr2_docs", "code/python_stdlib", "pii/debian_changelog_copyright"]


@pytest.mark.parametrize("name", REAL)
def test_skipping_changes_nothing_on_real_text(name):
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    with gzip.open(SHARED_DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    assert_skipping_changes_nothing(texts, pa.string())
