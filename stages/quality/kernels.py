"""The quality kernels: every heuristic signal of a batch, computed over Arrow buffers.

One call per batch and rule set. For web text, one document is read in two passes: the
first splits it into words once and derives from those words and its lines the Gopher
quality and repetition signals while C4 rewrites its lines into the output buffer; the
second reads the rewritten text for FineWeb's signals (FineWeb's recipe runs after C4,
so it judges the text C4 leaves). Code and math documents take one pass each.

Every function here reproduces one datatrove rule exactly on the same words
(``word_splitter.split_words``) and the same notion of line (``str.splitlines``,
``str.split("\\n")``, ``re.split("\\n+")`` and ``re.split("\\n{2,}")`` where the
reference uses each), counting characters as Python does (code points).
Signals go into a float64 matrix (NaN where a rule cannot be computed); thresholds
are applied outside, so re-thresholding never needs the kernels.
"""

from __future__ import annotations

import numba
import numpy as np

from stages.quality.jit import kernel, leaf
from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64_nonzero
from pipeline.kernels.utf8 import decode, n_chars, prev_start
from stages.quality.open_addressing import bytes_key, count_duplicates, slot_of, table_capacity
from stages.quality.tables import ALNUM, ALPHA, DECIMAL, DT_PUNCT, DT_TERM, LINEBREAK, NO_SPACE_SCRIPT, SENT_PUNCT, SPACE, UNI_P
from stages.quality.word_splitter import split_words

# Signal columns (fixed part); n-gram columns follow from NGRAM_BASE.
GQ_WORDS = 0
GQ_MEAN_WORD_LEN = 1
GQ_HASH_RATIO = 2
GQ_ELLIPSIS_RATIO = 3
GQ_BULLET_LINES = 4
GQ_ELLIPSIS_LINES = 5
GQ_ALPHA_WORDS = 6
GQ_STOP_WORDS = 7
GR_DUP_PARA_FRAC = 8
GR_DUP_PARA_CHAR_FRAC = 9
GR_DUP_LINE_FRAC = 10
GR_DUP_LINE_CHAR_FRAC = 11
C4_EVENT = 12  # first document-level C4 hit: 0 none, 1 lorem ipsum, 2 curly bracket
C4_SENTENCES = 13
C4_LINES_REMOVED = 14
FW_LINES = 15
FW_LINE_PUNCT_RATIO = 16
FW_SHORT_LINE_RATIO = 17
FW_CHAR_DUP_RATIO = 18
FW_LIST_RATIO = 19
CODE_MAX_LINE_LEN = 20
CODE_MEAN_LINE_LEN = 21
CODE_ALNUM_FRAC = 22
CODE_AUTOGEN = 23
BLOB_LEN = 24
TEXT_CHARS = 25
GQ_ALL_WORDS = 26
NONSPACE_CHARS = 27
NO_SPACE_FRAC = 28  # share of letters from scripts written without spaces
NGRAM_BASE = 29

C4_LOREM = 1
C4_CURLY = 2

# Integer parameters (params array).
P_C4_REMOVE_CITATIONS = 0
P_C4_NO_TERMINAL_PUNCT = 1
P_C4_MIN_WORDS_PER_LINE = 2
P_C4_MAX_WORD_LENGTH = 3
P_C4_LOREM = 4
P_C4_JAVASCRIPT = 5
P_C4_CURLY = 6
P_C4_POLICY = 7
P_FW_SHORT_LINE_LENGTH = 8
P_RUN_C4 = 9
P_AUTOGEN_LINES = 10
N_PARAMS = 11


@numba.njit(cache=True, inline="always")
def _scratch(n):
    return (
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
    )


# ---------------------------------------------------------------- lines and strings


@leaf
def next_line(flags, buf, i, end):
    """``str.splitlines``: (end of the line starting at i, start of the next)."""
    j = i
    while j < end:
        cp, n = decode(buf, j)
        if flags[cp] & LINEBREAK:
            if cp == 13 and j + 1 < end and buf[j + 1] == 10:
                return j, j + 2
            return j, j + n
        j += n
    return end, end


@leaf
def lstrip(flags, buf, a, b):
    while a < b:
        cp, n = decode(buf, a)
        if not (flags[cp] & SPACE):
            break
        a += n
    return a


