"""C4's bad-words match as one numba pass over a batch's UTF-8 bytes.

C4 (and datatrove's ``C4BadWordsFilter``) search ``text.lower()`` with
``(?:\\W|^)(w1|w2|...)(?:\\W|$)``: an entry matches where it is flanked by non-word
characters (Python's ``\\W``) or the ends of the text. An entry that starts with a word
character can only start where a maximal run of word characters does, so the kernel
walks the text once, hashes each lowercased run as it goes and looks the hash up among
the entries' first runs; a hit is verified code point by code point against each entry
with that first run (a phrase, ``g-spot``, ``2 girls 1 cup``), then checked for a non-word
character or the end after it. An entry that starts with a non-word character (``🖕``)
is tried at each such character preceded by a non-word character or the start. A
hash collision can only cost a verification, never change a result.

Lowercasing is Python's, one code point to one (from ``str.lower`` of every code point
at once); the two context rules of ``str.lower`` on a whole text are not followed: ``İ``
(U+0130, which lowers to two code points) stays itself, and a final ``Σ`` lowers to
``σ``, not ``ς``. Neither touches an ASCII entry.
"""

from __future__ import annotations

import functools

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import FNV_OFFSET, FNV_PRIME, mix64_nonzero
from pipeline.kernels.utf8 import decode, prev_start
from pipeline.text.char_tables import WORD, tables

N_CODE_POINTS = 0x110000


@functools.cache
def case_tables() -> tuple[np.ndarray, np.ndarray]:
    """(lower[cp], is_word[cp]): Python's one-to-one lowercase of each code point, and
    whether that lowercase is a ``\\w`` character (about 40 ms, once per process)."""
    cps = np.arange(N_CODE_POINTS, dtype=np.uint32)
    ok = (cps < 0xD800) | (cps > 0xDFFF)  # surrogates: not text
    ok[0x130] = False  # 'İ'.lower() is two code points
    text = cps[ok].astype("<u4").tobytes().decode("utf-32-le")
    lowered = text.lower()
    if len(lowered) != len(text):
        raise RuntimeError("str.lower() changed the number of code points of a single code point")
    lower = np.arange(N_CODE_POINTS, dtype=np.int32)
    lower[ok] = np.frombuffer(lowered.encode("utf-32-le"), "<u4").astype(np.int32)
    is_word = (tables().flags[lower] & np.uint32(WORD)) != 0
    return lower, is_word


@njit
def _run_key(cps):
    h = FNV_OFFSET
    for c in cps:
        h = (h ^ np.uint64(c)) * FNV_PRIME
    return mix64_nonzero(h)


