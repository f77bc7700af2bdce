"""What the raw bytes of JSON lines hold, measured before any parser sees them.

One linear pass over a block in native code, run on the prefetch thread (it releases the
GIL), so it costs a fraction of the parse it protects. It finds, per line:

* **Nesting.** Arrow's JSON parser recurses once per level and builds one nested type
  per level: a line nested 5,000 deep overflows its stack (SIGSEGV, the whole process
  dies, ``--strict`` included), and 2,000 deep already costs over a gigabyte and seconds
  for a 4 KB line. Lines deeper than ``MAX_DEPTH`` are quarantined unparsed (``too-deep``).
* **Fields.** Arrow gives every field name (nested ones by their path) of the lines it
  parses together a column, and every object a slot in each column of its path, a null
  where it lacks that field. One 5.5 MB line of 300,000 keys cost 3.8 GB; 4,000 small
  lines of 25 keys each, none shared, 5.8 GB for a 1.4 MB block. So lines are parsed in
  *groups* that bring at most ``MAX_FIELDS`` distinct fields and ``MAX_NULLS`` such null
  slots; a line over either bound alone is quarantined unparsed (``too-many-fields``).
  Uniform lines never come near the bounds: a 4 MB block of them is one group.
* **Odd lines.** A line is one JSON object (RFC 8259) alone on its line. Arrow reads more
  than that: several objects on one line (two objects parted by a lone ``\\r``, a file
  with ``\\r`` line ends), an object over several lines, ``NaN`` and ``Infinity``, a
  byte-order mark where its buffer starts. Its rows would then not be the reader's
  lines, and what it keeps would depend on where a block starts. A block with such a
  line goes to the reader's line-by-line path, where orjson judges each line.

Escaped names count as written (``"\\u0069d"`` and ``"id"`` twice): the bounds can only be
met sooner.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros  # LLVM's cttz

from pipeline.compile.jit import njit
from pipeline.kernels.mixing import FNV_PRIME, fnv1a, mix64, mix64_nonzero

# Real corpora nest a few levels (C4: 1; RedPajama's meta: 2-3; chat trees rarely past
# 10). The bound is set by what must read the documents back: Parquet readers refuse a
# schema nested past 100 levels, and a JSON array takes two of them (list, element), so
# a kept document nested 100 deep would be written and then unreadable. 40 keeps the
# worst case (arrays all the way down) at 81. Arrow's parse cost grows quadratically with
# depth and its stack runs out in the thousands.
MAX_DEPTH = 40

# Real documents bring tens of fields (C4: 3, web crawls with metadata: 10-50). Arrow
# costs about 3 KB per distinct field and 14 bytes per null slot while it parses, so a
# group's worst case is some 12 MB and 60 MB: memory stays a few blocks per worker.
MAX_FIELDS = 4096
MAX_NULLS = 1 << 22

# How the scan marks a line it quarantines unparsed (``Scan.kinds``).
TOO_DEEP, TOO_MANY_FIELDS = 1, 2

# Bit tricks that test 8 bytes at once (see string_end).
_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(ord('"') * 0x0101010101010101)
_NEWLINES = np.uint64(ord("\n") * 0x0101010101010101)
_ZERO, _ONE = np.uint64(0), np.uint64(1)
QUOTE, BACKSLASH, NEWLINE, COMMA, COLON = ord('"'), ord("\\"), ord("\n"), ord(","), ord(":")
OPENERS, CLOSERS = (ord("{"), ord("[")), (ord("}"), ord("]"))
SPACE, TAB, CR = ord(" "), ord("\t"), ord("\r")
_NAN, _INFINITY = ord("N"), ord("I")  # no valid JSON outside a string holds these letters

# Paths of objects, hashed: the root's, the step into an array's elements, and tags that
# keep a path's table entry apart from the entries of the fields under it.
_ROOT, _ELEMENTS = np.uint64(0x2545F4914F6CDD1D), np.uint64(0x9E3779B97F4A7C15)
_PATH_TAG, _FIELD_TAG = np.uint64(0x5851F42D4C957F2D), np.uint64(0x14057B7EF767814F)


class Scan(NamedTuple):
    """What ``scan_lines`` found in a block (lines are 0-based, counted from its start)."""

    flagged: np.ndarray  # lines quarantined unparsed
    kinds: np.ndarray  # TOO_DEEP or TOO_MANY_FIELDS, one per flagged line
    newlines: int
    odd_lines: int  # lines that are not one object alone on their line
    groups: np.ndarray  # (byte offset, line) where each group of lines to parse together starts


def scan_lines(block, limit: int = MAX_DEPTH, max_fields: int = MAX_FIELDS, max_nulls: int = MAX_NULLS) -> Scan:
    """Scan ``block`` (bytes or a memoryview of them); see the module's docstring.
    Brackets, commas and names inside strings do not count."""
    data = np.frombuffer(block, dtype=np.uint8)
    words = np.frombuffer(block, dtype=np.uint64, count=len(block) // 8)
    table = np.zeros(1 << int(4 * max_fields).bit_length(), np.uint64)  # load at most 1/2
    # Room for every line there could be to flag, and every group: a flagged line takes at
    # least ``least`` bytes, and so do two groups together (memory is only used where
    # written: a few entries, if any). Arrays grown in the loop cost it 5x.
    least = min(limit, max_fields, math.isqrt(max_nulls)) + 1
    flagged = np.empty((len(block) // least + 1, 2), np.int64)
    groups = np.empty((3 * len(block) // least + 3, 2), np.int64)
    n_flagged, newlines, odd, n_groups = _scan(data, words, limit, max_fields, max_nulls, table, flagged, groups)
    flagged, groups = flagged[:n_flagged].copy(), groups[:n_groups].copy()
    return Scan(flagged[:, 0].copy(), flagged[:, 1].copy(), newlines, odd, groups)


def too_deep_lines(block, limit: int = MAX_DEPTH) -> np.ndarray:
    scan = scan_lines(block, limit)
    return scan.flagged[scan.kinds == TOO_DEEP]


@njit(inline="always")
def _has_zero_byte(word):
    """The high bit of every byte of ``word`` that is 0 is set (a byte just above a 0 may
    be flagged too: candidates are checked)."""
    return (word - _ONES) & ~word & _HIGH


@njit(inline="always")
def _is_escaped(data, i):
    """Whether the byte at ``i`` follows an odd run of backslashes (inside a string,
    whose opening quote ends the run)."""
    k = i - 1
    while data[k] == BACKSLASH:
        k -= 1
    return (i - 1 - k) % 2 == 1


@njit(inline="always")
def string_end(data, words, i):
    """Position of the quote closing the string whose body starts at ``i``, or of the
    newline that cuts it short (a raw newline is invalid JSON; the line is broken anyway).

    String bodies are most of a document's bytes, so they are read by aligned 8-byte
    words (``words[k]`` is ``data[8k:8k + 8]``; ``& 7`` and ``>> 3`` are ``% 8`` and
    ``// 8``): two words with neither a quote nor a newline are skipped at once, and in
    other words only the candidate bytes are looked at (escaped quotes, as in HTML, are
    common).
    """
    n = len(data)
    while i < n:
        if (i & 15) == 0 and i + 16 <= n and (_candidates(words[i >> 3]) | _candidates(words[(i >> 3) + 1])) == _ZERO:
            i += 16
        elif (i & 7) == 0 and i + 8 <= n:
            candidates = _candidates(words[i >> 3])
            while candidates != _ZERO:
                j = i + (np.int64(trailing_zeros(candidates)) >> 3)
                if _ends_string(data, j):
                    return j
                candidates &= candidates - _ONE
            i += 8
        elif _ends_string(data, i):
            return i
        else:
            i += 1
    return n


@njit(inline="always")
def _candidates(word):
    """The high bit of each byte of ``word`` that may be a quote or a newline."""
    return _has_zero_byte(word ^ _QUOTES) | _has_zero_byte(word ^ _NEWLINES)


@njit(inline="always")
def _ends_string(data, i):
    c = data[i]
    return c == NEWLINE or (c == QUOTE and not _is_escaped(data, i))


@njit(inline="always")
def _slot(table, key):
    """Where ``key`` is in the open-addressing table, or the empty slot it would take."""
    mask = np.uint64(len(table) - 1)
    i = key & mask
    while table[i] != _ZERO and table[i] != key:
        i = (i + _ONE) & mask
    return i


@njit(nogil=True)
def _scan(data, words, limit, max_fields, max_nulls, table, flagged, groups):
    """See ``scan_lines``. The table holds each object path and each (path, name) of the
    group so far; ``fields``/``objects`` count, per path, its names and its objects, whose
    product summed over paths is the group's slots, ``slots - named`` its nulls. A line
    that takes the group past a bound is scanned again as the first of a new group; one
    past a bound alone is flagged."""
    n = len(data)
    fields = np.zeros(len(table), np.int64)
    objects = np.zeros(len(table), np.int64)
    is_object = np.zeros(limit + 2, np.bool_)  # per open container (index: its depth)
    wants_name = np.zeros(limit + 2, np.bool_)
    path = np.zeros(limit + 2, np.uint64)
    slot = np.zeros(limit + 2, np.uint64)  # its path's table entry
    name = np.zeros(limit + 2, np.uint64)  # hash of its latest field name
    groups[0, 0] = groups[0, 1] = 0
    n_flagged, n_groups, odd_lines = 0, 1, 0
    line = line_start = group_line = depth = kind = 0
    odd = opened = False
    counting = True
    n_names = n_paths = slots = named = 0
    i = 0
    while i <= n:
        c = data[i] if i < n else NEWLINE  # the end closes a last line without a newline
        over = False
        if c == QUOTE:
            end = string_end(data, words, i + 1)
            if depth == 0:
                odd = True
            elif counting and is_object[depth] and wants_name[depth]:
                wants_name[depth] = False
                name[depth] = fnv1a(data, i + 1, end)
                named += 1
                key = mix64_nonzero(mix64(path[depth] * FNV_PRIME + name[depth]) ^ _FIELD_TAG)
                j = _slot(table, key)
                if table[j] == _ZERO:
                    table[j] = key
                    n_names += 1
                    fields[slot[depth]] += 1
                    slots += objects[slot[depth]]
                    over = True
            i = end if end >= n or data[end] == NEWLINE else end + 1  # a newline ends the line below
        elif c == NEWLINE:
            if i == n and line_start == n:
                break
            if odd or depth > 0:
                odd_lines += 1
            if kind:
                flagged[n_flagged, 0], flagged[n_flagged, 1] = line, kind
                n_flagged += 1
            if i == n:
                break
            line += 1
            line_start = i + 1
            if not counting:  # this line went past a bound alone: the next one starts afresh
                table[:] = _ZERO
                n_names = n_paths = slots = named = 0
                group_line = line
                groups[n_groups, 0], groups[n_groups, 1] = line_start, line
                n_groups += 1
            depth = kind = 0
            odd = opened = False
            counting = True
            i += 1
        elif c == OPENERS[0] or c == OPENERS[1]:
            depth += 1
            if depth == 1:
                odd = odd or opened or c == OPENERS[1]
                opened = True
            if depth > limit:
                kind = TOO_DEEP
                counting = False
            elif counting:
                if depth == 1:
                    path[1] = _ROOT
                else:
                    step = name[depth - 1] if is_object[depth - 1] else _ELEMENTS
                    path[depth] = mix64(path[depth - 1] * FNV_PRIME + step)
                is_object[depth] = wants_name[depth] = c == OPENERS[0]
                if c == OPENERS[0]:
                    key = mix64_nonzero(path[depth] ^ _PATH_TAG)
                    j = _slot(table, key)
                    if table[j] == _ZERO:
                        table[j] = key
                        fields[j] = objects[j] = 0
                        n_paths += 1
                    slot[depth] = j
                    objects[j] += 1
                    slots += fields[j]
                    over = True
            i += 1
        elif c == CLOSERS[0] or c == CLOSERS[1]:
            odd = odd or depth == 0
            depth = max(depth - 1, 0)
            i += 1
        else:
            if depth == 0:
                odd = odd or not (c == SPACE or c == TAB or c == CR)
            elif c == COMMA:
                if counting and depth <= limit and is_object[depth]:
                    wants_name[depth] = True
            elif c == _NAN or c == _INFINITY:
                odd = True
            i += 1
        if over and (n_names > max_fields or n_paths > max_fields or slots - named > max_nulls):
            if line == group_line:  # over a bound alone
                kind = TOO_MANY_FIELDS  # (a line too deep counts no more)
                counting = False
            else:  # the group ends before this line, which is scanned again as the next one's first
                table[:] = _ZERO
                n_names = n_paths = slots = named = 0
                group_line = line
                groups[n_groups, 0], groups[n_groups, 1] = line_start, line
                n_groups += 1
                i = line_start
                depth = kind = 0
                odd = opened = False
    return n_flagged, line, odd_lines, n_groups
