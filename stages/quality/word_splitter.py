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
through ``_gen_char_tables.py``.

This module is the scanner (steps 1, 2, 5 and the loop of 3 and 4); spaCy's rules it
asks live beside it: prefixes, suffixes and infixes in ``word_affixes.py``, URL_MATCH in
``word_urls.py``, character classes and special cases in ``pipeline/text/char_tables.py``.

Words (spaCy's tokens) are returned as byte spans; downstream kernels derive lengths,
flags and hashes.
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.utf8 import decode
from pipeline.text.char_tables import SPACE, byte_set_find, sketch_slot
from stages.quality.chunk_memo import MAX_BYTES, chunk_hash, recall, remember
from stages.quality.jit import leaf
from stages.quality.word_affixes import find_infix, find_prefix, find_suffix
from stages.quality.word_urls import url_match


@njit
def word_scratch(n):
    """Arrays for ``split_words`` on n bytes: (word starts, word ends, scratch, scratch)."""
    return (
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
        np.empty(n + 1, np.int32),
    )


@leaf
def _special_in(sketch, keys, slot_item, item_off, blob, max_len, buf, s, e):
    """Index of buf[s:e] among the special cases (the tables' ``special_*`` arrays), or -1.
    Their sketch answers most spans without hashing them (the hash reads every byte)."""
    if e - s > max_len or (e > s and not sketch[sketch_slot(buf, s, e)]):
        return -1
    return byte_set_find(keys, slot_item, item_off, blob, buf, s, e)


@leaf
def _emit(out_s, out_e, n, s, e):
    out_s[n] = s
    out_e[n] = e
    return n + 1


@leaf
def _emit_special(T, k, s, out_s, out_e, n):
    for j in range(T.special_piece_off[k], T.special_piece_off[k + 1]):
        ln = T.special_piece_len[j]
        n = _emit(out_s, out_e, n, s, s + ln)
        s += ln
    return n


@leaf
def _chunk(T, buf, cs, ce, out_s, out_e, n, stack_s, stack_e):
    """Steps 2 to 5 on the chunk buf[cs:ce]; its helpers take the tables' arrays they
    read, not the tuple (see ``_plain``)."""
    flags = T.flags
    sk, ssi, sio, sb, smax = T.special_keys, T.special_slot_item, T.special_item_off, T.special_blob, T.special_max_len
    sks = T.special_sketch
    ak, asi, aio, ab, amax = (
        T.after_digit_keys,
        T.after_digit_slot_item,
        T.after_digit_item_off,
        T.after_digit_blob,
        T.after_digit_max_len,
    )
    n0 = n
    k = _special_in(sks, sk, ssi, sio, sb, smax, buf, cs, ce)
    if k >= 0:
        return _emit_special(T, k, cs, out_s, out_e, n)
    s = cs
    e = ce
    n_suf = 0
    last_size = -1
    special = -1  # _special of buf[s:e], when ``known``: each span is looked up once
    known = True
    while s < e and e - s != last_size:
        if not known:
            special = _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e)
            known = True
        if special >= 0:
            break
        last_size = e - s
        pre = find_prefix(flags, buf, s, e)
        if pre and s + pre < e:
            special = _special_in(sks, sk, ssi, sio, sb, smax, buf, s + pre, e)
            if special >= 0:
                n = _emit(out_s, out_e, n, s, s + pre)
                s += pre
                break
        suf = find_suffix(flags, ak, asi, aio, ab, amax, buf, s + pre, e)
        if suf and e - suf > s:
            special = _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e - suf)
            if special >= 0:
                stack_s[n_suf] = e - suf
                stack_e[n_suf] = e
                n_suf += 1
                e -= suf
                break
        if pre:
            n = _emit(out_s, out_e, n, s, s + pre)
            s += pre
            known = False
        if suf:
            stack_s[n_suf] = e - suf
            stack_e[n_suf] = e
            n_suf += 1
            e -= suf
            known = False
    if s < e:
        if not known:
            special = _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e)
        if special >= 0:
            n = _emit_special(T, special, s, out_s, out_e, n)
        elif url_match(flags, buf, s, e):
            n = _emit(out_s, out_e, n, s, e)
        else:
            start = s
            i = s
            while i < e:
                b = buf[i]
                if (48 <= b <= 57) or (65 <= b <= 90) or (97 <= b <= 122):
                    i += 1  # no infix starts at an ASCII letter or digit
                    continue
                m = find_infix(flags, buf, s, i, e)
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
        n = _emit(out_s, out_e, n, np.int64(stack_s[j]), np.int64(stack_e[j]))
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
    tokens than their pattern (checked in char_tables.py), so rewriting in place is safe."""
    sk, ssi, sio, sb, smax = T.special_keys, T.special_slot_item, T.special_item_off, T.special_blob, T.special_max_len
    sks = T.special_sketch
    n_tok = n - n0
    for t in range(n_tok):
        take[t] = -2
    for L in range(min(T.merge_max_tokens, n_tok), 1, -1):
        for i in range(n0, n - L + 1):
            j = i + L
            if not T.merge_first_byte[buf[out_s[i]]]:
                continue
            k = _special_in(sks, sk, ssi, sio, sb, smax, buf, np.int64(out_s[i]), np.int64(out_e[j - 1]))
            if k < 0 or T.special_pattern_off[k + 1] - T.special_pattern_off[k] != L:
                continue
            ok = True
            for t in range(L):
                if out_e[i + t] - out_s[i + t] != T.special_pattern_len[T.special_pattern_off[k] + t]:
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
            m = _emit_special(T, k, np.int64(out_s[n0 + t]), out_s, out_e, m)
            t += T.special_pattern_off[k + 1] - T.special_pattern_off[k]
        else:
            out_s[m] = out_s[n0 + t]
            out_e[m] = out_e[n0 + t]
            m += 1
            t += 1
    return m


@leaf
def split_words(T, buf, start, end, out_s, out_e, stack_s, stack_e, memo):
    """Words of buf[start:end] as spaCy English + strip_strings would give them.

    Writes byte spans into out_s/out_e (each at least end - start long) and returns the
    count. stack_s/stack_e are scratch of the same size; ``memo`` (``chunk_memo``) holds
    the chunks split the long way so far, shared by the calls of a batch.

    Each chunk (the bytes between spaces) is read in two loops: its leading ASCII
    letters, one test a byte, then the rest of it, where a byte may be a space, a mark
    after letters or the first of a multi-byte character. Most chunks are words of
    letters, which the first loop reads whole: 0.83-0.90 of the time of one loop asking
    every byte every question (the e2e benchmark's corpus, the same words).
    """
    slots, hashes, entries, pool, spans, _ = memo
    flags = T.flags
    sketch = T.special_sketch
    sk, ssi, sio, sb, smax = T.special_keys, T.special_slot_item, T.special_item_off, T.special_blob, T.special_max_len
    n = 0
    i = start
    while i < end:
        cl, space = _char(flags, buf, i)
        if space:
            i += cl
            continue
        chunk = i
        while i < end and _ascii_letter(buf[i]):
            i += 1
        shape = LETTERS  # of the chunk so far
        while i < end:
            cl, space = _char(flags, buf, i)
            if space:
                break
            b = buf[i]
            if shape == LETTERS and not _ascii_letter(b):
                shape = LETTERS_MARK if i > chunk and _mark_after_letters(b, buf[i - 1]) else OTHER
            elif shape == LETTERS_MARK:
                shape = OTHER
            i += cl
        # Most words are ASCII letters and not special; the sketch tells them so without
        # a call (see _plain).
        if shape == LETTERS and not sketch[sketch_slot(buf, chunk, i)]:
            n = _emit(out_s, out_e, n, chunk, i)
            continue
        # Of the other chunks only a lone character ("=", "{", "−": a quarter of code's) has a
        # fast path, taken here: calling _plain for them cost 0.07 s of code's 0.64 s.
        if shape == OTHER:
            m = _emit(out_s, out_e, n, chunk, i) if i - chunk == 1 or decode(buf, chunk)[1] == i - chunk else -1
        else:
            m = _plain(sketch, sk, ssi, sio, sb, smax, buf, chunk, i, shape, out_s, out_e, n)
        if m < 0:  # the long way, unless the memo has the chunk
            kept = i - chunk <= MAX_BYTES
            h = chunk_hash(buf, chunk, i) if kept else np.uint64(0)
            if kept:
                m = recall(slots, hashes, entries, pool, spans, buf, chunk, i, h, out_s, out_e, n)
            if m < 0:
                m = _chunk(T, buf, chunk, i, out_s, out_e, n, stack_s, stack_e)
                if kept:
                    remember(memo, buf, chunk, i, h, out_s, out_e, n, m)
        n = m
    return n


@leaf
def _char(flags, buf, i):
    """(byte length, whether a space as ``str.isspace`` says) of the character at buf[i]."""
    b = buf[i]
    if b < 0x80:
        return 1, flags[b] & SPACE != 0
    cp, cl = decode(buf, i)
    return cl, flags[cp] & SPACE != 0


@leaf
def _ascii_letter(b):
    return (65 <= b <= 90) or (97 <= b <= 122)


LETTERS = 0  # ASCII letters only
LETTERS_MARK = 1  # ASCII letters, then one of _mark_after_letters
OTHER = 2


@leaf
def _mark_after_letters(b, prev):
    """Whether spaCy's only cut in letters + ``b`` is before ``b``: , ; : ! ? ) " are
    suffixes anywhere, "." after a lowercase letter (char_tables.py's SP_SUFFIX and SP_DOT_AFTER;
    the tests check both)."""
    return b == 44 or b == 59 or b == 58 or b == 33 or b == 63 or b == 41 or b == 34 or (b == 46 and 97 <= prev <= 122)


@leaf
def _plain(sks, sk, ssi, sio, sb, smax, buf, s, e, shape, out_s, out_e, n):
    """Fast paths; returns the new word count, or -1 where the chunk goes the long way
    (``_chunk``). A chunk of ASCII letters has no prefix, suffix, infix or URL, so it is
    one word unless it is a special case ("cannot", "Id", "wed"). Letters and a final mark
    ("it.", "Yeah,") are the letters and the mark, unless the whole is a special case
    ("Mr.") or the letters are one ("Id,": the special's pieces could re-merge).

    It takes the special cases' arrays (sks ... smax), not the tables tuple: a call that
    passes the tuple passes its hundred-odd fields, which cost more than the word itself."""
    if shape == LETTERS:
        if _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e) < 0:
            return _emit(out_s, out_e, n, s, e)
    elif shape == LETTERS_MARK and _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e) < 0:
        if _special_in(sks, sk, ssi, sio, sb, smax, buf, s, e - 1) < 0:
            n = _emit(out_s, out_e, n, s, e - 1)
            return _emit(out_s, out_e, n, e - 1, e)
    return -1
