"""C4 signals and rewriting: datatrove's C4QualityFilter (``split_paragraph=True``).

C4 judges a page line by line: it removes citation marks and drops lines without
terminal punctuation, with too few words or an overlong one, about JavaScript or
cookie and privacy policies; "lorem ipsum" and "{" reject the whole document, as do too
few sentences in what is kept. The kept lines are written to an output buffer (the
text FineWeb then reads, and kept documents carry); the document-level hits and the
sentence count become signals.
"""

from __future__ import annotations

import numpy as np

from pipeline.kernels.utf8 import decode
from pipeline.text.char_tables import DECIMAL, LINEBREAK, SENT_PUNCT, SPACE, UNI_P
from stages.quality.jit import kernel, leaf
from stages.quality.signals import (
    C4_CURLY,
    C4_EVENT,
    C4_LINES_REMOVED,
    C4_LOREM,
    C4_SENTENCES,
    P_C4_FILTER_CURLY_BRACKET,
    P_C4_FILTER_JAVASCRIPT,
    P_C4_FILTER_LOREM_IPSUM,
    P_C4_FILTER_NO_TERMINAL_PUNCT,
    P_C4_FILTER_POLICY,
    P_C4_MAX_WORD_LENGTH,
    P_C4_MIN_WORDS_PER_LINE,
    P_C4_REMOVE_CITATIONS,
)
from stages.quality.str_methods import DOTS, endswith, lstrip, rstrip, startswith
from stages.quality.substrings import CURLY, JAVASCRIPT, LOREM, POLICY, find_phrases
from stages.quality.word_splitter import split_words, word_scratch

_END_PUNCT = np.array([46, 63, 33, 34, 39], np.uint8)  # . ? ! " '
_EDIT = np.frombuffer(b"edit]", np.uint8).copy()
_CITATION_NEEDED = np.frombuffer(b"citation needed]", np.uint8).copy()


@leaf
def copy_without_citations(flags, src, a, b, dst, w):
    """Copy src[a:b] to dst[w:], dropping ``\\[\\d*]|\\[edit]|\\[citation needed]``; returns the end.
    Per-line helpers take ``flags``, not the tables tuple, whose hundred-odd fields would
    be passed at each call."""
    i = a
    while i < b:
        if src[i] == 91:  # '['
            j = i + 1
            while j < b:
                cp, n = decode(src, j)
                if not (flags[cp] & DECIMAL):
                    break
                j += n
            if j < b and src[j] == 93:
                i = j + 1
                continue
            if startswith(src, i + 1, b, _EDIT):
                i += 1 + _EDIT.shape[0]
                continue
            if startswith(src, i + 1, b, _CITATION_NEEDED):
                i += 1 + _CITATION_NEEDED.shape[0]
                continue
        dst[w] = src[i]
        w += 1
        i += 1
    return w


@leaf
def count_sentences(flags, buf, a, b, tok_s, tok_e, t0, t1):
    """Sentences spaCy's Sentencizer finds in buf[a:b] (datatrove's split_into_sentences),
    given that text's words: tokens t0..t1-1, all inside [a, b)."""
    if b <= a:
        return 0
    sentences = 1
    seen_period = False
    prev_end = a
    for t in range(t0, t1 + 1):
        # spaCy keeps whitespace other than one ' ' as tokens; they are not punctuation.
        gap_end = tok_s[t] if t < t1 else b
        if gap_end > prev_end and not (gap_end - prev_end == 1 and buf[prev_end] == 32):
            if seen_period:
                sentences += 1
                seen_period = False
        if t == t1:
            break
        s = tok_s[t]
        e = tok_e[t]
        cp, n = decode(buf, s)
        in_punct_chars = n == e - s and (flags[cp] & SENT_PUNCT) != 0
        is_punct = True
        i = s
        while i < e:
            c2, n2 = decode(buf, i)
            if not (flags[c2] & UNI_P):
                is_punct = False
                break
            i += n2
        if seen_period and not is_punct and not in_punct_chars:
            sentences += 1
            seen_period = False
        elif in_punct_chars:
            seen_period = True
        prev_end = e
    return sentences