class EntryTable:
    """The entries, lowercased, as code points; a hash table from each first word run to
    the entries that start with it; and the entries that start with a non-word character."""

    def __init__(self, entries: list[str]):
        lower, is_word = case_tables()
        cps = [np.array([lower[ord(c)] for c in entry], np.int64) for entry in entries]
        self.entries = entries
        self.ent_off = np.zeros(len(entries) + 1, np.int64)
        self.ent_off[1:] = np.cumsum([len(c) for c in cps])
        self.ent_cp = np.concatenate(cps) if cps else np.zeros(0, np.int64)
        by_key: dict[int, list[int]] = {}
        lead: list[int] = []
        for i, c in enumerate(cps):
            if len(c) == 0:
                continue
            if not is_word[c[0]]:
                lead.append(i)
                continue
            run = 0
            while run < len(c) and is_word[c[run]]:
                run += 1
            by_key.setdefault(int(_run_key(c[:run])), []).append(i)
        size = 64
        while size < 8 * len(by_key):  # sparse: a word not in the table mostly meets an empty slot
            size *= 2
        self.keys = np.zeros(size, np.uint64)
        self.slot_lo = np.zeros(size, np.int64)
        self.slot_hi = np.zeros(size, np.int64)
        order: list[int] = []
        for key, items in by_key.items():
            slot = key & (size - 1)
            while self.keys[slot] != 0:
                slot = (slot + 1) & (size - 1)
            self.keys[slot] = key
            self.slot_lo[slot], self.slot_hi[slot] = len(order), len(order) + len(items)
            order.extend(items)
        self.order = np.array(order, np.int64)
        self.lead = np.array(lead, np.int64)
        self.lead_cp = np.array([cps[i][0] for i in lead], np.int64)

    def find(self, data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Per document of (data, offsets): the index of the first entry found, or -1."""
        lower, is_word = case_tables()
        return find_entries(
            data,
            offsets,
            lower,
            is_word,
            self.keys,
            self.slot_lo,
            self.slot_hi,
            self.order,
            self.ent_cp,
            self.ent_off,
            self.lead,
            self.lead_cp,
        )


@njit(nogil=True, _nrt=False)
def _matches(data, start, end, lower, is_word, ent_cp, a, b):
    """Whether entry code points ent_cp[a:b] are the lowercase text at data[start:], with a
    non-word character or the end after them."""
    j = start
    for k in range(a, b):
        if j >= end:
            return False
        cp, n = decode(data, j)
        if lower[cp] != ent_cp[k]:
            return False
        j += n
    if j < end:
        cp, n = decode(data, j)
        if is_word[cp]:
            return False
    return True


@njit(nogil=True, _nrt=False)
def _run_hit(data, start, end, h, keys, slot_lo, slot_hi, order, lower, is_word, ent_cp, ent_off):
    key = mix64_nonzero(h)
    mask = keys.shape[0] - 1
    slot = np.int64(key & np.uint64(mask))
    while keys[slot] != 0:
        if keys[slot] == key:
            for o in range(slot_lo[slot], slot_hi[slot]):
                e = order[o]
                if _matches(data, start, end, lower, is_word, ent_cp, ent_off[e], ent_off[e + 1]):
                    return e
            return -1
        slot = (slot + 1) & mask
    return -1


@njit(nogil=True)
def find_entries(data, offsets, lower, is_word, keys, slot_lo, slot_hi, order, ent_cp, ent_off, lead, lead_cp):
    n_docs = offsets.shape[0] - 1
    out = np.full(n_docs, -1, np.int64)
    mask = np.uint64(keys.shape[0] - 1)
    # Which ASCII characters start an entry that starts with a non-word character (any
    # non-ASCII one is tried): most characters then cost one read, not a call.
    lead_ascii = np.zeros(128, np.bool_)
    any_lead_non_ascii = False
    for c in lead_cp:
        if c < 128:
            lead_ascii[c] = True
        else:
            any_lead_non_ascii = True
    for d in range(n_docs):
        start = offsets[d]
        end = offsets[d + 1]
        i = start
        in_run = False
        run_start = start
        h = FNV_OFFSET
        found = -1
        while i < end:
            cp = np.int64(data[i])
            n = 1
            if cp >= 0x80:
                cp, n = decode(data, i)
            if is_word[cp]:
                if not in_run:
                    in_run = True
                    run_start = i
                    h = FNV_OFFSET
                h = (h ^ np.uint64(lower[cp])) * FNV_PRIME
            else:
                if in_run:
                    in_run = False
                    if keys[np.int64(mix64_nonzero(h) & mask)] != 0:  # most words stop here
                        found = _run_hit(
                            data, run_start, end, h, keys, slot_lo, slot_hi, order, lower, is_word, ent_cp, ent_off
                        )
                        if found >= 0:
                            break
                if (lead_ascii[cp] if cp < 0x80 else any_lead_non_ascii) and (
                    i == start or not is_word[_before(data, i)]
                ):
                    found = _lead_hit(data, i, end, lower, is_word, ent_cp, ent_off, lead, lead_cp)
                    if found >= 0:
                        break
            i += n
        if found < 0 and in_run:
            found = _run_hit(data, run_start, end, h, keys, slot_lo, slot_hi, order, lower, is_word, ent_cp, ent_off)
        out[d] = found
    return out


@njit(nogil=True, _nrt=False)
def _before(data, i):
    """The code point that ends just before byte i."""
    cp, _ = decode(data, prev_start(data, i))
    return cp


@njit(nogil=True, _nrt=False)
def _lead_hit(data, i, end, lower, is_word, ent_cp, ent_off, lead, lead_cp):
    """An entry starting with a non-word character, at data[i] (the caller checked that a
    non-word character or the start comes before it)."""
    cp, n = decode(data, i)
    c = lower[cp]
    for k in range(lead.shape[0]):
        if lead_cp[k] == c:
            e = lead[k]
            if _matches(data, i, end, lower, is_word, ent_cp, ent_off[e], ent_off[e + 1]):
                return e
    return -1
