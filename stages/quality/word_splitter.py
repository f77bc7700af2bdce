"""Word splitting that follows spaCy's English tokenizer, in numba.

datatrove's Gopher and FineWeb filters count words with ``spacy.blank("en")`` (then drop
blank tokens). Word counts, mean word length, n-grams and the words-per-newline ratio all
depend on where that tokenizer cuts, so near a threshold a plain whitespace split flips
decisions. This module replays spaCy's algorithm on UTF-8 bytes:

1. split on ``str.isspace`` runs;
2. per chunk: whole-chunk special cases ("don't" -> do / n't, "Mr.", ":)");
3. the affix loop: peel one prefix and one suffix per round (spaCy's prefix regex takes
   the first alternative, its suffix regex the leftmost match, i.e. the longest suffix),
   stopping when the remainder is a special case;
4. the remainder: special case, else URL (spaCy's URL_MATCH), else infix split
   (ellipses, icons, hyphens/commas/dots/slashes between letters, operators in numbers);
5. spaCy's second pass: token runs inside one chunk that spell a special case are
   re-merged ("Co.Co" -> "Co." "Co", "a):" -> "a" "):").

Agreement with spaCy is token for token on the shared web corpora. Known differences
(contrived): ``\\d`` in URL ports/IPv4 hosts read as ASCII digits, IPv4 octets with
leading zeros accepted, and the specials "°C." "°F." "°K." left out of step 5 (they
would grow in place). The character classes and special cases come from spaCy itself
through ``_gen_tables.py``.

Words (spaCy's tokens) are returned as byte spans; downstream kernels derive lengths,
flags and hashes.
"""

from __future__ import annotations

import numba

from pipeline.kernels.utf8 import decode, prev_start
from stages.quality.tables import (
    SP_ALPHA,
    SP_DOT_AFTER,
    SP_ICON,
    SP_LOWER,
    SP_PREFIX,
    SP_QUOTE,
    SP_SUFFIX,
    SP_UPPER,
    SPACE,
    WORD,
    Tables,
    byte_set_find,
)
from stages.quality.jit import leaf


def kernel_tables(t: Tables) -> tuple:
    """The tables as one tuple argument for the kernels."""
    return (
        t.flags,
        t.specials.keys,
        t.specials.slot_item,
        t.specials.item_off,
        t.specials.blob,
        t.special_piece_off,
        t.special_piece_len,
        t.after_digit.keys,
        t.after_digit.slot_item,
        t.after_digit.item_off,
        t.after_digit.blob,
        t.after_digit.max_len,
        t.specials.max_len,
        t.special_pattern_off,
        t.special_pattern_len,
        t.merge_first_byte,
        t.merge_max_tokens,
    )


@numba.njit(cache=True, _nrt=False, inline="always")
def _is_digit(b):
    return b >= 48 and b <= 57


@leaf
def _special(T, buf, s, e):
    if e - s > T[12]:
        return -1
    return byte_set_find(T[1], T[2], T[3], T[4], buf, s, e)


@leaf
def _flag_at(T, buf, i):
    cp, _ = decode(buf, i)
    return T[0][cp]


@leaf
def _find_prefix(T, buf, s, e):
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
        return 0 if (s + 1 < e and _is_digit(buf[s + 1])) else 1
    cp, n = decode(buf, s)
    if T[0][cp] & SP_PREFIX:
        return n
    return 0


@leaf
def _find_suffix(T, buf, s, e):
    """Byte length of the leftmost suffix match in buf[s:e] (0 if none)."""
    if s >= e:
        return 0
    flags = T[0]
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
        if last > s and _is_digit(buf[last - 1]):
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
    lo = max(s + 1, e - T[11])
    p = e - 1
    while p >= lo:
        if (buf[p] & 0xC0) != 0x80 and _is_digit(buf[p - 1]) and e - p > best:
            if byte_set_find(T[7], T[8], T[9], T[10], buf, p, e) >= 0:
                best = e - p
        p -= 1
    return best


@leaf
def _label_char(cp):
    # URL_MATCH host label characters: [A-Za-z0-9\u00a1-\uffff]
    return (48 <= cp <= 57) or (65 <= cp <= 90) or (97 <= cp <= 122) or (0xA1 <= cp <= 0xFFFF)


@leaf
def _url_tail(buf, i, e):
    """Optional ':port' (2-5 digits) then optional '[/?#]...' then the end."""
    if i < e and buf[i] == 58:
        j = i + 1
        while j < e and _is_digit(buf[j]):
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
        while j < e and j - i < 3 and _is_digit(buf[j]):
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
def _host(T, buf, h, e):
    if h >= e:
        return False
    if _is_digit(buf[h]) and _ipv4(buf, h, e):
        return True
    flags = T[0]
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
def url_match(T, buf, s, e):
    """spaCy's URL_MATCH on buf[s:e] (no whitespace inside)."""
    flags = T[0]
    if _host(T, buf, s, e):
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
        if _host(T, buf, i + 3, e):
            return True
    # "user[:pass]@host": any '@' after at least one character.
    for p in range(s + 1, e):
        if buf[p] == 64 and _host(T, buf, p + 1, e):
            return True
    return False


@leaf
def _find_infix(T, buf, s, i, e):
    """Length of an infix match starting at byte i of buf[s:e], or 0."""
    flags = T[0]
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


@leaf
def _emit(out_s, out_e, n, s, e):
    out_s[n] = s
    out_e[n] = e
    return n + 1


@leaf
def _emit_special(T, k, s, out_s, out_e, n):
    for j in range(T[5][k], T[5][k + 1]):
        ln = T[6][j]
        n = _emit(out_s, out_e, n, s, s + ln)
        s += ln
    return n


