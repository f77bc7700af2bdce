"""Documents cut into paragraphs (or lines), hashed, and put back together without some.

One kernel owns the cutting, so the map phase (which hashes) and the filter phase (which
removes) always agree on what paragraph ``k`` of a document is.

A *line* is the bytes up to a ``\\n``; it is *blank* when it holds only spaces, tabs,
``\\r``, ``\\f`` or ``\\v``. A *paragraph* is a maximal run of non-blank lines
(``unit = "paragraph"``), or one non-blank line (``unit = "line"``: dolma's and CCNet's
"paragraph", the right unit for text extracted one paragraph a line). Blank lines are
never units: they are separators. ``unit = "auto"`` decides per document: paragraphs
when a blank line separates two of its non-blank lines (the writer marks paragraphs that
way), lines when none does (C4 and CCNet put one paragraph on each line and no blank
line anywhere, so blocks would make the whole page one unit).

Each unit has two byte spans in its document:

* its *segment*, which tiles the document: from the start of its first line (the start of
  the document for the first unit, so leading blank lines go with it) to the start of the
  next unit's first line (the end of the document for the last), so the separator after
  it is its own; removing a unit removes its segment;
* its *content*, the segment without leading and trailing whitespace: what is hashed
  (64 bits, eight bytes a step through the SplitMix64 finaliser) and counted (code points).

A unit is *short* when its content has fewer than ``min_chars`` code points: never hashed
and never counted (see ``stages.paragraph_dedup`` for what happens to it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.kernels.buffers import string_array, string_buffers
from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64


@njit(_nrt=False)
def _space(b):
    return b == 32 or b == 9 or b == 13 or b == 12 or b == 11


@njit(_nrt=False)
def _hash(data, start, end):
    """64 bits of data[start:end], eight bytes a step: each little-endian word is mixed
    into the state by the SplitMix64 finaliser (``mix64``), the length first."""
    h = mix64(np.uint64(end - start) ^ GOLDEN_GAMMA)
    i = start
    while i + 8 <= end:
        w = np.uint64(0)
        for j in range(8):
            w |= np.uint64(data[i + j]) << np.uint64(8 * j)
        h = mix64(h ^ w) + GOLDEN_GAMMA
        i += 8
    if i < end:
        w = np.uint64(0)
        for j in range(end - i):
            w |= np.uint64(data[i + j]) << np.uint64(8 * j)
        h = mix64(h ^ w) + GOLDEN_GAMMA
    return mix64(h)


UNIT_MODES = ("paragraph", "line", "auto")  # the kernel's ``mode`` is an index into this


@njit(inline="always")
def _line_at(data, pos, e):
    """The line starting at ``pos`` (before ``e``): where it ends (its newline, or ``e``),
    its first non-space byte (its end when it is blank) and its code points, counted in
    the same pass as the newline is looked for."""
    le = pos
    chars = 0
    while le < e:
        b = data[le]
        if b == 10:
            break
        chars += (b & 0xC0) != 0x80
        le += 1
    fs = pos
    while fs < le and _space(data[fs]):
        fs += 1
    return le, fs, chars


@njit(_nrt=False)
def _blank_separated(data, s, e):
    """Whether a blank line lies between two non-blank lines of data[s:e]."""
    seen_text = False  # a non-blank line before the current one
    blank_after_text = False
    pos = s
    while pos < e:
        le, fs, _ = _line_at(data, pos, e)
        if fs == le:
            blank_after_text = seen_text
        elif blank_after_text:
            return True
        else:
            seen_text = True
        pos = le + 1
    return False


@njit
def _cut(data, offsets, mode, min_chars, bound, hashed):
    """The units of every document, each with its content's code points, which the scan
    for newlines counts (whitespace is ASCII: a code point a byte), and its hash."""
    n_docs = len(offsets) - 1
    doc = np.empty(bound, np.int64)
    seg = np.empty((bound, 2), np.int64)
    content = np.empty((bound, 2), np.int64)
    chars = np.empty(bound, np.int64)
    n = 0
    for d in range(n_docs):
        s, e = offsets[d], offsets[d + 1]
        by_line = mode == 1 or (mode == 2 and not _blank_separated(data, s, e))
        first = n
        in_para = False
        run = 0  # code points from the current unit's content start to the end of this line
        pos = s
        while pos < e:
            le, fs, line_chars = _line_at(data, pos, e)
            if fs == le:  # a blank line ends a paragraph
                in_para = False
            else:
                lb = le
                while _space(data[lb - 1]):
                    lb -= 1
                if by_line or not in_para:
                    if n > first:
                        seg[n - 1, 1] = pos
                    doc[n] = d
                    seg[n, 0] = s if n == first else pos
                    content[n, 0] = fs
                    n += 1
                    in_para = True
                    run = line_chars - (fs - pos)
                else:
                    run += 1 + line_chars  # the newline before this line, then the line
                content[n - 1, 1] = lb
                chars[n - 1] = run - (le - lb)
            pos = le + 1
        if n > first:
            seg[n - 1, 1] = e
    doc, seg, content, chars = doc[:n], seg[:n], content[:n], chars[:n]
    hashes = np.zeros(n if hashed else 0, np.uint64)
    short = chars < min_chars
    for k in range(len(hashes)):
        if not short[k]:
            hashes[k] = _hash(data, content[k, 0], content[k, 1])
    return doc, seg, content, chars, hashes, short


class Units:
    """The units of a batch of documents, in document order; ``index`` is each unit's
    position within its document (short units included). ``hashes`` (0 for a short
    unit) only when ``hashed``: the filter phase needs none."""

    def __init__(self, texts: pa.Array | pa.ChunkedArray, unit: str, min_chars: int, hashed: bool = True):
        self.type = texts.type
        self.n_docs = len(texts)
        self.data, self.offsets = string_buffers(texts)
        lines = int(np.count_nonzero(self.data[self.offsets[0] : self.offsets[-1]] == 10))  # at most a unit each
        self.doc, self.seg, self.content, self.chars, self.hashes, self.short = _cut(
            self.data, self.offsets, UNIT_MODES.index(unit), min_chars, self.n_docs + lines, hashed
        )
        self.starts = np.searchsorted(self.doc, np.arange(self.n_docs + 1)).astype(np.int64)
        self.index = np.arange(len(self.doc), dtype=np.int64) - self.starts[self.doc]

    def counted_chars(self) -> np.ndarray:
        """Per document: code points of its units that are not short."""
        return np.bincount(self.doc[~self.short], self.chars[~self.short], minlength=self.n_docs).astype(np.int64)

    def rebuild(self, removed: np.ndarray) -> pa.Array:
        """The texts without the ``removed`` units (a bool per unit); see ``_join``."""
        data, offsets = _join(self.data, self.offsets, self.doc, self.seg, self.content, removed)
        if self.type == pa.large_string() or self.type == pa.string():
            like = self.type
        else:
            like = pa.large_string()
        return string_array(data, offsets, like)


@njit(_nrt=False)
def _copy(out, w, data, a, b):
    """``data[a:b]`` into ``out`` at ``w``; the new end. A byte loop, not a slice copy:
    numba's two slice assignments were three quarters of ``_join``'s cold compile (3.0
    CPU-s against 0.7), and the loop runs as fast."""
    for i in range(b - a):
        out[w + i] = data[a + i]
    return w + b - a


@njit
def _join(data, offsets, doc, seg, content, removed):
    """Each document with the segments of its removed units cut out. When its last unit
    is removed, the text ends where the last kept unit's content ends (no dangling
    separator); a document left with no unit is empty. Untouched documents are copied."""
    n_docs = len(offsets) - 1
    out = np.empty(offsets[n_docs] - offsets[0], np.uint8)
    new_offsets = np.zeros(n_docs + 1, np.int64)
    w = 0
    k = 0
    for d in range(n_docs):
        s, e = offsets[d], offsets[d + 1]
        lo = k
        while k < len(doc) and doc[k] == d:
            k += 1
        any_removed = False
        for j in range(lo, k):
            if removed[j]:
                any_removed = True
        if not any_removed:
            w = _copy(out, w, data, s, e)
        else:
            last_kept = -1
            for j in range(lo, k):
                if not removed[j]:
                    last_kept = j
            for j in range(lo, k):
                if removed[j]:
                    continue
                a, b = seg[j, 0], seg[j, 1]
                if j == last_kept and removed[k - 1]:
                    b = content[j, 1]
                w = _copy(out, w, data, a, b)
        new_offsets[d + 1] = w
    return out[:w], new_offsets


@njit
def _with_short(doc, short, hit):
    """``hit`` (removed counted units) plus every short unit whose nearest counted
    neighbours on both sides, in its own document, are both removed."""
    n = len(doc)
    removed = hit.copy()
    before = np.empty(n, np.int8)  # the nearest counted unit before: -1 none, 0 kept, 1 removed
    state, current = -1, -1
    for k in range(n):
        if doc[k] != current:
            state, current = -1, doc[k]
        before[k] = state
        if not short[k]:
            state = 1 if hit[k] else 0
    state, current = -1, -1
    for k in range(n - 1, -1, -1):
        if doc[k] != current:
            state, current = -1, doc[k]
        if short[k]:
            removed[k] = state == 1 and before[k] == 1
        else:
            state = 1 if hit[k] else 0
    return removed


def removed_units(units: Units, hit: np.ndarray) -> np.ndarray:
    """Which units go: the counted ones in ``hit`` and the short ones between two of them."""
    return _with_short(units.doc, units.short, np.asarray(hit, np.bool_))
