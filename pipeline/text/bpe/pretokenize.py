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
"""

from __future__ import annotations

from pipeline.compile.jit import njit
from pipeline.kernels.utf8 import decode
from pipeline.text.bpe.classes import LETTER, NUMBER, OTHER, SPACE, UNKNOWN


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
def _white_space(classes, buf, pos, end, first_len, line_breaks):
    """The piece a whitespace run starting at pos gives (see the module docstring);
    ``line_breaks``: cut after the run's last \\r or \\n first (cl100k)."""
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
    if q == end:
        return end
    if line_breaks and after_break > 0:
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
    return _white_space(classes, buf, pos, end, n, False)


@njit(_nrt=False)
def cl100k_piece(classes, buf, pos, end):
    """The end of cl100k_base's piece at pos, or -1 (an unknown code point)."""
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
    if k == NUMBER:  # one to three digits
        for _ in range(2):
            if p >= end:
                break
            c, m = class_at(classes, buf, p)
            if c != NUMBER:
                if c == UNKNOWN:
                    return -1
                break
            p += m
        return p
    if k == OTHER or (b == 32 and k1 == OTHER):  # " ?" others, then line breaks
        q = _run(classes, buf, p + n1 if k == SPACE else p, end, OTHER)
        while 0 <= q < end and (buf[q] == 10 or buf[q] == 13):
            q += 1
        return q
    return _white_space(classes, buf, pos, end, n, True)
