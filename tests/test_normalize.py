"""The ``normalize`` stage, directly: one hand-built batch in, one StageOutput out.

What it promises (stages/normalize.py): Unicode normal form (NFC by default), ``\\r\\n`` and
lone ``\\r`` turned into ``\\n``, control characters, non-characters and stray byte-order
marks removed while ``\\n`` and ``\\t`` stay; a document left blank is dropped as
``empty-after-normalize``; ``changed`` counts the documents whose text was rewritten.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import unicodedata
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import SHARED_DATA, TEXT_TYPES, make_batch

from stages.normalize import Normalize


def normalize(texts: list[str], text_type: pa.DataType = pa.string(), **options):
    return Normalize(Normalize.Options(**options)).process(make_batch(texts, text_type), "web")


def texts_of(out) -> list[str]:
    return out.batch.column("text").to_pylist()


def reasons_of(out) -> list[str | None]:
    return out.drop_reason.to_pylist()


# --- what the default options do ---------------------------------------------------------


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_decomposed_accents_are_composed_to_nfc(text_type):
    out = normalize(["e\u0301", "Cafe\u0301 cre\u0300me", "A\u030a"], text_type)
    assert texts_of(out) == ["\u00e9", "Caf\u00e9 cr\u00e8me", "\u00c5"]
    assert out.changed == 3


def test_crlf_and_lone_cr_become_lf():
    out = normalize(["one\r\ntwo", "one\rtwo", "a\r\n\r\nb\r", "\r\r\n"])
    assert texts_of(out)[:3] == ["one\ntwo", "one\ntwo", "a\n\nb\n"]
    # "\r\r\n" is a lone \r then a \r\n: two line breaks, not one, and not three.
    assert texts_of(out)[3] == "\n\n"


@pytest.mark.parametrize(
    "dirty, clean",
    [
        ("a\x00b", "ab"),  # NUL
        ("a\x07b\x08c", "abc"),  # BEL, backspace
        ("a\x0bb\x0cc", "abc"),  # vertical tab, form feed
        ("a\x1bb\x1fc", "abc"),  # ESC, unit separator
        ("a\x7fb", "ab"),  # DEL
        ("a\x80b\x9fc", "abc"),  # C1 controls
        ("\ufeffhello", "hello"),  # byte-order mark at the start
        ("hel\ufefflo", "hello"),  # ... and a stray one inside
        ("a\ufdd0b\ufdefc", "abc"),  # non-characters U+FDD0..U+FDEF
        ("a\ufffeb\uffffc", "abc"),  # U+FFFE, U+FFFF
        ("a\U0001fffeb\U0010ffffc", "abc"),  # U+xFFFE / U+xFFFF of the other planes
    ],
    ids=lambda v: ascii(v),
)
def test_control_characters_noncharacters_and_stray_boms_are_removed(dirty, clean):
    out = normalize([dirty])
    assert texts_of(out) == [clean]
    assert reasons_of(out) == [None]
    assert out.changed == 1


def test_newline_and_tab_are_kept():
    text = "title\n\tindented\n\n\tcol1\tcol2\n"
    out = normalize([text])
    assert texts_of(out) == [text]
    assert out.changed == 0


def test_unicode_line_and_paragraph_separators_and_zero_width_characters_are_kept():
    # Only C0/C1 controls, non-characters and U+FEFF are removed; formatting characters
    # that carry meaning in some scripts (ZWJ in emoji, ZWNJ in Persian) are not.
    text = "a\u2028b\u2029c \u200d \u200c \u200b"
    assert texts_of(normalize([text])) == [text]


def test_non_ascii_text_passes_unchanged():
    texts = [
        "\u4eba\u4eba\u751f\u800c\u81ea\u7531\uff0c"
        "\u5728\u5c0a\u4e25\u548c\u6743\u5229\u4e0a\u4e00\u5f8b\u5e73\u7b49\u3002",  # Chinese
        "\u3059\u3079\u3066\u306e\u4eba\u9593\u306f\u3001"
        "\u751f\u307e\u308c\u306a\u304c\u3089\u306b\u3057\u3066\u81ea\u7531",  # Japanese
        "\ubaa8\ub4e0 \uc778\uac04\uc740 \ud0dc\uc5b4\ub0a0 "
        "\ub54c\ubd80\ud130 \uc790\uc720\ub86d\uace0",  # Korean (precomposed)
        "\u064a\u0648\u0644\u062f \u062c\u0645\u064a\u0639 "
        "\u0627\u0644\u0646\u0627\u0633 \u0623\u062d\u0631\u0627\u0631\u064b\u0627",  # Arabic
        "\u05db\u05dc \u05d1\u05e0\u05d9 \u05d0\u05d3\u05dd",  # Hebrew
        "\u0938\u092d\u0940 \u092e\u0928\u0941\u0937\u094d\u092f\u094b\u0902",  # Devanagari
        "\u0412\u0441\u0435 \u043b\u044e\u0434\u0438 "
        "\u0440\u043e\u0436\u0434\u0430\u044e\u0442\u0441\u044f",  # Cyrillic
        "ok \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \u2764\ufe0f",  # emoji
        "\U0001d400\U0001d401 \u00bd \ufb01",  # compatibility characters survive NFC
    ]
    assert all(unicodedata.is_normalized("NFC", t) for t in texts)
    out = normalize(texts)
    assert texts_of(out) == texts
    assert reasons_of(out) == [None] * len(texts)
    assert out.changed == 0


# --- dropping and counting ---------------------------------------------------------------


def test_document_left_empty_is_dropped_as_empty_after_normalize():
    out = normalize(["\x00\x01\ufeff", "", "kept"])
    assert reasons_of(out) == ["empty-after-normalize", "empty-after-normalize", None]


def test_document_left_only_whitespace_is_dropped_too():
    out = normalize(["  \n\t\x00 \r\n", "\u3000"])  # \u3000: ideographic space
    assert reasons_of(out) == ["empty-after-normalize", "empty-after-normalize"]


def test_dropping_keeps_the_batch_aligned_and_leaves_removal_to_the_runner():
    out = normalize(["a", "\x00", "b"])
    assert out.batch.num_rows == 3
    assert len(out.drop_reason) == 3
    assert out.batch.column("id").to_pylist() == ["doc-0", "doc-1", "doc-2"]
    assert texts_of(out) == ["a", "", "b"]


def test_changed_counts_only_rewritten_documents():
    out = normalize(["clean", "e\u0301", "clean too", "a\r\nb", "x\x00y", "\u00e9"])
    assert out.changed == 3
    assert out.counters == {}


def test_changed_does_not_count_documents_it_drops():
    out = normalize(["\x00", "e\u0301"])
    assert reasons_of(out) == ["empty-after-normalize", None]
    assert out.changed == 1


def test_columns_other_than_text_are_untouched():
    batch = make_batch(["e\u0301\r\n"]).append_column("url", pa.array(["http://x/\x00"]))
    out = Normalize(Normalize.Options()).process(batch, "web")
    assert out.batch.schema.names == ["id", "text", "source", "url"]
    assert out.batch.column("url").to_pylist() == ["http://x/\x00"]
    assert out.batch.column("source").to_pylist() == ["web"]


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_text_column_keeps_its_arrow_type(text_type):
    assert normalize(["e\u0301"], text_type).batch.schema.field("text").type == text_type


def test_sliced_batch_with_offset_arrays_is_normalized_row_for_row():
    batch = make_batch(["skipped\x00", "e\u0301", "a\r\nb", "\x00", "clean"])
    sliced = batch.slice(1)
    assert sliced.column("text").offset == 1
    out = Normalize(Normalize.Options()).process(sliced, "web")
    assert out.batch.num_rows == 4
    assert out.batch.column("id").to_pylist() == ["doc-1", "doc-2", "doc-3", "doc-4"]
    assert texts_of(out) == ["\u00e9", "a\nb", "", "clean"]
    assert reasons_of(out) == [None, None, "empty-after-normalize", None]
    assert out.changed == 2  # the emptied one is rejected, not changed


def test_empty_batch_is_fine():
    out = normalize([])
    assert out.batch.num_rows == 0
    assert len(out.drop_reason) == 0
    assert out.changed == 0


# --- each option ------------------------------------------------------------------------


def test_form_nfd_decomposes():
    assert texts_of(normalize(["\u00e9"], form="NFD")) == ["e\u0301"]


def test_form_nfkc_folds_compatibility_characters_that_nfc_keeps():
    text = "\ufb01le \u00bd \uff21 \u2460"  # ligature fi, one half, fullwidth A, circled 1
    assert texts_of(normalize([text], form="NFC")) == [text]
    assert texts_of(normalize([text], form="NFKC")) == ["file 1\u20442 A 1"]


def test_form_nfkd_folds_and_decomposes():
    assert texts_of(normalize(["\ufb01\u00e9"], form="NFKD")) == ["fie\u0301"]


def test_unknown_form_is_refused_when_the_options_are_built():
    with pytest.raises(ValueError, match="NFC, NFKC, NFD, NFKD"):
        Normalize.Options(form="nfc")


def test_newlines_off_keeps_carriage_returns():
    out = normalize(["one\r\ntwo\rthree"], newlines=False)
    assert texts_of(out) == ["one\r\ntwo\rthree"]  # \r is not a control the stage strips
    assert out.changed == 0


def test_newlines_off_still_strips_controls_and_composes():
    assert texts_of(normalize(["e\u0301\x00\r\n"], newlines=False)) == ["\u00e9\r\n"]


def test_strip_controls_off_keeps_controls_noncharacters_and_boms():
    text = "\ufeffa\x00b\x07c\x85d\ufdd0e\uffff"
    out = normalize([text], strip_controls=False)
    assert texts_of(out) == [text]
    assert out.changed == 0


def test_strip_controls_off_still_converts_newlines_and_composes():
    assert texts_of(normalize(["\x00e\u0301\r\n"], strip_controls=False)) == ["\x00\u00e9\n"]


def test_document_of_only_controls_is_kept_when_strip_controls_is_off():
    # The blank test trims whitespace only; a NUL is not whitespace.
    assert reasons_of(normalize(["\x00"], strip_controls=False)) == [None]


def test_every_option_off_except_form_nfc_leaves_nfc_text_alone():
    text = "\ufeffa\r\n\x00b"
    out = normalize([text], newlines=False, strip_controls=False)
    assert texts_of(out) == [text]
    assert out.changed == 0


def test_removing_a_control_between_letter_and_accent_lets_them_compose():
    # Controls go before the normal form is taken, so the result is fully composed.
    assert texts_of(normalize(["e\x00\u0301"])) == ["\u00e9"]


# --- real text --------------------------------------------------------------------------

# What the stage removes, for the plain Python reference below: C0 controls except tab and
# newline, DEL, C1 controls, U+FDD0..U+FDEF, U+FEFF, and U+xFFFE/U+xFFFF of every plane.
# (The astral ones are kept out of the character class: Python's re is slow with them.)
_UNWANTED_BMP = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufdd0-\ufdef\ufeff\ufffe\uffff]")
_UNWANTED_ASTRAL = [chr(plane << 16 | low) for plane in range(1, 17) for low in (0xFFFE, 0xFFFF)]


def has_unwanted(text: str) -> bool:
    return _UNWANTED_BMP.search(text) is not None or any(c in text for c in _UNWANTED_ASTRAL)


def strip_unwanted(text: str) -> str:
    text = _UNWANTED_BMP.sub("", text)
    for c in _UNWANTED_ASTRAL:
        text = text.replace(c, "")
    return text


def reference_normalize(text: str) -> str:
    """The stage's promise written in plain Python, to compare Arrow's kernels against."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return unicodedata.normalize("NFC", strip_unwanted(text))


