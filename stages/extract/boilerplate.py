"""Lines of resiliparse's main content that are a page's chrome, not its text: what its own
heuristics keep of related-story lists, menus, pagers and tag links, found by link density
(the signal boilerpipe, jusText and trafilatura all use), and short copyright notices.

resiliparse's ``preserve_formatting="minimal_html"`` with ``links=True`` writes the main
content with ``<a href="...">`` around each link's text, and paragraphs, headings and list
items on lines of their own. It escapes everything else (``&lt; &gt; &amp; &quot;``, in the
text and in attribute values), so a ``<`` always opens one of its tags and a ``>`` closes it.

One pass over the UTF-8 bytes (``link_lines_to_text``) strips the tags and unescapes the
entities, giving back resiliparse's plain text (the same words as
``preserve_formatting=True``), less two kinds of line:

- a line whose every word is link text. A word outside a link (a sentence that links a few
  words, the "By" before an author's link) keeps the line, and so does a line where a link
  is still open at its end (a block wrapped in one ``<a>``: the kernel reads one line at a
  time, and some pages wrap their whole article in an unclosed link);
- a line with the copyright sign ``©`` and at most ``MAX_NOTICE_WORDS`` words.

A word is a run of word characters: ASCII letters, digits and ``_``, and non-ASCII
characters other than Latin-1's signs (U+0080-U+00BF: no-break space, ``« » © ·``) and
U+2000-U+2FFF (punctuation: dashes, curly quotes, bullets, ellipsis; arrows, symbols, box
drawing).

Measured with ``benchmarks/extract.py --split``, tuned on the even pages, the odd ones held
out (F1): link lines 0.847 -> 0.858 (even), 0.844 -> 0.855 (odd), precision +0.026 and
recall -0.009; notices +0.001 more on each. A word-count cap on the dropped link lines, or
a link share under all of them, scores no better. The pass costs about 2.5% of the
extraction's time (45 us a page); the links in resiliparse's output another 4%.
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.compile.warm_steps import warms

_NEWLINE, _LT, _GT, _AMP, _SLASH, _SPACE, _A = 0x0A, 0x3C, 0x3E, 0x26, 0x2F, 0x20, 0x61
# A line with the copyright sign and at most this many words is a legal notice (a site's
# "© 2008 Name Ltd. All rights reserved | Terms"), dropped; a longer one is text that
# mentions the sign. 10, 20, 30 on the even pages: F1 +0.0006, +0.0010, +0.0009.
MAX_NOTICE_WORDS = 20


def plain_text(minimal_html: str) -> str:
    """resiliparse's minimal HTML as plain text, less the lines that are only links or notices."""
    data = np.frombuffer(minimal_html.encode(), np.uint8)
    out = np.empty(len(data), np.uint8)
    return out[: link_lines_to_text(data, out)].tobytes().decode()


@warms("extract", seconds=1.0)
def warm_link_lines() -> None:
    """A warm-up step: compile the kernel that drops link-only and notice lines."""
    plain_text('<p><a href="/">x</a> y &amp; z</p>')


@njit(_nrt=False)
def link_lines_to_text(data, out):
    """Write data's text to out (never longer: tags and dropped lines only shrink it) and
    return its length; see the module's docstring for what is dropped."""
    n = len(data)
    written = line_start = 0
    in_link = link_words = text_words = notice = False
    i = 0
    while i < n:
        b = data[i]
        if b == _NEWLINE:
            if _boilerplate(out, line_start, written, link_words, text_words, in_link, notice):
                written = line_start
            else:
                out[written] = b
                written += 1
            line_start = written
            in_link = link_words = text_words = notice = False
            i += 1
        elif b == _LT:
            if i + 2 < n and data[i + 1] == _A and (data[i + 2] == _SPACE or data[i + 2] == _GT):
                text_words = text_words or in_link  # a link inside a link: not a plain one, kept
                in_link = True
            elif i + 3 < n and data[i + 1] == _SLASH and data[i + 2] == _A and data[i + 3] == _GT:
                in_link = False
            while i < n and data[i] != _GT:
                i += 1
            i += 1
        elif b == _AMP:
            byte, length = _entity(data, i, n)
            out[written] = byte
            written += 1
            i += length
        else:
            if b == 0xC2 and i + 1 < n and data[i + 1] == 0xA9:  # ©
                notice = True
            if not text_words and _is_word(b):
                link_words = link_words or in_link
                text_words = not in_link
            out[written] = b
            written += 1
            i += 1
    if _boilerplate(out, line_start, written, link_words, text_words, in_link, notice):
        written = line_start
    return written


@njit(_nrt=False)
def _boilerplate(text, start, end, link_words, text_words, in_link, notice):
    """Whether the line text[start:end] is dropped: only link text (and no link still open
    at its end), or a notice (its words are counted only then: few lines hold a ©)."""
    if link_words and not text_words and not in_link:
        return True
    if not notice:
        return False
    words = 0
    in_word = False
    for i in range(start, end):
        b = text[i]
        if b < 0x80 or b >= 0xC0:  # not a continuation byte: its lead byte decided
            word = _is_word(b)
            words += word and not in_word
            in_word = word
    return words <= MAX_NOTICE_WORDS


@njit(_nrt=False)
def _is_word(b):
    """Whether byte b starts a word character (see the module's docstring); a UTF-8
    continuation byte never does: its lead byte decided."""
    if b < 0x80:
        return (0x30 <= b <= 0x39) or (0x41 <= b <= 0x5A) or (0x61 <= b <= 0x7A) or b == 0x5F
    return b >= 0xC3 and b != 0xE2  # 0xC2 leads U+0080-U+00BF, 0xE2 U+2000-U+2FFF


@njit(_nrt=False)
def _entity(data, i, end):
    """(byte, length) of the entity resiliparse wrote at i; (``&``, 1) for anything else."""
    if i + 3 < end and data[i + 2] == 0x74 and data[i + 3] == 0x3B:  # "&lt;", "&gt;"
        if data[i + 1] == 0x6C:
            return _LT, 4
        if data[i + 1] == 0x67:
            return _GT, 4
    if i + 4 < end and data[i + 1] == 0x61 and data[i + 2] == 0x6D and data[i + 3] == 0x70 and data[i + 4] == 0x3B:
        return _AMP, 5
    if i + 5 < end and data[i + 1] == 0x71 and data[i + 2] == 0x75 and data[i + 3] == 0x6F:
        if data[i + 4] == 0x74 and data[i + 5] == 0x3B:  # "&quot;"
            return 0x22, 6
    return _AMP, 1