@leaf
def rstrip(flags, buf, a, b):
    while b > a:
        p = prev_start(buf, b)
        cp, _ = decode(buf, p)
        if not (flags[cp] & SPACE):
            break
        b = p
    return b


@numba.njit(cache=True, _nrt=False, inline="always")
def startswith(buf, a, b, lit):
    n = lit.shape[0]
    if b - a < n:
        return False
    for k in range(n):
        if buf[a + k] != lit[k]:
            return False
    return True


@numba.njit(cache=True, _nrt=False, inline="always")
def endswith(buf, a, b, lit):
    n = lit.shape[0]
    if b - a < n:
        return False
    for k in range(n):
        if buf[b - n + k] != lit[k]:
            return False
    return True


@leaf
def count_nonoverlapping(buf, a, b, lit):
    """``str.count``: non-overlapping occurrences of ``lit``."""
    n = lit.shape[0]
    c = 0
    i = a
    while i + n <= b:
        if startswith(buf, i, b, lit):
            c += 1
            i += n
        else:
            i += 1
    return c


@leaf
def contains_lower(buf, a, b, blob, pa, pb):
    """Whether ``blob[pa:pb]`` (lowercase ASCII) occurs in ``buf[a:b].lower()`` (ASCII folding)."""
    n = pb - pa
    if n == 0:
        return True
    first = blob[pa]
    for i in range(a, b - n + 1):
        c = buf[i]
        if 65 <= c <= 90:
            c += 32
        if c != first:
            continue
        ok = True
        for k in range(1, n):
            d = buf[i + k]
            if 65 <= d <= 90:
                d += 32
            if d != blob[pa + k]:
                ok = False
                break
        if ok:
            return True
    return False


# ---------------------------------------------------------------- words


@leaf
def word_stats(T, buf, ntok, tok_s, tok_e, chars, poly, powlen):
    """Per word: characters, a polynomial hash of its bytes and base**bytes (for hashing
    concatenations). Returns (non-symbol words, their characters, words with a letter,
    letters, letters of scripts written without spaces)."""
    flags = T[0]
    n_ns = 0
    ns_chars = 0
    n_alpha = 0
    letters = 0
    no_space_letters = 0
    for t in range(ntok):
        a = tok_s[t]
        b = tok_e[t]
        c = 0
        non_symbol = False
        alpha = False
        h = np.uint64(0)
        pw = np.uint64(1)
        i = a
        while i < b:
            cp, n = decode(buf, i)
            f = flags[cp]
            if not (f & DT_PUNCT):
                non_symbol = True
            if f & ALPHA:
                alpha = True
                letters += 1
                if f & NO_SPACE_SCRIPT:
                    no_space_letters += 1
            c += 1
            i += n
        for i in range(a, b):
            h = h * np.uint64(0x100000001B3) + np.uint64(buf[i]) + np.uint64(1)
            pw = pw * np.uint64(0x100000001B3)
        chars[t] = c
        poly[t] = h
        powlen[t] = pw
        if non_symbol:
            n_ns += 1
            ns_chars += c
        if alpha:
            n_alpha += 1
    return n_ns, ns_chars, n_alpha, letters, no_space_letters


@leaf
def stop_word_count(buf, ntok, tok_s, tok_e, stop_blob, stop_off):
    """How many distinct stop words occur as words."""
    n_stop = stop_off.shape[0] - 1  # at most 64 (checked by the options)
    seen = np.uint64(0)
    count = 0
    for t in range(ntok):
        ln = tok_e[t] - tok_s[t]
        for k in range(n_stop):
            bit = np.uint64(1) << np.uint64(k)
            if (seen & bit) or stop_off[k + 1] - stop_off[k] != ln:
                continue
            same = True
            for j in range(ln):
                if buf[tok_s[t] + j] != stop_blob[stop_off[k] + j]:
                    same = False
                    break
            if same:
                seen |= bit
                count += 1
    return count


# ---------------------------------------------------------------- Gopher


_BULLET = np.array([0xE2, 0x80, 0xA2], np.uint8)  # •
_DASH = np.array([45], np.uint8)
_DOTS = np.array([46, 46, 46], np.uint8)
_HELLIP = np.array([0xE2, 0x80, 0xA6], np.uint8)  # …
_HASH = np.array([35], np.uint8)


