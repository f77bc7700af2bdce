"""tiktoken's split patterns as scanners: where the piece starting at a byte ends.

tiktoken cuts text into pieces with a regex before BPE-encoding each piece, and a regex
engine walking alternatives costs most of its time. Each pattern here is replayed as a
scanner over UTF-8 bytes and the code point classes of ``classes.py``; it returns the end
of the piece the regex would match at ``pos`` (the leftmost alternative that matches,
as the regex tries them), or -1 when the text holds a code point of unknown class (the
caller then lets tiktoken encode that document).

``r50k_piece`` is GPT-2's pattern (gpt2, r50k_base, p50k_base)::

    '(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s

``cl100k_piece`` is cl100k_base's::

    '(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+
    | ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s

Whitespace runs end the same way in both: a run reaching the end of the text is one
piece (``\\s++$``); otherwise cl100k first cuts after the run's last line break
(``\\s*[\\r\\n]``); then a run followed by more text leaves its last character to start
the next piece (``\\s+(?!\\S)`` backtracks one), and a single one is a piece (``\\s``).

``qwen2_piece`` is Qwen2's (and Qwen3.5's, on a class view where marks are letters)::

    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}
    | ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

cl100k's scanner with one digit a piece, and without ``\\s++$``: a whitespace run is cut
after its last line break even at the end of the text (o200k's runs end so too).

``o200k_piece`` is o200k_base's, which splits words by case (``\\p{Lu}``..., the FINE view
of ``classes.py``) and keeps marks inside words::

    [^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
    |[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
    |\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
"""

from __future__ import annotations

from pipeline.compile.jit import njit
from pipeline.kernels.utf8 import decode
from pipeline.text.bpe.classes import CASELESS, LETTER, LOWER, MARK, NUMBER, OTHER, SPACE, UNKNOWN, UPPER

R50K, CL100K, O200K, QWEN2 = 0, 1, 2, 3  # the scanners ``piece_end`` knows
# How a whitespace run ends (``_white_space``): r50k's, cl100k's, o200k's and Qwen2's.
NO_BREAKS, BREAKS_AFTER_END, BREAKS_FIRST = 0, 1, 2


@njit(_nrt=False)
def class_at(classes, buf, i):
    """(class, byte length) of the character at buf[i]."""
    b = buf[i]
    if b < 0x80:
        return classes[b], 1
    cp, n = decode(buf, i)
    return classes[cp], n


@njit(_nrt=False)
def _run(classes, buf, p, end, k):
    """The end of the run of class ``k`` from p, or -1 at a character of unknown class."""
    while p < end:
        c, n = class_at(classes, buf, p)
        if c != k:
            return -1 if c == UNKNOWN else p
        p += n
    return p


@njit(_nrt=False)
def _contraction(buf, pos, end, fold):
    """The end of 's 'd 'm 't 'll 've 're at pos (any case and the long s "ſ" for 's
    with ``fold``, as (?i:...) matches), or -1."""
    if buf[pos] != 39 or pos + 1 >= end:
        return -1
    b1 = buf[pos + 1]
    if fold:
        if 65 <= b1 <= 90:
            b1 += 32
        if b1 == 0xC5 and pos + 2 < end and buf[pos + 2] == 0xBF:  # U+017F folds to s
            return pos + 3
    if b1 == 115 or b1 == 100 or b1 == 109 or b1 == 116:
        return pos + 2
    if pos + 2 >= end:
        return -1
    b2 = buf[pos + 2]
    if fold and 65 <= b2 <= 90:
        b2 += 32
    if (b1 == 108 and b2 == 108) or (b1 == 118 and b2 == 101) or (b1 == 114 and b2 == 101):
        return pos + 3
    return -1


@njit(_nrt=False)
def _digits(classes, buf, p, end, more):
    """The end of a number piece whose first digit ends at ``p``: up to ``more`` digits more
    (``\\p{N}{1,3}`` and Qwen's ``\\p{N}``); -1 at a code point the table does not know."""
    for _ in range(more):
        if p >= end:
            break
        c, m = class_at(classes, buf, p)
        if c != NUMBER:
            if c == UNKNOWN:
                return -1
            break
        p += m
    return p


