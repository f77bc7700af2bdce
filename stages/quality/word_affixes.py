"""spaCy's English prefix, suffix and infix rules, as code instead of regexes.

The word splitter (``word_splitter.py``) peels prefixes and suffixes off each
whitespace-separated chunk and splits what remains at infixes; where it cuts decides
word counts, so each function here answers exactly what spaCy's compiled regex would
(``prefix_search``, ``suffix_search``, ``infix_finditer``) on UTF-8 bytes, with the
character classes of ``pipeline/text/char_tables.py``.
"""

from __future__ import annotations

from pipeline.compile.jit import njit
from pipeline.kernels.utf8 import decode, prev_start
from pipeline.text.char_tables import (
    SP_ALPHA,
    SP_DOT_AFTER,
    SP_ICON,
    SP_LOWER,
    SP_PREFIX,
    SP_QUOTE,
    SP_SUFFIX,
    SP_UPPER,
    byte_set_find,
)
from stages.quality.jit import leaf


@njit(_nrt=False)
def is_digit(b):
    return b >= 48 and b <= 57


@leaf
def find_prefix(flags, buf, s, e):
    """Byte length of the prefix match at the start of buf[s:e] (0 if none)."""
    b = buf[s]
    if b == 46:  # "\.\.+"
        j = s
        while j < e and buf[j] == 46:
            j += 1
        return j - s if j - s >= 2 else 0
    if b == 85 and e - s >= 3 and buf[s + 1] == 83 and buf[s + 2] == 36:  # US$
        return 3
    if (b == 67 or b == 65) and e - s >= 2 and buf[s + 1] == 36:  # C$ A$
        return 2
    if b == 43:  # "\+(?![0-9])"
        return 0 if (s + 1 < e and is_digit(buf[s + 1])) else 1
    cp, n = decode(buf, s)
    if flags[cp] & SP_PREFIX:
        return n
    return 0


@leaf
def find_suffix(flags, unit_keys, unit_slot_item, unit_item_off, unit_blob, unit_max_len, buf, s, e):
    """Byte length of the leftmost suffix match in buf[s:e] (0 if none); ``unit_*``: the
    tables' ``after_digit`` byte set."""
    if s >= e:
        return 0
    best = 0
    last = prev_start(buf, e)
    cp, n = decode(buf, last)
    if flags[cp] & SP_SUFFIX:
        best = n
    if cp == 46:  # "."
        j = e
        while j > s and buf[j - 1] == 46:
            j -= 1
        if e - j >= 2:
            best = max(best, e - j)
        elif last > s:
            p = prev_start(buf, last)
            pcp, _ = decode(buf, p)
            if flags[pcp] & SP_DOT_AFTER:
                best = max(best, 1)
            elif p > s:
                pp = prev_start(buf, p)
                ppcp, _ = decode(buf, pp)
                if (flags[pcp] & SP_UPPER) and (flags[ppcp] & SP_UPPER):
                    best = max(best, 1)
                elif ppcp == 0xB0 and (pcp == 70 or pcp == 102 or pcp == 67 or pcp == 99 or pcp == 75 or pcp == 107):
                    best = max(best, 1)
    elif cp == 43:  # "(?<=[0-9])\+"
        if last > s and is_digit(buf[last - 1]):
            best = max(best, 1)
    elif cp == 0x2026 and e - s >= 6 and last - 3 >= s:  # "……"
        if buf[last - 3] == 0xE2 and buf[last - 2] == 0x80 and buf[last - 1] == 0xA6:
            best = max(best, 6)
    elif cp == 115 or cp == 83:  # 's 'S ’s ’S
        if last > s and buf[last - 1] == 39:
            best = max(best, 2)
        elif last - 3 >= s and buf[last - 3] == 0xE2 and buf[last - 2] == 0x80 and buf[last - 1] == 0x99:
            best = max(best, 4)
    # Units and currencies right after a digit ("5km", "3$").
    lo = max(s + 1, e - unit_max_len)
    p = e - 1
    while p >= lo:
        if (buf[p] & 0xC0) != 0x80 and is_digit(buf[p - 1]) and e - p > best:
            unit = byte_set_find(unit_keys, unit_slot_item, unit_item_off, unit_blob, buf, p, e)
            if unit >= 0:
                best = e - p
        p -= 1
    return best


@leaf
def find_infix(flags, buf, s, i, e):
    """Length of an infix match starting at byte i of buf[s:e], or 0."""
    b = buf[i]
    if b == 46 and i + 1 < e and buf[i + 1] == 46:  # "\.\.+"
        j = i
        while j < e and buf[j] == 46:
            j += 1
        return j - i
    cp, n = decode(buf, i)
    if cp == 0x2026:  # "…"
        return n
    f = flags[cp]
    if f & SP_ICON:
        return n
    has_prev = i > s
    pcp = -1
    if has_prev:
        pcp, _ = decode(buf, prev_start(buf, i))
    has_next = i + n < e
    ncp = -1
    if has_next:
        ncp, _ = decode(buf, i + n)
    if not has_prev:
        return 0
    pf = flags[pcp]
    prev_digit = 48 <= pcp <= 57
    # (?<=[0-9])[+\-\*^](?=[0-9-])
    if prev_digit and (b == 43 or b == 45 or b == 42 or b == 94) and has_next and ((48 <= ncp <= 57) or ncp == 45):
        return 1
    if not has_next:
        return 0
    nf = flags[ncp]
    # (?<=[{al}{q}])\.(?=[{au}{q}])
    if b == 46 and (pf & (SP_LOWER | SP_QUOTE)) and (nf & (SP_UPPER | SP_QUOTE)):
        return 1
    # (?<=[{a}]),(?=[{a}])
    if b == 44 and (pf & SP_ALPHA) and (nf & SP_ALPHA):
        return 1
    if (pf & SP_ALPHA) or prev_digit:
        # (?<=[{a}0-9])(?:-|–|—|--|---|——|~)(?=[{a}])
        if b == 45:  # '-', '--', '---'
            j = i
            while j < e and j - i < 3 and buf[j] == 45:
                j += 1
                if j < e:
                    c2, _ = decode(buf, j)
                    if flags[c2] & SP_ALPHA:
                        return j - i
            return 0
        if cp == 0x2013 or cp == 126:  # '–' '~'
            return n if (nf & SP_ALPHA) else 0
        if cp == 0x2014:  # '—', '——'
            if nf & SP_ALPHA:
                return n
            if ncp == 0x2014 and i + 2 * n < e:
                c2, _ = decode(buf, i + 2 * n)
                if flags[c2] & SP_ALPHA:
                    return 2 * n
            return 0
        # (?<=[{a}0-9])[:<>=/](?=[{a}])
        if (b == 58 or b == 60 or b == 62 or b == 61 or b == 47) and (nf & SP_ALPHA):
            return 1
    return 0