@leaf
def gopher_quality(T, buf, ntok, tok_s, tok_e, chars, n_ns, ns_chars, n_alpha, stop_blob, stop_off, sig):
    flags = T[0]
    end = buf.shape[0]
    sig[GQ_WORDS] = n_ns
    sig[GQ_ALL_WORDS] = ntok
    sig[GQ_MEAN_WORD_LEN] = ns_chars / n_ns if n_ns > 0 else np.nan
    if ntok > 0:
        sig[GQ_HASH_RATIO] = count_nonoverlapping(buf, 0, end, _HASH) / ntok
        ell = count_nonoverlapping(buf, 0, end, _DOTS) + count_nonoverlapping(buf, 0, end, _HELLIP)
        sig[GQ_ELLIPSIS_RATIO] = ell / ntok
        sig[GQ_ALPHA_WORDS] = n_alpha / ntok
    n_lines = 0
    n_bullet = 0
    n_ell = 0
    i = 0
    while i < end:
        le, nx = next_line(flags, buf, i, end)
        a = lstrip(flags, buf, i, le)
        if startswith(buf, a, le, _BULLET) or startswith(buf, a, le, _DASH):
            n_bullet += 1
        b = rstrip(flags, buf, i, le)
        if endswith(buf, i, b, _DOTS) or endswith(buf, i, b, _HELLIP):
            n_ell += 1
        n_lines += 1
        i = nx
    if n_lines > 0:
        sig[GQ_BULLET_LINES] = n_bullet / n_lines
        sig[GQ_ELLIPSIS_LINES] = n_ell / n_lines
    sig[GQ_STOP_WORDS] = stop_word_count(buf, ntok, tok_s, tok_e, stop_blob, stop_off)


@kernel
def _split_dup(buf, a, b, min_run, text_chars, sig, i_frac, i_chars):
    """Duplicates among the pieces of buf[a:b] split at runs of >= min_run newlines."""
    n_max = (b - a) // max(min_run, 1) + 1
    keys = np.empty(n_max, np.uint64)
    lens = np.empty(n_max, np.int64)
    n = 0
    start = a
    i = a
    while i < b:
        if buf[i] == 10:
            j = i
            while j < b and buf[j] == 10:
                j += 1
            if j - i >= min_run:
                keys[n] = bytes_key(buf, start, i)
                lens[n] = n_chars(buf, start, i)
                n += 1
                start = j
            i = j
        else:
            i += 1
    keys[n] = bytes_key(buf, start, b)
    lens[n] = n_chars(buf, start, b)
    n += 1
    dup, dup_chars = count_duplicates(keys, lens, n)
    sig[i_frac] = dup / n
    sig[i_chars] = dup_chars / text_chars if text_chars > 0 else np.nan