@leaf
def _chunk(T, buf, cs, ce, out_s, out_e, n, stack_s, stack_e):
    n0 = n
    k = _special(T, buf, cs, ce)
    if k >= 0:
        return _emit_special(T, k, cs, out_s, out_e, n)
    s = cs
    e = ce
    n_suf = 0
    last_size = -1
    while s < e and e - s != last_size:
        if _special(T, buf, s, e) >= 0:
            break
        last_size = e - s
        pre = _find_prefix(T, buf, s, e)
        if pre and s + pre < e and _special(T, buf, s + pre, e) >= 0:
            n = _emit(out_s, out_e, n, s, s + pre)
            s += pre
            break
        suf = _find_suffix(T, buf, s + pre, e)
        if suf and e - suf > s and _special(T, buf, s, e - suf) >= 0:
            stack_s[n_suf] = e - suf
            stack_e[n_suf] = e
            n_suf += 1
            e -= suf
            break
        if pre:
            n = _emit(out_s, out_e, n, s, s + pre)
            s += pre
        if suf:
            stack_s[n_suf] = e - suf
            stack_e[n_suf] = e
            n_suf += 1
            e -= suf
    if s < e:
        k = _special(T, buf, s, e)
        if k >= 0:
            n = _emit_special(T, k, s, out_s, out_e, n)
        elif url_match(T, buf, s, e):
            n = _emit(out_s, out_e, n, s, e)
        else:
            start = s
            i = s
            while i < e:
                m = _find_infix(T, buf, s, i, e)
                if m:
                    if i != s:  # spaCy ignores an infix at the very start
                        if i != start:
                            n = _emit(out_s, out_e, n, start, i)
                        n = _emit(out_s, out_e, n, i, i + m)
                        start = i + m
                    i += m
                else:
                    _, cl = decode(buf, i)
                    i += cl
            if start < e:
                n = _emit(out_s, out_e, n, start, e)
    for j in range(n_suf - 1, -1, -1):
        n = _emit(out_s, out_e, n, stack_s[j], stack_e[j])
    if n - n0 >= 2:
        n = _merge_specials(T, buf, out_s, out_e, n0, n, stack_s)
    return n


@leaf
def _merge_specials(T, buf, out_s, out_e, n0, n, take):
    """spaCy's second pass: token runs inside one chunk that spell a special case, split
    as the special splits without special cases, become the special's tokens; longest
    run first, then leftmost, skipping runs whose first or last token an earlier run
    covered (spaCy's _filter_special_spans). ``take`` is scratch (one slot per token):
    -2 untouched, -1 covered, k >= 0 special k starts here. Specials never have more
    tokens than their pattern (checked in tables.py), so rewriting in place is safe."""
    n_tok = n - n0
    for t in range(n_tok):
        take[t] = -2
    for L in range(min(T[16], n_tok), 1, -1):
        for i in range(n0, n - L + 1):
            j = i + L
            if not T[15][buf[out_s[i]]] or out_e[j - 1] - out_s[i] > T[12]:
                continue
            k = byte_set_find(T[1], T[2], T[3], T[4], buf, out_s[i], out_e[j - 1])
            if k < 0 or T[13][k + 1] - T[13][k] != L:
                continue
            ok = True
            for t in range(L):
                if out_e[i + t] - out_s[i + t] != T[14][T[13][k] + t]:
                    ok = False
                    break
            if not ok:
                continue
            a = i - n0
            if take[a] == -2 and take[a + L - 1] == -2:
                for t in range(a, a + L):
                    take[t] = -1
                take[a] = k
            else:
                for t in range(a, a + L):
                    if take[t] == -2:
                        take[t] = -1
    m = n0
    t = 0
    while t < n_tok:
        k = take[t]
        if k >= 0:
            m = _emit_special(T, k, out_s[n0 + t], out_s, out_e, m)
            t += T[13][k + 1] - T[13][k]
        else:
            out_s[m] = out_s[n0 + t]
            out_e[m] = out_e[n0 + t]
            m += 1
            t += 1
    return m


@leaf
def split_words(T, buf, start, end, out_s, out_e, stack_s, stack_e):
    """Words of buf[start:end] as spaCy English + strip_strings would give them.

    Writes byte spans into out_s/out_e (each at least end - start long) and returns the
    count. stack_s/stack_e are scratch of the same size.
    """
    flags = T[0]
    n = 0
    i = start
    chunk = -1
    letters = True  # the chunk so far is ASCII letters only
    while i < end:
        b = buf[i]
        if b < 0x80:
            cp = numba.int64(b)
            cl = 1
        else:
            cp, cl = decode(buf, i)
        if flags[cp] & SPACE:
            if chunk >= 0:
                n = _letters_or_chunk(T, buf, chunk, i, letters, out_s, out_e, n, stack_s, stack_e)
                chunk = -1
        else:
            if chunk < 0:
                chunk = i
                letters = True
            if letters and not ((65 <= b <= 90) or (97 <= b <= 122)):
                letters = False
        i += cl
    if chunk >= 0:
        n = _letters_or_chunk(T, buf, chunk, end, letters, out_s, out_e, n, stack_s, stack_e)
    return n


@leaf
def _letters_or_chunk(T, buf, s, e, letters, out_s, out_e, n, stack_s, stack_e):
    """Fast path: a chunk of ASCII letters has no prefix, suffix, infix or URL, so it is
    one word unless it is a special case ("cannot", "Id", "wed")."""
    if letters:
        k = _special(T, buf, s, e)
        if k >= 0:
            return _emit_special(T, k, s, out_s, out_e, n)
        return _emit(out_s, out_e, n, s, e)
    return _chunk(T, buf, s, e, out_s, out_e, n, stack_s, stack_e)