@njit(_nrt=False)
def _white_space(classes, buf, pos, end, first_len, breaks):
    """The piece a whitespace run starting at pos gives (see the module docstring).
    ``breaks``: NO_BREAKS (r50k), BREAKS_AFTER_END (cl100k: a run reaching the end is
    whole, else cut after its last \\r or \\n) or BREAKS_FIRST (o200k, Qwen2: cut after
    the last line break first, even at the end)."""
    q = pos
    last = pos  # where the run's last character starts
    after_break = -1
    while q < end:
        c, n = class_at(classes, buf, q)
        if c != SPACE:
            if c == UNKNOWN:
                return -1
            break
        last = q
        if buf[q] == 10 or buf[q] == 13:
            after_break = q + 1
        q += n
    if breaks == BREAKS_FIRST and after_break > 0:
        return after_break
    if q == end:
        return end
    if breaks == BREAKS_AFTER_END and after_break > 0:
        return after_break
    if last > pos:
        return last
    return pos + first_len


GO_ON = -2  # ``_start``: the piece is not decided yet


@njit(_nrt=False)
def _start(classes, buf, pos, end, fold):
    """What both patterns ask first: (the end of a contraction at pos, -1 at a code point
    of unknown class, else GO_ON; the class and length of the character at pos)."""
    k, n = class_at(classes, buf, pos)
    got = _contraction(buf, pos, end, fold)
    return got if got >= 0 else (-1 if k == UNKNOWN else GO_ON), k, n


@njit(_nrt=False)
def r50k_piece(classes, buf, pos, end):
    """The end of GPT-2's piece at pos, or -1 (an unknown code point)."""
    got, k, n = _start(classes, buf, pos, end, False)
    if got != GO_ON:
        return got
    p = pos + n
    if buf[pos] == 32 and p < end:  # " ?" before a letter, number or other run
        k1, n1 = class_at(classes, buf, p)
        if k1 == UNKNOWN:
            return -1
        if k1 != SPACE:
            return _run(classes, buf, p + n1, end, k1)
    if k != SPACE:
        return _run(classes, buf, p, end, k)
    return _white_space(classes, buf, pos, end, n, NO_BREAKS)


@njit(_nrt=False)
def cl100k_piece(classes, buf, pos, end):
    """The end of cl100k_base's piece at pos, or -1 (an unknown code point)."""
    return _cl100k_like(classes, buf, pos, end, 3, BREAKS_AFTER_END)


@njit(_nrt=False)
def qwen2_piece(classes, buf, pos, end):
    """The end of Qwen2's piece at pos, or -1 (an unknown code point)."""
    return _cl100k_like(classes, buf, pos, end, 1, BREAKS_FIRST)


@njit(_nrt=False)
def _cl100k_like(classes, buf, pos, end, digits, breaks):
    """cl100k's scanner with up to ``digits`` digits a piece and ``_white_space``'s ``breaks``."""
    got, k, n = _start(classes, buf, pos, end, True)
    if got != GO_ON:
        return got
    p = pos + n
    if k == LETTER:
        return _run(classes, buf, p, end, LETTER)
    b = buf[pos]
    k1 = OTHER
    n1 = 0
    if p < end:
        k1, n1 = class_at(classes, buf, p)
        if k1 == UNKNOWN:
            return -1
    if k != NUMBER and b != 10 and b != 13 and k1 == LETTER:  # one non-letter, then letters
        return _run(classes, buf, p + n1, end, LETTER)
    if k == NUMBER:  # one to ``digits`` digits
        return _digits(classes, buf, p, end, digits - 1)
    if k == OTHER or (b == 32 and k1 == OTHER):  # " ?" others, then line breaks
        q = _run(classes, buf, p + n1 if k == SPACE else p, end, OTHER)
        while 0 <= q < end and (buf[q] == 10 or buf[q] == 13):
            q += 1
        return q
    return _white_space(classes, buf, pos, end, n, breaks)


