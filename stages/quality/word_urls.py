"""spaCy's URL_MATCH, as code: a chunk that is a URL stays one word.

The word splitter (``word_splitter.py``) asks this after peeling prefixes and suffixes
and before splitting at infixes, as spaCy's tokenizer does, so "http://x.com/a-b" is one
word where "a-b" is three. Hosts, IPv4 addresses, schemes, ports and "user@" are checked
on UTF-8 bytes with the character classes of ``pipeline/text/char_tables.py``.
"""

from __future__ import annotations

from pipeline.kernels.utf8 import decode, prev_start
from pipeline.text.char_tables import SP_LOWER, WORD
from stages.quality.jit import leaf
from stages.quality.word_affixes import is_digit


@leaf
def _label_char(cp):
    # URL_MATCH host label characters: [A-Za-z0-9\u00a1-\uffff]
    return (48 <= cp <= 57) or (65 <= cp <= 90) or (97 <= cp <= 122) or (0xA1 <= cp <= 0xFFFF)


@leaf
def _url_tail(buf, i, e):
    """Optional ':port' (2-5 digits) then optional '[/?#]...' then the end."""
    if i < e and buf[i] == 58:
        j = i + 1
        while j < e and is_digit(buf[j]):
            j += 1
        if not (2 <= j - i - 1 <= 5):
            return False
        i = j
    if i == e:
        return True
    b = buf[i]
    return b == 47 or b == 63 or b == 35


@leaf
def _ipv4(buf, h, e):
    i = h
    a = b = c = d = -1
    for k in range(4):
        j = i
        v = 0
        while j < e and j - i < 3 and is_digit(buf[j]):
            v = v * 10 + (buf[j] - 48)
            j += 1
        if j == i:
            return False
        if k == 0:
            a = v
        elif k == 1:
            b = v
        elif k == 2:
            c = v
        else:
            d = v
        i = j
        if k < 3:
            if i >= e or buf[i] != 46:
                return False
            i += 1
    if not (1 <= a <= 223 and b <= 255 and c <= 255 and 1 <= d <= 254):
        return False
    if a == 10 or a == 127 or (a == 169 and b == 254) or (a == 192 and b == 168) or (a == 172 and 16 <= b <= 31):
        return False
    return _url_tail(buf, i, e)


@leaf
def _host(flags, buf, h, e):
    if h >= e:
        return False
    if is_digit(buf[h]) and _ipv4(buf, h, e):
        return True
    # The host region: label chars, '_', '-', '.'.
    r = h
    while r < e:
        cp, n = decode(buf, r)
        if not (_label_char(cp) or cp == 95 or cp == 45 or cp == 46):
            break
        r += n
    # Segments split by '.': all but the last are labels, the last is the TLD.
    seg_start = h
    n_labels = 0
    i = h
    while i <= r:
        if i == r or buf[i] == 46:
            if i == r:
                # TLD: [ALPHA_LOWER]{2,63}
                if n_labels == 0:
                    return False
                k = seg_start
                count = 0
                while k < r:
                    cp, n = decode(buf, k)
                    if not (flags[cp] & SP_LOWER):
                        return False
                    count += 1
                    k += n
                if count < 2 or count > 63:
                    return False
                return _url_tail(buf, r, e)
            if i == seg_start:
                return False  # empty label
            first, _ = decode(buf, seg_start)
            lastc, _ = decode(buf, prev_start(buf, i))
            if not (_label_char(first) and _label_char(lastc)):
                return False
            count = 0
            k = seg_start
            while k < i:
                cp, n = decode(buf, k)
                count += 1
                k += n
            if count > 64:
                return False
            n_labels += 1
            seg_start = i + 1
            i += 1
        else:
            i += 1
    return False


@leaf
def url_match(flags, buf, s, e):
    """spaCy's URL_MATCH on buf[s:e] (no whitespace inside)."""
    dot = False  # every host (name or IPv4) has one: without it nothing matches
    for i in range(s, e):
        if buf[i] == 46:
            dot = True
            break
    if not dot:
        return False
    if _host(flags, buf, s, e):
        return True
    # "scheme://" with [\w+\-.]{2,} before it.
    i = s
    n_scheme = 0
    while i < e:
        cp, n = decode(buf, i)
        if (flags[cp] & WORD) or cp == 43 or cp == 45 or cp == 46:
            n_scheme += 1
            i += n
        else:
            break
    if n_scheme >= 2 and i + 2 < e and buf[i] == 58 and buf[i + 1] == 47 and buf[i + 2] == 47:
        if _host(flags, buf, i + 3, e):
            return True
    # "user[:pass]@host": any '@' after at least one character.
    for p in range(s + 1, e):
        if buf[p] == 64 and _host(flags, buf, p + 1, e):
            return True
    return False
