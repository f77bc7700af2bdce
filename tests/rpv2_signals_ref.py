"""RedPajama-V2's document-level quality signals, recomputed in plain Python for the
fixture tree (``rpv2_fixture``), so that a recipe on them keeps and drops what it would
on the real dataset.

Each follows its definition in togethercomputer/RedPajama-Data @6d2cee9,
``app/src/core/quality_signals/{natural_language,repetitions,content}.py`` over
``core/document.py``'s views of a text (re-expressed here, not copied):

* normalized content: punctuation (``string.punctuation``) removed, lowercased, stripped,
  whitespace runs collapsed to one space, NFD; normalized words = its ``split()``;
* raw words: nltk's ``WordPunctTokenizer`` on the raw text, i.e. ``\\w+|[^\\w\\s]+``;
* raw lines: ``[^\\n]*\\n|[^\\n]+$`` on the raw text, empty lines kept;
* n-grams: consecutive runs of n normalized words (``utilities/text/ngrams.py``);
* values rounded to 8 places (``PRECISION``) where RedPajama rounds, null (None) where it
  gives None (no words, no lines).

The LDNOOBW list is the repository's ``stages/lists/ldnoobw_en.txt`` (LDNOOBW commit
25e679f, 2016, 377 entries). RedPajama downloads the ``en`` file from LDNOOBW's
``master`` when it builds its resources (``artifacts/update_resources.py``), so its list
may hold entries added after 2016; a document with such a word only would count 0 here.

Not computed: ``rps_doc_stop_word_fraction`` needs RedPajama's stop-word list
(``quality_signals/utils/stop_words.py``, from 6/stopwords-json), which is not in this
repository; the fixture seeds it (no recipe here reads it).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from pathlib import Path

LDNOOBW = Path(__file__).resolve().parents[1] / "stages" / "lists" / "ldnoobw_en.txt"
PRECISION = 8
_RAW_WORD = re.compile(r"\w+|[^\w\s]+")
_SENTENCE = re.compile(r"\b[^.!?]+[.!?]*")
_ALPHA = re.compile(r"[a-zA-Z]")
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_BAD_WORDS: frozenset[str] | None = None


def normalize(text: str) -> str:
    text = text.translate(_PUNCTUATION).lower().strip()
    return unicodedata.normalize("NFD", re.sub(r"\s+", " ", text))


def bad_words() -> frozenset[str]:
    """The LDNOOBW entries as RedPajama loads them: each line stripped, a set."""
    global _BAD_WORDS
    if _BAD_WORDS is None:
        _BAD_WORDS = frozenset(line.strip() for line in LDNOOBW.read_text().splitlines())
    return _BAD_WORDS


def ngrams(words: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    return [words[i : i + n] for i in range(len(words) - n + 1)]


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else round(num / den, PRECISION)


def top_ngram_fraction(words: tuple[str, ...], n: int) -> float:
    """Characters in the most frequent n-gram, times its count, over all word characters;
    0 when no n-gram occurs twice (ties: the first seen, as ``Counter.most_common``)."""
    common = Counter(ngrams(words, n)).most_common(1)
    if not common or common[0][1] <= 1:
        return 0.0
    gram, count = common[0]
    return round(sum(map(len, gram)) * count / sum(map(len, words)), PRECISION)


def dupe_ngram_fraction(words: tuple[str, ...], n: int) -> float:
    """Characters of the words covered by any n-gram that occurs more than once, each word
    counted once however many duplicate n-grams cover it, over all word characters."""
    if len(words) < n:
        return 0.0
    grams = ngrams(words, n)
    dupes = {g for g, count in Counter(grams).items() if count > 1}
    covered = [False] * len(words)
    for i, gram in enumerate(grams):
        if gram in dupes:
            covered[i : i + n] = [True] * n
    total = sum(map(len, words))
    if total == 0:
        return 0.0
    return round(sum(len(w) for w, c in zip(words, covered) if c) / total, PRECISION)


def ldnoobw_count(words: tuple[str, ...]) -> float:
    """How many word runs of the normalized text are LDNOOBW entries, for every entry
    length (in words) the list has."""
    listed = bad_words()
    sizes = {1 + entry.count(" ") for entry in listed}
    return float(sum(" ".join(g) in listed for n in sizes for g in ngrams(words, n)))


def entropy(words: tuple[str, ...]) -> float | None:
    if not words:
        return None
    total = len(words)
    return round(sum(-c / total * math.log(c / total) for c in Counter(words).values()), PRECISION)


def computed_signals(text: str) -> dict[str, float | int | None]:
    """Every document-level ``rps_doc_*`` signal this module knows, by name."""
    norm = normalize(text)
    words = tuple(norm.split())
    raw_words = _RAW_WORD.findall(text)
    lines = _LINE.findall(text)
    ellipsis_lines = sum(line.rstrip().endswith(("...", "\u2026")) for line in lines)
    symbols = sum(text.count(s) for s in ("#", "...", "\u2026"))
    alphabetic = sum(_ALPHA.search(w) is not None for w in raw_words)
    return {
        "rps_doc_word_count": len(words),
        "rps_doc_mean_word_length": _ratio(sum(map(len, words)), len(words)),
        "rps_doc_symbol_to_word_ratio": _ratio(symbols, len(raw_words)),
        "rps_doc_frac_lines_end_with_ellipsis": _ratio(ellipsis_lines, len(lines)),
        "rps_doc_frac_no_alph_words": None if not raw_words else round(1.0 - alphabetic / len(raw_words), PRECISION),
        "rps_doc_frac_unique_words": _ratio(len(set(words)), len(words)),
        "rps_doc_unigram_entropy": entropy(words),
        "rps_doc_frac_all_caps_words": _ratio(sum(map(str.isupper, raw_words)), len(raw_words)),
        "rps_doc_num_sentences": float(len(_SENTENCE.findall(text))),
        **{f"rps_doc_frac_chars_top_{n}gram": top_ngram_fraction(words, n) for n in (2, 3, 4)},
        **{f"rps_doc_frac_chars_dupe_{n}grams": dupe_ngram_fraction(words, n) for n in range(5, 11)},
        "rps_doc_ldnoobw_words": ldnoobw_count(words) if norm else 0.0,
        "rps_doc_lorem_ipsum": round(norm.count("lorem ipsum") / len(norm), PRECISION) if norm else 0.0,
        "rps_doc_curly_bracket": _ratio(text.count("{") + text.count("}"), len(text)) or 0.0,
    }