FAIL = -3  # ``_cased_word``: no word starts here


@njit(_nrt=False)
def _cased_word(classes, buf, s, end, upper_only):
    """o200k's first two alternatives from s, prefix already taken: the end of
    ``[UB]*[LB]+`` as a backtracking regex finds it, else (with ``upper_only``) of
    ``[UB]+`` (U upper-case, L lower-case, B caseless letters and marks), then an optional
    contraction; FAIL if none matches, -1 at an unknown code point."""
    q = s
    after_caseless = -1  # the end of the run's last B: where [LB]+ can start if backtracking
    while q < end:
        c, n = class_at(classes, buf, q)
        if c == UPPER:
            q += n
        elif c == CASELESS or c == MARK:
            q += n
            after_caseless = q
        elif c == UNKNOWN:
            return -1
        else:
            break
    if q < end and class_at(classes, buf, q)[0] == LOWER:  # [UB]* then [LB]+, no backtracking
        while q < end:
            c, n = class_at(classes, buf, q)
            if c != LOWER and c != CASELESS and c != MARK:
                if c == UNKNOWN:
                    return -1
                break
            q += n
    elif after_caseless > 0:  # [UB]* gives back its last B, which [LB]+ takes alone
        q = after_caseless
    elif q == s or not upper_only:
        return FAIL
    # else: [UB]+ (all upper-case) and an empty [LB]*
    got = _contraction(buf, q, end, True) if q < end else -1
    return got if got >= 0 else q


@njit(_nrt=False)
def o200k_piece(classes, buf, pos, end):
    """The end of o200k_base's piece at pos, or -1 (an unknown code point); ``classes``
    is the FINE view."""
    k, n = class_at(classes, buf, pos)
    if k == UNKNOWN:
        return -1
    b = buf[pos]
    p = pos + n
    if k == UPPER or k == LOWER or k == CASELESS:
        return _cased_word(classes, buf, pos, end, True)  # never FAIL from a letter
    if k != NUMBER and b != 10 and b != 13 and p < end:  # one prefix character, then a word
        # After a mark, [UB]+ is not tried before the mark alone is [LB]+ (below).
        got = _cased_word(classes, buf, p, end, k != MARK)
        if got != FAIL:
            return got
        if k == MARK:  # no [UB]*[LB]+ after it: the mark is [LB]+ alone
            got = _contraction(buf, p, end, True)
            return got if got >= 0 else p
    elif k == MARK:  # a mark at the end of the text
        return p
    if k == NUMBER:  # one to three digits
        return _digits(classes, buf, p, end, 2)
    k1 = OTHER
    n1 = 0
    if b == 32 and p < end:
        k1, n1 = class_at(classes, buf, p)
        if k1 == UNKNOWN:
            return -1
    if k == OTHER or (b == 32 and (k1 == OTHER or k1 == MARK)):  # " ?" others and marks, then \r \n /
        q = p + n1 if k == SPACE else p
        while q < end:
            c, m = class_at(classes, buf, q)
            if c != OTHER and c != MARK:
                if c == UNKNOWN:
                    return -1
                break
            q += m
        while q < end and (buf[q] == 10 or buf[q] == 13 or buf[q] == 47):
            q += 1
        return q
    return _white_space(classes, buf, pos, end, n, BREAKS_FIRST)


@njit(_nrt=False)
def piece_end(scanner, classes, buf, pos, end):
    """The end of the piece at pos by the scanner numbered ``scanner``, or -1."""
    if scanner == CL100K:
        return cl100k_piece(classes, buf, pos, end)
    if scanner == O200K:
        return o200k_piece(classes, buf, pos, end)
    if scanner == QWEN2:
        return qwen2_piece(classes, buf, pos, end)
    return r50k_piece(classes, buf, pos, end)
