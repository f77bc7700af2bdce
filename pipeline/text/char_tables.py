"""Character classes and word-splitting tables, built once per process from
``char_tables_data``: the quality kernels split words with them as datatrove and spaCy
do, and ``url_filter``'s bad-words match reads the same ``WORD`` class (Python's ``\\w``).

``CHAR_FLAGS[cp]`` holds the classes of code point ``cp`` (bits named in ``FLAGS``), so
a kernel answers "is this a letter / space / spaCy prefix?" with one array read instead
of a regex. Byte strings that must be recognised whole (spaCy special cases, units and
currencies after a number) go into small open-addressing hash tables keyed by FNV-1a,
with their bytes kept for verification so a hash collision can never change a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import fnv1a_nonzero, fnv1a_nonzero_rows
from pipeline.text import char_tables_data

_F = char_tables_data.FLAGS
SPACE = _F["SPACE"]
ALPHA = _F["ALPHA"]
ALNUM = _F["ALNUM"]
DT_PUNCT = _F["DT_PUNCT"]
DT_TERM = _F["DT_TERM"]
SP_ALPHA = _F["SP_ALPHA"]
SP_LOWER = _F["SP_LOWER"]
SP_UPPER = _F["SP_UPPER"]
SP_PREFIX = _F["SP_PREFIX"]
SP_SUFFIX = _F["SP_SUFFIX"]
SP_DOT_AFTER = _F["SP_DOT_AFTER"]
SP_QUOTE = _F["SP_QUOTE"]
SP_ICON = _F["SP_ICON"]
UNI_P = _F["UNI_P"]
SENT_PUNCT = _F["SENT_PUNCT"]
DECIMAL = _F["DECIMAL"]
LINEBREAK = _F["LINEBREAK"]
WORD = _F["WORD"]
# Letters of scripts written without spaces between words (set here, not generated:
# it is our policy, not a copy of a reference). See rules.py, no_space_script_min_frac.
NO_SPACE_SCRIPT = 1 << 20
NO_SPACE_RANGES = [
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B-G
]


def char_flags() -> np.ndarray:
    runs = np.array(char_tables_data.CHAR_RUNS, dtype=np.int64)
    starts = runs[:, 0]
    lengths = np.diff(np.append(starts, 0x110000))
    flags = np.repeat(runs[:, 1].astype(np.uint32), lengths)
    for lo, hi in NO_SPACE_RANGES:
        flags[lo : hi + 1] |= np.uint32(NO_SPACE_SCRIPT)
    return flags


@dataclass(frozen=True)
class ByteSet:
    """A set of byte strings for numba: ``keys`` (hash table), ``slot_item`` (item per slot,
    -1 empty), ``item_off``/``blob`` (the strings), ``max_len`` (longest, in bytes)."""

    keys: np.ndarray
    slot_item: np.ndarray
    item_off: np.ndarray
    blob: np.ndarray
    max_len: int


def byte_set(strings: list[bytes]) -> ByteSet:
    size = 1
    while size < 2 * max(len(strings), 1):
        size *= 2
    keys = np.zeros(size, np.uint64)
    slot_item = np.full(size, -1, np.int64)
    blob = np.frombuffer(b"".join(strings), np.uint8).copy() if strings else np.zeros(0, np.uint8)
    item_off = np.zeros(len(strings) + 1, np.int64)
    item_off[1:] = np.cumsum([len(s) for s in strings])
    for i, h in enumerate(fnv1a_nonzero_rows(blob, item_off)):
        slot = int(h) & (size - 1)
        while slot_item[slot] != -1:
            slot = (slot + 1) & (size - 1)
        keys[slot] = h
        slot_item[slot] = i
    return ByteSet(keys, slot_item, item_off, blob, max((len(s) for s in strings), default=0))


@njit(_nrt=False)
def byte_set_find(keys, slot_item, item_off, blob, buf, start, end):
    """Index of buf[start:end] in the set, or -1."""
    h = fnv1a_nonzero(buf, start, end)
    mask = keys.shape[0] - 1
    slot = np.int64(h & np.uint64(mask))
    n = end - start
    while slot_item[slot] != -1:
        if keys[slot] == h:
            item = slot_item[slot]
            a = item_off[item]
            if item_off[item + 1] - a == n:
                same = True
                for k in range(n):
                    if blob[a + k] != buf[start + k]:
                        same = False
                        break
                if same:
                    return item
        slot = (slot + 1) & mask
    return -1


@njit(_nrt=False)
def sketch_slot(buf, s, e):
    """The bit of buf[s:e] (not empty) in a 64K-bit sketch of a set of strings, from its
    length and first, second and last bytes: one load tells most words they are not in
    the set, without hashing them. No product overflows, so Python builds the same."""
    n = min(e - s, 63)
    second = np.int64(buf[s + 1]) if n > 1 else 0
    x = (np.int64(buf[s]) * 0x9E37) ^ (second * 0x85EB) ^ (np.int64(buf[e - 1]) * 0xC2B2) ^ (n * 0x27D4)
    return ((x * 0x9E3779B1) >> 7) & 0xFFFF


def sketch(strings: list[bytes]) -> np.ndarray:
    bits = np.zeros(1 << 16, np.bool_)
    for item in strings:
        bits[sketch_slot.py_func(np.frombuffer(item, np.uint8), 0, len(item))] = True
    return bits


@dataclass(frozen=True)
class Tables:
    flags: np.ndarray
    specials: ByteSet
    special_sketch: np.ndarray  # sketch() of the specials
    # Byte lengths of each special case's tokens: pieces of special i are
    # special_piece_len[special_piece_off[i]:special_piece_off[i + 1]].
    special_piece_off: np.ndarray
    special_piece_len: np.ndarray
    # For the specials spaCy re-merges after splitting ("Co.Co" -> "Co." "Co"): the byte
    # lengths of the tokens they split into without special cases (none for the others).
    special_pattern_off: np.ndarray
    special_pattern_len: np.ndarray
    # First bytes of those re-merged specials, and their most tokens.
    merge_first_byte: np.ndarray
    merge_max_tokens: int
    # Units and currencies spaCy splits off after a digit ("5km", "10$").
    after_digit: ByteSet


_TABLES: Tables | None = None


def tables() -> Tables:
    """The process-wide tables (built on first use, about 50 ms)."""
    global _TABLES
    if _TABLES is None:
        specials = [(k.encode(), [p.encode() for p in v]) for k, v, _ in char_tables_data.SPECIALS]
        # Re-merged specials; _merge_specials rewrites tokens in place, so it leaves out
        # the three that grow ("°C." from "°" "C." to "°" "C" "."), a context-free miss.
        patterns = [[p.encode() for p in m] if m and len(v) <= len(m) else [] for _, v, m in char_tables_data.SPECIALS]
        piece_off = np.zeros(len(specials) + 1, np.int64)
        piece_off[1:] = np.cumsum([len(v) for _, v in specials])
        piece_len = np.array([len(p) for _, v in specials for p in v], np.int64)
        pattern_off = np.zeros(len(patterns) + 1, np.int64)
        pattern_off[1:] = np.cumsum([len(m) for m in patterns])
        pattern_len = np.array([len(p) for m in patterns for p in m], np.int64)
        first_byte = np.zeros(256, np.bool_)
        for (k, _), m in zip(specials, patterns):
            if m:
                first_byte[k[0]] = True
        after_digit = sorted({u.encode() for u in char_tables_data.UNITS + char_tables_data.CURRENCY if u})
        _TABLES = Tables(
            flags=char_flags(),
            specials=byte_set([k for k, _ in specials]),
            special_sketch=sketch([k for k, _ in specials]),
            special_piece_off=piece_off,
            special_piece_len=piece_len,
            special_pattern_off=pattern_off,
            special_pattern_len=pattern_len,
            merge_first_byte=first_byte,
            merge_max_tokens=max(len(m) for m in patterns),
            after_digit=byte_set(after_digit),
        )
    return _TABLES


class KernelTables(NamedTuple):
    """The tables as the kernels take them (one argument, named ``T`` there): a named
    tuple of arrays and ints, which numba passes without reference counting in leaves.
    The byte sets are spread into their arrays for ``byte_set_find``."""

    flags: np.ndarray
    special_keys: np.ndarray
    special_slot_item: np.ndarray
    special_item_off: np.ndarray
    special_blob: np.ndarray
    special_max_len: int
    special_sketch: np.ndarray
    special_piece_off: np.ndarray
    special_piece_len: np.ndarray
    special_pattern_off: np.ndarray
    special_pattern_len: np.ndarray
    merge_first_byte: np.ndarray
    merge_max_tokens: int
    after_digit_keys: np.ndarray
    after_digit_slot_item: np.ndarray
    after_digit_item_off: np.ndarray
    after_digit_blob: np.ndarray
    after_digit_max_len: int


def kernel_tables(built: Tables) -> KernelTables:
    return KernelTables(
        built.flags,
        built.specials.keys,
        built.specials.slot_item,
        built.specials.item_off,
        built.specials.blob,
        built.specials.max_len,
        built.special_sketch,
        built.special_piece_off,
        built.special_piece_len,
        built.special_pattern_off,
        built.special_pattern_len,
        built.merge_first_byte,
        built.merge_max_tokens,
        built.after_digit.keys,
        built.after_digit.slot_item,
        built.after_digit.item_off,
        built.after_digit.blob,
        built.after_digit.max_len,
    )
