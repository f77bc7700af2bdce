"""Regenerate ``char_tables_data.py``: the character classes and special cases the quality
kernels need, taken from the sources they must agree with.

Why generated: datatrove decides words with spaCy's English tokenizer and Python's
``str`` predicates. We reproduce that in numba, so we need, per code point, the classes
that spaCy's prefix/suffix/infix regexes and Python's ``isspace``/``isalpha`` use, and
spaCy's table of special cases ("don't" -> "do", "n't"). Reading them from the real
objects (rather than retyping them) keeps the copy honest. spaCy and datatrove are only
needed to run this script, never at run time.

Run: ``python -m pipeline.text._gen_char_tables`` (writes pipeline/text/char_tables_data.py).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

# Flag bits; tables.py repeats them as constants for the kernels.
FLAGS = {
    "SPACE": 1 << 0,  # str.isspace
    "ALPHA": 1 << 1,  # str.isalpha
    "ALNUM": 1 << 2,  # str.isalnum
    "DT_PUNCT": 1 << 3,  # datatrove PUNCTUATION_SET (Gopher "symbol" words)
    "DT_TERM": 1 << 4,  # datatrove TERMINAL_PUNCTUATION (FineWeb stop chars)
    "SP_ALPHA": 1 << 5,  # spaCy ALPHA
    "SP_LOWER": 1 << 6,  # spaCy ALPHA_LOWER
    "SP_UPPER": 1 << 7,  # spaCy ALPHA_UPPER
    "SP_PREFIX": 1 << 8,  # one char that spaCy splits off the front
    "SP_SUFFIX": 1 << 9,  # one char that spaCy splits off the end, whatever precedes it
    "SP_DOT_AFTER": 1 << 10,  # spaCy splits a final "." after this char
    "SP_QUOTE": 1 << 11,  # spaCy CONCAT_QUOTES
    "SP_ICON": 1 << 12,  # spaCy LIST_ICONS (infix, prefix and suffix)
    "UNI_P": 1 << 13,  # unicodedata category P* (spaCy is_punct)
    "SENT_PUNCT": 1 << 14,  # spaCy Sentencizer punct_chars
    "DECIMAL": 1 << 15,  # Python re \d (category Nd)
    "LINEBREAK": 1 << 16,  # str.splitlines boundaries
    "WORD": 1 << 17,  # Python re \w
}


def _char_flags() -> list[int]:
    import spacy
    from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION
    from spacy.lang.char_classes import ALPHA, ALPHA_LOWER, ALPHA_UPPER, CONCAT_QUOTES, LIST_ICONS
    from spacy.pipeline import Sentencizer

    tok = spacy.blank("en").tokenizer
    sp_alpha = re.compile(f"[{ALPHA}]")
    sp_lower = re.compile(f"[{ALPHA_LOWER}]")
    sp_upper = re.compile(f"[{ALPHA_UPPER}]")
    sp_quote = re.compile(f"[{CONCAT_QUOTES}]")
    sp_icon = re.compile(LIST_ICONS[0])
    word = re.compile(r"\w")
    decimal = re.compile(r"\d")
    sent = set(Sentencizer.default_punct_chars)
    flags = [0] * 0x110000
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        f = 0
        f |= FLAGS["SPACE"] if c.isspace() else 0
        f |= FLAGS["ALPHA"] if c.isalpha() else 0
        f |= FLAGS["ALNUM"] if c.isalnum() else 0
        f |= FLAGS["DT_PUNCT"] if c in PUNCTUATION_SET else 0
        f |= FLAGS["DT_TERM"] if c in TERMINAL_PUNCTUATION else 0
        f |= FLAGS["SP_ALPHA"] if sp_alpha.match(c) else 0
        f |= FLAGS["SP_LOWER"] if sp_lower.match(c) else 0
        f |= FLAGS["SP_UPPER"] if sp_upper.match(c) else 0
        if not c.isspace():
            f |= FLAGS["SP_PREFIX"] if tok.find_prefix(c + "a") == 1 else 0
            f |= FLAGS["SP_SUFFIX"] if tok.find_suffix(" " + c) == 1 else 0
            if c != ".":
                f |= FLAGS["SP_DOT_AFTER"] if tok.find_suffix(c + ".") == 1 else 0
        f |= FLAGS["SP_QUOTE"] if sp_quote.match(c) else 0
        f |= FLAGS["SP_ICON"] if sp_icon.match(c) else 0
        f |= FLAGS["UNI_P"] if unicodedata.category(c).startswith("P") else 0
        f |= FLAGS["SENT_PUNCT"] if c in sent else 0
        f |= FLAGS["DECIMAL"] if decimal.match(c) else 0
        f |= FLAGS["LINEBREAK"] if len(("a" + c + "a").splitlines()) == 2 else 0
        f |= FLAGS["WORD"] if word.match(c) else 0
        flags[cp] = f
    return flags


def _specials() -> list[tuple[str, list[str], list[str] | None]]:
    """(string, its tokens, pattern): ``pattern`` is how the string splits without special
    cases, for the specials spaCy re-merges after splitting (its PhraseMatcher pass: the
    ones that contain a prefix, suffix or infix); None for the others."""
    import spacy
    from spacy.tokenizer import Tokenizer

    nlp = spacy.blank("en")
    tok = nlp.tokenizer
    plain = Tokenizer(
        nlp.vocab,
        rules={},
        prefix_search=tok.prefix_search,
        suffix_search=tok.suffix_search,
        infix_finditer=tok.infix_finditer,
        token_match=tok.token_match,
        url_match=tok.url_match,
    )
    out = []
    for key in sorted(tok.rules):
        if any(c.isspace() for c in key):
            continue  # whitespace never reaches the word splitter
        merged = bool(tok.find_prefix(key) or tok.find_infix(key) or tok.find_suffix(key))
        pattern = [t.text for t in plain(key)] if merged else None
        out.append((key, [t.text for t in tok(key)], pattern))
    return out


def main(path: Path) -> None:
    from spacy.lang.char_classes import CURRENCY, UNITS

    flags = _char_flags()
    runs = []  # (first code point, flags) at every change
    prev = None
    for cp, f in enumerate(flags):
        if f != prev:
            runs.append((cp, f))
            prev = f
    lines = [
        '"""Generated by _gen_char_tables.py from spaCy (English tokenizer), datatrove and Python\'s',
        "unicodedata; do not edit. Character flags as runs, special cases, unit and currency suffixes.",
        '"""',
        "",
        f"PYTHON_UNICODE_VERSION = {unicodedata.unidata_version!r}",
        "FLAGS = {",
        *[f"    {k!r}: {v}," for k, v in FLAGS.items()],
        "}",
        "# (first code point, flags): flags hold from there to the next run.",
        "CHAR_RUNS = [",
    ]
    for i in range(0, len(runs), 8):
        lines.append("    " + " ".join(f"({a}, {b})," for a, b in runs[i : i + 8]))
    lines += [
        "]",
        "# spaCy English special cases: (string, its tokens, tokens without special cases if re-merged).",
        "SPECIALS = [",
    ]
    lines += [f"    ({k!r}, {v!r}, {m!r})," for k, v, m in _specials()]
    lines += ["]", f"UNITS = {UNITS.split('|')!r}", f"CURRENCY = {CURRENCY.replace(chr(92), '').split('|')!r}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {path}: {len(runs)} runs")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("char_tables_data.py"))