@leaf
def _line_words(flags, buf, i, end):
    """``str.splitlines`` and ``line.split()`` in one pass: (end of the line starting at
    i, start of the next, its number of words, the longest word's characters). Every
    line break is whitespace to ``split``, so the words end where the line does."""
    n_words = 0
    longest = 0
    cur = 0
    j = i
    while j < end:
        cp, n = decode(buf, j)
        f = flags[cp]
        if f & SPACE:
            if cur > 0:
                n_words += 1
                longest = max(longest, cur)
                cur = 0
            if f & LINEBREAK:
                nx = j + 2 if cp == 13 and j + 1 < end and buf[j + 1] == 10 else j + n
                return j, nx, n_words, longest
        else:
            cur += 1
        j += n
    if cur > 0:
        n_words += 1
        longest = max(longest, cur)
    return end, end, n_words, longest


@kernel
def c4_rewrite(T, buf, ntok, tok_s, tok_e, memo, out, w0, params, phrases, phrase_off, phrase_class, phrase_pairs, sig):
    """datatrove's C4QualityFilter (split_paragraph=True) on one document whose words are
    tok_s/tok_e[:ntok] (``memo``: the batch's ``chunk_memo``, for lines split anew): writes
    the kept lines joined by "\n" and stripped at out[w0:].
    ``phrases``..``phrase_pairs``: ``substrings.Phrases``. Returns (end of the rewritten
    text, its number of words)."""
    flags = T.flags
    end = buf.shape[0]
    w = w0
    n_kept = 0
    n_lines = 0
    sentences = 0
    kept_words = 0
    event = 0
    remove_citations = params[P_C4_REMOVE_CITATIONS] != 0
    no_terminal = params[P_C4_FILTER_NO_TERMINAL_PUNCT] != 0
    min_words = params[P_C4_MIN_WORDS_PER_LINE]
    max_word = params[P_C4_MAX_WORD_LENGTH]
    t = 0  # first word not before the current line
    i = 0
    while i < end:
        le, nx, n_words, longest = _line_words(flags, buf, i, end)
        line_start = i
        i = nx
        n_lines += 1
        a = lstrip(flags, buf, line_start, le)
        b = rstrip(flags, buf, a, le)
        # The line's words: the document's words are split at whitespace, so none
        # straddles a line boundary.
        while t < ntok and tok_s[t] < a:
            t += 1
        t0 = t
        while t < ntok and tok_e[t] <= b:
            t += 1
        t1 = t
        if max_word != -1 and longest > max_word:
            continue
        ls = w + 1 if n_kept > 0 else w  # room for the "\n" separator
        if remove_citations:
            lend = copy_without_citations(flags, buf, a, b, out, ls)
        else:
            for k in range(b - a):
                out[ls + k] = buf[a + k]
            lend = ls + (b - a)
        if no_terminal:
            ok = False
            if lend > ls:
                last = out[lend - 1]
                for k in range(_END_PUNCT.shape[0]):
                    if last == _END_PUNCT[k]:
                        ok = True
            if not ok or endswith(out, ls, lend, DOTS):
                continue
        if n_words < min_words:
            continue
        found = find_phrases(out, ls, lend, phrases, phrase_off, phrase_class, phrase_pairs)
        if params[P_C4_FILTER_LOREM_IPSUM] != 0 and found & LOREM:
            if event == 0:
                event = C4_LOREM
        if params[P_C4_FILTER_JAVASCRIPT] != 0 and found & JAVASCRIPT:
            continue
        if params[P_C4_FILTER_CURLY_BRACKET] != 0 and found & CURLY:
            if event == 0:
                event = C4_CURLY
        if params[P_C4_FILTER_POLICY] != 0 and found & POLICY:
            continue
        if lend - ls == b - a:
            sentences += count_sentences(flags, buf, a, b, tok_s, tok_e, t0, t1)
            kept_words += t1 - t0
        else:  # citations removed: split the cleaned line anew
            size = lend - ls
            ls_, le_, ss_, se_ = word_scratch(size)
            view = out[ls:lend]
            n_line = split_words(T, view, 0, size, ls_, le_, ss_, se_, memo)
            sentences += count_sentences(flags, view, 0, size, ls_, le_, 0, n_line)
            kept_words += n_line
        if n_kept > 0:
            out[w] = 10
        w = lend
        n_kept += 1
    # .strip() of the joined text
    a = lstrip(flags, out, w0, w)
    b = rstrip(flags, out, a, w)
    if a > w0:
        for k in range(b - a):  # forward copy: the source lies ahead of the target
            out[w0 + k] = out[a + k]
    sig[C4_EVENT] = event
    sig[C4_SENTENCES] = sentences
    sig[C4_LINES_REMOVED] = n_lines - n_kept
    return w0 + (b - a), kept_words
