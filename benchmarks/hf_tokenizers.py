"""Hugging Face ``tokenizers`` (Rust) built offline from a tiktoken encoding's ranks and split
pattern: the third opinion on prep's ids, and the peer its speed is measured against.

Why build rather than load: the models' own tokenizer.json files are downloads, and prep
runs without a network. A ``.tiktoken`` rank file holds no merge list, so the merges are
recovered as transformers' ``TikTokenConverter`` recovers them: a token's merge is the
pair byte-pair encoding it with only the lower ranks leaves. The pre-tokenizer is the
encoding's pattern (``Split``, isolated) then GPT-2's byte-to-character map, the model
looks a whole piece up before merging (``ignore_merges``), as tiktoken does, and Qwen's
NFC is the normalizer its tokenizer.json declares. No special token is added: prep
encodes ``<|endoftext|>`` inside a document as plain text (``encode_ordinary``).

Oniguruma, the regex engine of ``tokenizers``, reads ``{1,3}+`` as "one to three, once or
more" where tiktoken's engine reads it as possessive, so cl100k's ``\\p{N}{1,3}+`` is given
as ``\\p{N}{1,3}`` (the same matches there: nothing follows it to backtrack into).
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path


@functools.cache
def byte_chars() -> dict[int, str]:
    """GPT-2's printable character for each byte (the ByteLevel pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _as_chars(token: bytes) -> str:
    table = byte_chars()
    return "".join(table[b] for b in token)


def _merge_of(ranks: dict[bytes, int], token: bytes, rank: int) -> tuple[bytes, bytes]:
    """The two parts tiktoken's merging leaves of ``token`` with ranks below its own."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {rank}) is no merge of two lower-ranked tokens")
    return parts[0], parts[1]


def tokenizer_json(ranks: dict[bytes, int], pattern: str, normal_form: str | None) -> str:
    """A tokenizer.json (as text) that encodes as tiktoken does with these ranks and pattern."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {_as_chars(t): r for t, r in ranks.items()}
    merges = [
        (_as_chars(a), _as_chars(b))
        for t, r in sorted(ranks.items(), key=lambda item: item[1])
        if len(t) > 1
        for a, b in [_merge_of(ranks, t, r)]
    ]
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern.replace("{1,3}+", "{1,3}")), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    if normal_form == "NFC":
        tok.normalizer = normalizers.NFC()
    return tok.to_str()


def hf_tokenizer(spec: str, cache: Path | None = None):
    """``tokenizers.Tokenizer`` for prep's tiktoken spec, its tokenizer.json kept in
    ``cache`` (by the ranks' hash and the pattern) since recovering the merges takes
    seconds to a minute."""
    from tokenizers import Tokenizer

    from pipeline.text.tokenizers import load_tokenizer

    tok = load_tokenizer(spec)
    key = hashlib.sha256(f"{tok.vocab_sha256} {tok.pattern} {tok.normal_form}".encode()).hexdigest()[:16]
    folder = cache or Path(tempfile.gettempdir()) / "prep-hf-tokenizers"
    path = folder / f"{spec}-{key}.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        text = tokenizer_json(tok.ranks, tok.pattern, tok.normal_form)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)  # atomic: a killed build leaves no half file under the final name
    return Tokenizer.from_file(str(path))