def _read(path: Path, n: int, raw_contains: str = "") -> list[str]:
    """The texts of the first ``n`` lines (only of lines holding ``raw_contains``)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in itertools.islice(f, n) if raw_contains in line]


def _has_line_or_control_trouble(text: str) -> bool:
    return "\r" in text or has_unwanted(text)


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    """About 1.5 MB of real text: the UDHR in 388 languages (the first 2,000 characters
    of each; 19 of them are not NFC); web pages, among them every one of the first
    thousand with lone carriage returns, control characters (UTF-16 read as UTF-8) or
    byte-order marks; and the one source file in the head of the Python corpus with CRLF
    line ends (none of the web pages has any)."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    texts = [t[:2000] for t in _read(SHARED_DATA / "langid" / "udhr2_docs.jsonl.gz", 400)]
    web = _read(SHARED_DATA / "web" / "web_gold.jsonl.gz", 1000)
    texts += web[:100] + [t for t in web[100:] if _has_line_or_control_trouble(t)]
    texts += _read(SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz", 150)
    python = _read(SHARED_DATA / "code" / "python_stdlib.jsonl.gz", 800, raw_contains="\\r\\n")
    texts += [t for t in python if "\r\n" in t]
    return texts


def test_real_sample_holds_what_normalize_rewrites(real_texts):
    assert any("\r\n" in t for t in real_texts)
    assert any("\ufeff" in t for t in real_texts)
    assert any(_UNWANTED_BMP.search(t.replace("\ufeff", "")) for t in real_texts)
    assert sum(not unicodedata.is_normalized("NFC", t) for t in real_texts) >= 10
    assert sum(not t.isascii() for t in real_texts) >= 300


def test_real_text_matches_the_plain_python_reference(real_texts):
    out = normalize(real_texts)
    got = texts_of(out)
    expected = [reference_normalize(t) for t in real_texts]
    mismatched = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not mismatched, f"{len(mismatched)} documents differ from the reference, first {mismatched[:5]}"
    assert out.changed == sum(t != e for t, e in zip(real_texts, expected))
    assert out.changed > 0  # the sample does exercise the rewrites


def test_real_text_comes_out_nfc_without_carriage_returns_or_controls(real_texts):
    for text in texts_of(normalize(real_texts, pa.large_string())):
        assert unicodedata.is_normalized("NFC", text)
        assert "\r" not in text
        assert not has_unwanted(text)


def test_normalize_is_idempotent_on_real_text(real_texts):
    stage = Normalize(Normalize.Options())
    once = stage.process(make_batch(real_texts), "web")
    twice = stage.process(once.batch, "web")
    assert twice.changed == 0
    assert texts_of(twice) == texts_of(once)
    assert reasons_of(twice) == reasons_of(once)


@pytest.mark.parametrize("form", ["NFKC", "NFD", "NFKD"])
def test_every_form_is_idempotent_on_real_text(real_texts, form):
    stage = Normalize(Normalize.Options(form=form))
    once = stage.process(make_batch(real_texts), "web")
    assert stage.process(once.batch, "web").changed == 0


def test_only_documents_a_step_could_change_are_rewritten_and_the_rest_are_unchanged():
    # Plain pages beside ones each step changes: Hangul jamo that compose, a combining
    # accent, \r, a control, a character beyond the BMP, whitespace only, a non-breaking space.
    texts = [
        "plain page.",
        "\u1100\u1161 x",
        "\uac00\u11a8 x",
        "e\u0301",
        "a\r\nb",
        "a\x00b",
        "\U0001f600 ok",
        " \n ",
        "\u00a0",
    ]
    out = normalize(texts)
    assert texts_of(out) == [unicodedata.normalize("NFC", t.replace("\r\n", "\n").replace("\x00", "")) for t in texts]
    assert reasons_of(out) == [None] * 7 + ["empty-after-normalize"] * 2
    assert out.changed == 5  # the jamo twice, the accent, \r\n, the control