@kernel
def gopher_repetition(T, buf, ntok, chars, poly, powlen, text_chars, top_ns, dup_ns, sig):
    flags = T[0]
    end = buf.shape[0]
    if end == 0:
        return
    a = lstrip(flags, buf, 0, end)
    b = rstrip(flags, buf, a, end)
    _split_dup(buf, a, b, 2, text_chars, sig, GR_DUP_PARA_FRAC, GR_DUP_PARA_CHAR_FRAC)
    _split_dup(buf, 0, end, 1, text_chars, sig, GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
    cum = np.zeros(ntok + 1, np.int64)
    for t in range(ntok):
        cum[t + 1] = cum[t] + chars[t]
    wkey = np.empty(ntok, np.uint64)
    for t in range(ntok):
        wkey[t] = mix64_nonzero(poly[t] ^ np.uint64(chars[t]))
    keys = np.zeros(table_capacity(ntok), np.uint64)
    counts = np.zeros(keys.shape[0], np.int64)
    first = np.zeros(keys.shape[0], np.int64)
    col = NGRAM_BASE
    for q in range(top_ns.shape[0]):
        n = top_ns[q]
        if ntok - n + 1 > 0:
            # Counter.most_common(1): highest count, the first seen among equals.
            keys[:] = 0
            best_count = 0
            best_first = 0
            for i in range(ntok - n + 1):
                h = np.uint64(0)
                for j in range(n):
                    h = h * GOLDEN_GAMMA + wkey[i + j]
                h = mix64_nonzero(h)
                s = slot_of(keys, h)
                if keys[s] != h:
                    keys[s] = h
                    counts[s] = 0
                    first[s] = i
                counts[s] += 1
                c = counts[s]
                if c > best_count or (c == best_count and first[s] < best_first):
                    best_count = c
                    best_first = first[s]
            top_chars = cum[best_first + n] - cum[best_first] + (n - 1)
            sig[col] = top_chars * best_count / text_chars
        else:
            sig[col] = 0.0
        col += 1
    for q in range(dup_ns.shape[0]):
        n = dup_ns[q]
        # datatrove's find_all_duplicate: greedy, on "".join of n words.
        keys[:] = 0
        repeated = 0
        idx = 0
        while idx < ntok - n + 1:
            h = np.uint64(0)
            for j in range(n):
                h = h * powlen[idx + j] + poly[idx + j]
            h = mix64_nonzero(h ^ np.uint64(cum[idx + n] - cum[idx]))
            s = slot_of(keys, h)
            if keys[s] == h:
                repeated += cum[idx + n] - cum[idx]
                idx += n
            else:
                keys[s] = h
                idx += 1
        sig[col] = repeated / text_chars
        col += 1


# ---------------------------------------------------------------- C4


_END_PUNCT = np.array([46, 63, 33, 34, 39], np.uint8)  # . ? ! " '
_LOREM = np.frombuffer(b"lorem ipsum", np.uint8).copy()
_JAVASCRIPT = np.frombuffer(b"javascript", np.uint8).copy()
_EDIT = np.frombuffer(b"edit]", np.uint8).copy()
_CITATION_NEEDED = np.frombuffer(b"citation needed]", np.uint8).copy()


@leaf
def copy_without_citations(T, src, a, b, dst, w):
    """Copy src[a:b] to dst[w:], dropping ``\\[\\d*]|\\[edit]|\\[citation needed]``; returns the end."""
    flags = T[0]
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
def count_sentences(T, buf, a, b, tok_s, tok_e, t0, t1):
    """Sentences spaCy's Sentencizer finds in buf[a:b] (datatrove's split_into_sentences),
    given that text's words: tokens t0..t1-1, all inside [a, b)."""
    if b <= a:
        return 0
    flags = T[0]
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


@kernel
def c4_rewrite(T, buf, ntok, tok_s, tok_e, out, w0, params, policy_blob, policy_off, sig):
    """datatrove's C4QualityFilter (split_paragraph=True) on one document whose words are
    tok_s/tok_e[:ntok]: writes the kept lines joined by "\n" and stripped at out[w0:].
    Returns (end of the rewritten text, its number of words)."""
    flags = T[0]
    end = buf.shape[0]
    w = w0
    n_kept = 0
    n_lines = 0
    sentences = 0
    kept_words = 0
    event = 0
    remove_citations = params[P_C4_REMOVE_CITATIONS] != 0
    no_terminal = params[P_C4_NO_TERMINAL_PUNCT] != 0
    min_words = params[P_C4_MIN_WORDS_PER_LINE]
    max_word = params[P_C4_MAX_WORD_LENGTH]
    t = 0  # first word not before the current line
    i = 0
    while i < end:
        le, nx = next_line(flags, buf, i, end)
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
        # words = line.split(): count, and the longest
        n_words = 0
        longest = 0
        cur = 0
        j = a
        while j < b:
            cp, n = decode(buf, j)
            if flags[cp] & SPACE:
                if cur > 0:
                    n_words += 1
                    longest = max(longest, cur)
                cur = 0
            else:
                cur += 1
            j += n
        if cur > 0:
            n_words += 1
            longest = max(longest, cur)
        if max_word != -1 and longest > max_word:
            continue
        ls = w + 1 if n_kept > 0 else w  # room for the "\n" separator
        if remove_citations:
            lend = copy_without_citations(T, buf, a, b, out, ls)
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
            if not ok or endswith(out, ls, lend, _DOTS):
                continue
        if n_words < min_words:
            continue
        if params[P_C4_LOREM] != 0 and contains_lower(out, ls, lend, _LOREM, 0, _LOREM.shape[0]):
            if event == 0:
                event = C4_LOREM
        if params[P_C4_JAVASCRIPT] != 0 and contains_lower(out, ls, lend, _JAVASCRIPT, 0, _JAVASCRIPT.shape[0]):
            continue
        if params[P_C4_CURLY] != 0:
            curly = False
            for k in range(ls, lend):
                if out[k] == 123:
                    curly = True
                    break
            if curly and event == 0:
                event = C4_CURLY
        if params[P_C4_POLICY] != 0:
            hit = False
            for k in range(policy_off.shape[0] - 1):
                if contains_lower(out, ls, lend, policy_blob, policy_off[k], policy_off[k + 1]):
                    hit = True
                    break
            if hit:
                continue
        if lend - ls == b - a:
            sentences += count_sentences(T, buf, a, b, tok_s, tok_e, t0, t1)
            kept_words += t1 - t0
        else:  # citations removed: split the cleaned line anew
            size = lend - ls
            ls_, le_, ss_, se_ = _scratch(size)
            view = out[ls:lend]
            n_line = split_words(T, view, 0, size, ls_, le_, ss_, se_)
            sentences += count_sentences(T, view, 0, size, ls_, le_, 0, n_line)
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


# ---------------------------------------------------------------- FineWeb


@kernel
def fineweb(T, buf, short_len, ntok, sig):
    """datatrove's FineWebQualityFilter signals on buf (the text as C4 left it), which
    has ``ntok`` words."""
    flags = T[0]
    end = buf.shape[0]
    n_max = 1
    for i in range(end):
        if buf[i] == 10:
            n_max += 1
    n_newlines = n_max - 1
    keys = np.empty(n_max, np.uint64)
    lens = np.empty(n_max, np.int64)
    n = 0
    n_punct = 0
    n_short = 0
    start = 0
    for i in range(end + 1):
        if i == end or buf[i] == 10:
            a = lstrip(flags, buf, start, i)
            if a < i:  # line.strip() != ""
                c = n_chars(buf, start, i)
                p = prev_start(buf, i)
                cp, _ = decode(buf, p)
                if flags[cp] & DT_TERM:
                    n_punct += 1
                if c <= short_len:
                    n_short += 1
                keys[n] = bytes_key(buf, start, i)
                lens[n] = c
                n += 1
            start = i + 1
    sig[FW_LINES] = n
    if n == 0:
        return
    sig[FW_LINE_PUNCT_RATIO] = n_punct / n
    sig[FW_SHORT_LINE_RATIO] = n_short / n
    _, dup_chars = count_duplicates(keys, lens, n)
    denom = n_chars(buf, 0, end) - n_newlines
    sig[FW_CHAR_DUP_RATIO] = dup_chars / denom if denom > 0 else np.nan
    sig[FW_LIST_RATIO] = n_newlines / ntok if ntok > 0 else np.nan


# ---------------------------------------------------------------- code and math


@leaf
def char_counts(flags, buf):
    """(characters, alphanumeric characters, non-whitespace characters)."""
    total = 0
    alnum = 0
    nonspace = 0
    i = 0
    end = buf.shape[0]
    while i < end:
        cp, n = decode(buf, i)
        f = flags[cp]
        total += 1
        if f & ALNUM:
            alnum += 1
        if not (f & SPACE):
            nonspace += 1
        i += n
    return total, alnum, nonspace


@leaf
def blob_length(buf):
    """Longest encoded blob in characters: a run of base64 characters ([A-Za-z0-9+/=]),
    or a run of escaped or literal hex bytes ("\\x3f\\x00..." or "0x3f, 0x00, ...")."""
    end = buf.shape[0]
    best = 0
    run = 0
    for i in range(end):
        c = buf[i]
        if (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 43 or c == 47 or c == 61:
            run += 1
            if run > best:
                best = run
        else:
            run = 0
    # hex byte sequences: "\xHH" repeated, or "0xHH" separated by commas/spaces
    i = 0
    start = -1
    last = -1
    while i < end:
        c = buf[i]
        if (c == 92 or c == 48) and i + 3 < end and (buf[i + 1] == 120 or buf[i + 1] == 88):
            j = i + 2
            while j < end and ((48 <= buf[j] <= 57) or (65 <= buf[j] <= 70) or (97 <= buf[j] <= 102)):
                j += 1
            if j > i + 2:
                if start < 0:
                    start = i
                last = j
                i = j
                continue
        if start >= 0 and (c == 44 or c == 32 or c == 10 or c == 9 or c == 13):
            i += 1
            continue
        if start >= 0:
            best = max(best, last - start)
            start = -1
        i += 1
    if start >= 0:
        best = max(best, last - start)
    return best


@leaf
def code_rules(T, buf, params, marker_blob, marker_off, sig):
    """The Stack / StarCoder signals: line lengths, alphanumeric share, generated-file
    markers in the first lines, encoded blobs."""
    flags = T[0]
    end = buf.shape[0]
    total, alnum, _ = char_counts(flags, buf)
    n_lines = 0
    longest = 0
    line_chars = 0
    autogen = 0
    i = 0
    while i < end:
        le, nx = next_line(flags, buf, i, end)
        c = n_chars(buf, i, le)
        longest = max(longest, c)
        line_chars += c
        if n_lines < params[P_AUTOGEN_LINES] and autogen == 0:
            for k in range(marker_off.shape[0] - 1):
                if contains_lower(buf, i, le, marker_blob, marker_off[k], marker_off[k + 1]):
                    autogen = 1
                    break
        n_lines += 1
        i = nx
    sig[CODE_MAX_LINE_LEN] = longest
    sig[CODE_MEAN_LINE_LEN] = line_chars / n_lines if n_lines > 0 else 0.0
    sig[CODE_ALNUM_FRAC] = alnum / total if total > 0 else 0.0
    sig[CODE_AUTOGEN] = autogen
    sig[BLOB_LEN] = blob_length(buf)


# ---------------------------------------------------------------- batch drivers


@kernel
def web_batch(
    T, data, offsets, params, no_space_min, stop_blob, stop_off, policy_blob, policy_off, top_ns, dup_ns, sig, out, out_off
):
    """Gopher quality + repetition on each document, C4 rewriting into ``out``, FineWeb on
    the result. ``out_off`` receives the rewritten texts' offsets. Documents whose
    letters are mostly (>= no_space_min) from scripts without spaces skip C4."""
    ndocs = offsets.shape[0] - 1
    w = 0
    out_off[0] = 0
    for d in range(ndocs):
        doc = data[offsets[d] : offsets[d + 1]]
        size = doc.shape[0]
        row = sig[d]
        tok_s, tok_e, stack_s, stack_e = _scratch(size)
        ntok = split_words(T, doc, 0, size, tok_s, tok_e, stack_s, stack_e)
        chars = np.empty(ntok, np.int64)
        poly = np.empty(ntok, np.uint64)
        powlen = np.empty(ntok, np.uint64)
        n_ns, ns_chars, n_alpha, letters, no_space = word_stats(T, doc, ntok, tok_s, tok_e, chars, poly, powlen)
        no_space_frac = no_space / letters if letters > 0 else 0.0
        row[NO_SPACE_FRAC] = no_space_frac
        text_chars = n_chars(doc, 0, size)
        row[TEXT_CHARS] = text_chars
        gopher_quality(T, doc, ntok, tok_s, tok_e, chars, n_ns, ns_chars, n_alpha, stop_blob, stop_off, row)
        gopher_repetition(T, doc, ntok, chars, poly, powlen, text_chars, top_ns, dup_ns, row)
        if params[P_RUN_C4] != 0 and not (letters > 0 and no_space_frac >= no_space_min):
            w_end, out_words = c4_rewrite(T, doc, ntok, tok_s, tok_e, out, w, params, policy_blob, policy_off, row)
        else:
            out[w : w + size] = doc
            w_end = w + size
            out_words = ntok
        fineweb(T, out[w:w_end], params[P_FW_SHORT_LINE_LENGTH], out_words, row)
        w = w_end
        out_off[d + 1] = w


@kernel
def code_batch(T, data, offsets, params, marker_blob, marker_off, sig):
    for d in range(offsets.shape[0] - 1):
        doc = data[offsets[d] : offsets[d + 1]]
        total, _, nonspace = char_counts(T[0], doc)
        sig[d, TEXT_CHARS] = total
        sig[d, NONSPACE_CHARS] = nonspace
        code_rules(T, doc, params, marker_blob, marker_off, sig[d])


@kernel
def math_batch(T, data, offsets, sig):
    """Light rules: non-blank text, no encoded blob, and the duplicate-line share."""
    flags = T[0]
    for d in range(offsets.shape[0] - 1):
        doc = data[offsets[d] : offsets[d + 1]]
        size = doc.shape[0]
        text_chars, _, nonspace = char_counts(flags, doc)
        sig[d, TEXT_CHARS] = text_chars
        sig[d, NONSPACE_CHARS] = nonspace
        sig[d, BLOB_LEN] = blob_length(doc)
        if size > 0:
            _split_dup(doc, 0, size, 1, text_chars, sig[d], GR_DUP_LINE_FRAC, GR_DUP_LINE_CHAR_FRAC)
