"""Gopher's word n-gram rules: the share of characters in the most frequent n-gram per
``top`` size, and in duplicated n-grams per ``dup`` size (datatrove's
``find_top_duplicate`` and greedy ``find_all_duplicate``), in time that follows the
n-grams that repeat rather than sizes x words.

Three things make it fast without changing a value:

- Each n-gram's key is read off prefix hashes in O(1). Polynomial hashes of a
  concatenation compose, and the bases are odd, hence invertible mod 2**64, so
  ``prefix[i + n] - prefix[i] * base**len`` is the very value a fold over the n words
  gives (the keys are those the per-n-gram fold produced before).
- For the top n-grams (counted as word sequences), an n-gram that occurs once can
  only be the most frequent if all are unique (then the first one is), and the n-gram
  one word longer at the same place occurs once too, and so does the one a place
  before it. So the sizes are counted in ascending order, each at the places where
  the shorter n-gram and the next place's repeat (in prose most 3-grams are unique),
  in a table whose slot holds key, count and first place together. The duplicate
  walk compares words joined without a separator ("a" "bc" equals "ab" "c"), where
  that argument fails.
- What every n-gram starts with rules out most places for all sizes at once: two
  equal n-grams of at least ``HEAD`` bytes begin with the same ``HEAD`` bytes of the
  words joined, and in prose nine places in ten begin with bytes that begin no other
  place. A bitmap of those heads' hashes, seen once and seen twice, finds them (a
  collision only keeps a place), and then no walk (the six duplicate sizes, the first
  top size) looks them up or stores them: such an n-gram can equal no n-gram before it
  nor after it. Shorter n-grams are looked up as before. The first top size's keys go
  through such a bitmap too before its table, which then holds only repeating n-grams.
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64, mix64_nonzero
from stages.quality.early_stop import rejected
from stages.quality.jit import leaf
from stages.quality.open_addressing import clear_pairs, slot_of, table_capacity
from stages.quality.signals import NGRAM_BASE
from stages.quality.word_counts import BUCKETS

HEAD = 16  # bytes of an n-gram's start that find the places no walk needs


@njit
def ngram_scratch(n):
    """Arrays for the n-gram signals (``lone_heads``, ``top_ngrams``, ``dup_ngrams``) on
    documents of up to n words, shared by a batch's documents (fresh ones per document
    cost page faults in proportion to its size): the six prefix sums ``words.word_stats``
    fills (cum, at, by_word, by_byte, power, inverse), the table (the word counts of
    ``word_counts``, the top counts' (key, count << 32 | first) pairs, the duplicate
    walks' keys), the bitmaps (16 bits per item), per place: a table slot or bit, the
    live places, lone heads; and the buckets of ``word_counts.top_may_fire``."""
    cap = table_capacity(n)
    return (
        np.empty(n + 1, np.int64),
        np.empty(n + 1, np.int64),
        np.empty(n + 1, np.uint64),
        np.empty(n + 1, np.uint64),
        np.empty(n + 1, np.uint64),
        np.empty(n + 1, np.uint64),
        np.empty(2 * cap, np.uint64),
        np.empty(cap // 8, np.uint64),
        np.empty(cap // 8, np.uint64),
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty(n, np.bool_),
        np.empty(BUCKETS, np.int64),
    )


@leaf
def lone_heads(buf, ntok, tok_s, tok_e, scratch):
    """Marks the places whose n-grams of ``HEAD`` bytes or more can equal no other
    (``_lone_heads``), for both kinds of n-gram; the first call on a document's words.
    ``scratch``: ``ngram_scratch`` for at least ``ntok`` words, its prefix sums filled
    by ``words.word_stats``."""
    _, _, _, _, _, _, _, once, twice, slot_at, _, lone, _ = scratch
    _lone_heads(buf, ntok, tok_s, tok_e, once, twice, slot_at, lone)


@leaf
def top_ngrams(ntok, scratch, text_chars, top_ns, sig, rules, words):
    """The top n-gram signals of a document of ``ntok`` words (after ``lone_heads``) into
    sig[NGRAM_BASE:] in the order of ``top_ns``. ``text_chars`` > 0. Stops after the
    size where one of ``rules`` drops the page (``early_stop``)."""
    cum, at, by_word, _, _, _, table, once, twice, slot_at, live, lone, _ = scratch
    n_top = top_ns.shape[0]
    n_live = 0
    n = _next_size(top_ns, 0)
    if n > 0:
        n_live = _repeating(live, _candidates(lone, at, ntok, n, live), n, by_word, once, twice, slot_at)
    n = 0
    for _ in range(n_top):
        n = _next_size(top_ns, n)
        if n == 0:
            break
        places = ntok - n + 1
        while n_live > 0 and live[n_live - 1] >= places:
            n_live -= 1
        best_count, best_first = _count_top(live, n_live, n, by_word, table, slot_at)
        n_live = _repeated_pairs(live, n_live, table, slot_at)
        top_share = 0.0
        if places > 0:
            top_chars = cum[best_first + n] - cum[best_first] + (n - 1)
            top_share = top_chars * best_count / text_chars
        for q in range(n_top):
            if top_ns[q] == n:
                sig[NGRAM_BASE + q] = top_share
        if rejected(sig, rules, words, 0, 0):
            return


@leaf
def dup_ngrams(ntok, scratch, text_chars, n_top, dup_ns, sig, rules, words, unfired_from, unfired_to):
    """The duplicate n-gram signals (after ``lone_heads``) into sig[NGRAM_BASE + n_top:]
    in the order of ``dup_ns``, stopping where one of ``rules`` drops the page (those on
    columns ``unfired_from`` to before ``unfired_to`` known not to fire). The sizes in
    ascending order, each walking the places the last one walked that are not lone at
    this size (a longer n-gram only has more bytes)."""
    cum, at, _, by_byte, power, inverse, table, _, _, _, live, lone, _ = scratch
    n = _next_size(dup_ns, 0)
    n_cand = _candidates(lone, at, ntok, n, live) if n > 0 else 0
    while n > 0:
        n_cand = _narrow(live, n_cand, lone, at, ntok, n)
        repeated = _greedy_duplicates(live, n_cand, n, cum, by_byte, power, inverse, table)
        for q in range(dup_ns.shape[0]):
            if dup_ns[q] == n:
                sig[NGRAM_BASE + n_top + q] = repeated / text_chars
        if rejected(sig, rules, words, unfired_from, unfired_to):
            return
        n = _next_size(dup_ns, n)


_FIRST = np.uint64(0xFFFFFFFF)  # a top-count pair's low half: where its n-gram first is
_ONE = np.uint64(1 << 32)  # one more in its high half, the count


@leaf
def _count_top(live, n_live, n, by_word, table, slot_at):
    """Counts the n-grams at the live places (their keys as the word prefix hash gives
    them) in ``table``, pairs of (key, count << 32 | first place), a probe's key and
    count in one cache line; slot_at[p]: place p's pair. Returns Counter.most_common(1)'s
    (count, first place): the highest count, the first seen among equals; all unique:
    the first n-gram (places off ``live`` hold n-grams that occur once)."""
    mask = clear_pairs(table, n_live)
    step = _step(n)
    best_count = 1
    best_first = 0
    for p in range(n_live):
        i = live[p]
        h = mix64_nonzero(by_word[i + n] - by_word[i] * step)
        s = np.int64(h & np.uint64(mask))
        while table[2 * s] != 0 and table[2 * s] != h:
            s = (s + 1) & mask
        if table[2 * s] != h:
            table[2 * s] = h
            table[2 * s + 1] = np.uint64(i)
        v = table[2 * s + 1] + _ONE
        table[2 * s + 1] = v
        slot_at[p] = s
        c = np.int64(v >> np.uint64(32))
        f = np.int64(v & _FIRST)
        if c > best_count or (c == best_count and f < best_first):
            best_count = c
            best_first = f
    return best_count, best_first


@leaf
def _repeated_pairs(live, n_live, table, slot_at):
    """Keeps the live places whose n-gram, and the n-gram at the next place, occur more
    than once (``_count_top`` counted them): the only places an (n + 1)-gram can repeat,
    as it is the one followed by the last word of the other. Returns how many."""
    kept = 0
    repeats = n_live > 0 and table[2 * slot_at[0] + 1] >= np.uint64(2 << 32)
    for p in range(n_live - 1):
        next_repeats = table[2 * slot_at[p + 1] + 1] >= np.uint64(2 << 32)
        if repeats and next_repeats and live[p + 1] == live[p] + 1:
            live[kept] = live[p]
            kept += 1
        repeats = next_repeats
    return kept


@leaf
def _next_size(sizes, after):
    """The smallest size larger than ``after``, or 0 (a handful of sizes: no sort to compile)."""
    best = 0
    for k in range(sizes.shape[0]):
        if sizes[k] > after and (best == 0 or sizes[k] < best):
            best = sizes[k]
    return best


@leaf
def _greedy_duplicates(cand, n_cand, n, cum, by_byte, power, inverse, keys):
    """datatrove's find_all_duplicate on "".join of n words: characters of the n-grams
    seen before, skipping past each. Only the places in ``cand`` (ascending) can match
    or be matched; the walk steps over the others as a miss."""
    table = keys[: _clear(keys, n_cand)]
    repeated = 0
    after = 0  # the walk's next place
    for p in range(n_cand):
        i = cand[p]
        if i < after:
            continue
        size = cum[i + n] - cum[i]
        h = by_byte[i + n] - by_byte[i] * power[i + n] * inverse[i]
        h = mix64_nonzero(h ^ np.uint64(size))
        s = slot_of(table, h)
        if table[s] == h:
            repeated += size
            after = i + n
        else:
            table[s] = h
            after = i + 1
    return repeated


@leaf
def _candidates(lone, at, ntok, n, out):
    """Into ``out``, the places of n-grams that are not lone (see ``_lone``); returns how many."""
    k = 0
    for i in range(max(ntok - n + 1, 0)):
        if not _lone(lone, at, i, n):
            out[k] = i
            k += 1
    return k


@leaf
def _narrow(cand, n_cand, lone, at, ntok, n):
    """Keeps the places in ``cand`` that still hold a non-lone n-gram; returns how many."""
    k = 0
    for p in range(n_cand):
        i = cand[p]
        if i < ntok - n + 1 and not _lone(lone, at, i, n):
            cand[k] = i
            k += 1
    return k


@leaf
def _lone_heads(buf, ntok, tok_s, tok_e, once, twice, bit_at, lone):
    """lone[i]: the HEAD bytes of the words joined from word i begin at no other word
    (False where fewer are left). Built from the last word back: a word's head is its
    bytes, then the next word's head, as 16 bytes in two words."""
    mask = _clear_bits(once, twice, ntok)
    lo = np.uint64(0)
    hi = np.uint64(0)
    filled = 0
    for i in range(ntok - 1, -1, -1):
        m = min(tok_e[i] - tok_s[i], HEAD)
        w_lo, w_hi = _load16(buf, tok_s[i])
        # Prepend the word's m bytes (little-endian: byte k at bits 8k of lo, then hi);
        # no shift by 64 bits, which LLVM leaves undefined.
        if m == HEAD:
            lo, hi = w_lo, w_hi
        elif m >= 8:
            lo, hi = w_lo, (lo << np.uint64(8 * m - 64)) | (w_hi & _low_bytes(m - 8))
        elif m > 0:
            hi = (hi << np.uint64(8 * m)) | (lo >> np.uint64(64 - 8 * m))
            lo = (lo << np.uint64(8 * m)) | (w_lo & _low_bytes(m))
        filled = min(filled + m, HEAD)
        bit_at[i] = -1
        if filled == HEAD:
            bit_at[i] = _see(once, twice, mix64(lo + hi * GOLDEN_GAMMA), mask)
    for i in range(ntok):
        lone[i] = bit_at[i] >= 0 and not _seen_twice(twice, bit_at[i])


@leaf
def _load16(buf, a):
    """buf[a : a + 16] as two little-endian words, zeros past the end (one 8-byte load
    each where 16 bytes are there: LLVM merges the shifted byte loads)."""
    lo = np.uint64(0)
    hi = np.uint64(0)
    if a + 16 <= buf.shape[0]:
        for k in range(8):
            lo |= np.uint64(buf[a + k]) << np.uint64(8 * k)
            hi |= np.uint64(buf[a + 8 + k]) << np.uint64(8 * k)
        return lo, hi
    for k in range(min(buf.shape[0] - a, 16)):
        if k < 8:
            lo |= np.uint64(buf[a + k]) << np.uint64(8 * k)
        else:
            hi |= np.uint64(buf[a + k]) << np.uint64(8 * k - 64)
    return lo, hi


@leaf
def _low_bytes(m):
    """A mask of the low m bytes, 0 <= m < 8."""
    return (np.uint64(1) << np.uint64(8 * m)) - np.uint64(1)


@leaf
def _repeating(live, n_live, n, by_word, once, twice, bit_at):
    """Keeps the live places whose n-gram key (as the top count hashes it) is seen at
    least twice among them by a bitmap (a collision keeps a place); returns how many."""
    mask = _clear_bits(once, twice, n_live)
    step = _step(n)
    for p in range(n_live):
        i = live[p]
        bit_at[p] = _see(once, twice, mix64(by_word[i + n] - by_word[i] * step), mask)
    kept = 0
    for p in range(n_live):
        if _seen_twice(twice, bit_at[p]):
            live[kept] = live[p]
            kept += 1
    return kept


@leaf
def _step(n):
    """GOLDEN_GAMMA ** n: what the word-key prefix hash multiplies by per n words."""
    step = np.uint64(1)
    for _ in range(n):
        step *= GOLDEN_GAMMA
    return step


@leaf
def _clear_bits(once, twice, n_items):
    """Empties bitmaps of 16 bits per item (of the arrays' capacity); returns the bit mask."""
    words = table_capacity(n_items) // 8
    for w in range(words):
        once[w] = 0
        twice[w] = 0
    return words * 64 - 1


@leaf
def _see(once, twice, h, mask):
    """Marks hash h's bit seen (twice if it was seen); returns the bit."""
    b = np.int64(h & np.uint64(mask))
    w = b >> 6
    m = np.uint64(1) << np.uint64(b & 63)
    if once[w] & m:
        twice[w] |= m
    else:
        once[w] |= m
    return b


@leaf
def _seen_twice(twice, b):
    return (twice[b >> 6] >> np.uint64(b & 63)) & np.uint64(1) != 0


@leaf
def _lone(lone, at, i, n):
    """Whether the n-gram at word i can equal no other: a lone head, and HEAD bytes long."""
    return lone[i] and at[i + n] - at[i] >= HEAD


@leaf
def _clear(keys, n_items):
    """Empties the first table_capacity(n_items) slots of ``keys`` and returns that
    capacity (a loop, not a slice assignment, whose shape checks cost compile time)."""
    cap = table_capacity(n_items)
    for s in range(cap):
        keys[s] = 0
    return cap
