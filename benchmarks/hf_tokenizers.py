"""Hugging Face ``tokenizers`` (Rust) built offline from a tiktoken encoding's ranks and split
pattern: the third opinion on prep's ids, and the peer its speed is measured against.

Why build rather than load: the models' own tokenizer.json files are downloads, and prep
runs without a network. A ``.tiktoken`` rank file holds no merge list, and transformers'
way of recovering one (a token's merge is the pair that merging it with only the lower
ranks leaves) misses tokens that only a longer piece reaches: Qwen3.5's " треб" in
" требало", which tiktoken gives and such a tokenizer does not. So every split of a token
into two tokens is a merge, ranked by the token: an adjacent pair joins when its
concatenation is a token, lowest rank first, which is tiktoken's own rule.

The pre-tokenizer is the encoding's pattern (``Split``, isolated) then GPT-2's
byte-to-character map, the model looks a whole piece up before merging
(``ignore_merges``), as tiktoken does, and Qwen's NFC is the normalizer its
tokenizer.json declares. No special token is added: prep encodes ``<|endoftext|>``
inside a document as plain text (``encode_ordinary``).

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


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every pair of tokens whose concatenation is a token, by that token's rank: tiktoken's
    rule (join the adjacent pair whose concatenation has the lowest rank) as a merge list."""
    merges = []
    for token, _ in sorted(ranks.items(), key=lambda item: item[1]):
        merges += [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
    return merges


def tokenizer_json(ranks: dict[bytes, int], pattern: str, normal_form: str | None) -> str:
    """A tokenizer.json (as text) that encodes as tiktoken does with these ranks and pattern."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {_as_chars(t): r for t, r in ranks.items()}
    merges = [(_as_chars(a), _as_chars(b)) for a, b in _merges(ranks)]
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
    ``cache`` (by the ranks' hash and the pattern): building one takes seconds."""
    from tokenizers import Tokenizer

    from pipeline.text.tokenizers import load_tokenizer

    tok = load_tokenizer(spec)
    key = hashlib.sha256(f"all-splits {tok.vocab_sha256} {tok.pattern} {tok.normal_form}".encode()).hexdigest()[:16]
    folder = cache or Path(tempfile.gettempdir()) / "prep-hf-tokenizers"
    path = folder / f"{spec}-{key}.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        text = tokenizer_json(tok.ranks, tok.pattern, tok.normal_form)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)  # atomic: a killed build leaves no half file under the final name
    return Tokenizer.from_file(str(path))
