"""OpenAI's named tiktoken encodings as prep ships them: for each, the bundled rank files it
is built from (in ``pipeline/text/vocab``), OpenAI's sha256 of its ranks, its split
pattern and its special tokens.

Data only, apart from ``tokenizers`` (which reads and hash-checks these files and builds a
tokenizer from a spec) so that the tokenizer code reads without a page of patterns and
hashes in its way, and a new bundled encoding is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

# Split patterns as tiktoken_ext/openai_public.py defines them (tiktoken 0.14).
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
    r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class NamedEncoding:
    """How to rebuild one of OpenAI's encodings from the bundled rank files."""

    files: tuple[str, ...]  # gzipped parts under formats.bundled.VOCABULARIES, concatenated in order
    sha256: str  # official hash of the concatenated, decompressed rank file
    pattern: str
    special_tokens: dict[str, int]
    explicit_n_vocab: int | None = None


NAMED_ENCODINGS: dict[str, NamedEncoding] = {
    "gpt2": NamedEncoding(
        ("r50k_base.tiktoken.gz",),
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        R50K_PATTERN,
        {ENDOFTEXT: 50256},
        50257,
    ),
    "r50k_base": NamedEncoding(
        ("r50k_base.tiktoken.gz",),
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
        R50K_PATTERN,
        {ENDOFTEXT: 50256},
        50257,
    ),
    # p50k's ranks are r50k's plus 24 tokens for runs of 2..25 spaces; only those ship apart.
    "p50k_base": NamedEncoding(
        ("r50k_base.tiktoken.gz", "p50k_base.extra.tiktoken.gz"),
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
        R50K_PATTERN,
        {ENDOFTEXT: 50256},
        50281,
    ),
    "cl100k_base": NamedEncoding(
        ("cl100k_base.tiktoken.gz",),
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        CL100K_PATTERN,
        {ENDOFTEXT: 100257, FIM_PREFIX: 100258, FIM_MIDDLE: 100259, FIM_SUFFIX: 100260, ENDOFPROMPT: 100276},
    ),
    "o200k_base": NamedEncoding(
        ("o200k_base.tiktoken.gz",),
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        O200K_PATTERN,
        {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}
