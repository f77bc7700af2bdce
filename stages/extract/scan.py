"""One pass over each page's bytes, before any parsing: how deep its tags nest and how
much of its head is control bytes, so a hostile page is dropped before it reaches a parser.

Why a depth check: resiliparse's main-content extraction is quadratic in the DOM's depth
(``<div>`` nested 2,000 deep: 0.26 s; 8,000: 2.5 s; 100,000: minutes), while a real page
nests a few dozen deep. The kernel counts the open elements as an HTML parser would keep
them, roughly: a start tag opens one, its end tag closes it; void elements (``<br>``,
``<img>``), self-closed tags (``<x/>``), elements whose end tag is optional (``<p>``,
``<li>``, ``<td>``: a parser closes them itself, so they cannot nest without a container
the kernel does count) and their end tags are skipped, as are comments, doctypes and the
contents of raw-text elements (``<script>``, ``<style>``, ...). Unclosed ordinary
elements make it an overestimate, never an underestimate of what a parser builds from
the counted tags. It stops at ``limit + 1``: the cost is one read of the bytes, or less.

Why a control-byte count: a body served as ``text/html`` may be an image, a gzip stream
or a PDF. HTML holds almost no bytes below 0x20 other than tab, newline, form feed and
carriage return; random bytes hold 27 of 256 (10.5%). UTF-16 holds NULs everywhere, so
the caller exempts a page whose declared charset or byte-order mark says UTF-16/32.
"""

from __future__ import annotations

import numpy as np

from pipeline.compile.jit import njit
from pipeline.compile.warm_steps import warms

HEAD_BYTES = 8192  # how much of a page's start the control-byte count reads


def _packed(name: str) -> int:
    """A tag name of up to 8 ASCII letters as one integer (the kernel's name key)."""
    key = 0
    for ch in name.encode():
        key = key * 256 + ch
    return key


_VOID = "area base basefont bgsound br col embed frame hr image img input keygen link meta param source track wbr"
_OPTIONAL_END = "body caption colgroup dd dt head html li optgroup option p rb rp rt rtc tbody td tfoot th thead tr"
_RAW_TEXT = "iframe noembed noframes script style textarea title xmp"
UNCOUNTED = np.array(sorted(_packed(n) for n in (_VOID + " " + _OPTIONAL_END).split()), np.int64)
RAW_TEXT = np.array(sorted(_packed(n) for n in _RAW_TEXT.split()), np.int64)


@njit(_nrt=False)
def _is_letter(b):
    return (0x41 <= b <= 0x5A) or (0x61 <= b <= 0x7A)


@njit(_nrt=False)
def _find(data, i, end, b0, b1, b2):
    """The index just past the first ``b0 b1 b2`` (0 for a byte not asked) at or after i."""
    while i < end:
        if data[i] == b0 and (b1 == 0 or (i + 1 < end and data[i + 1] == b1)):
            if b2 == 0 or (i + 2 < end and data[i + 2] == b2):
                return i + 1 + (b1 != 0) + (b2 != 0)
        i += 1
    return end


@njit(_nrt=False)
def _tag_end(data, i, end):
    """The index just past the ``>`` that ends the tag whose attributes start at i (quoted
    values may hold ``>``), and whether the tag closed itself (``/>``)."""
    quote = 0
    while i < end:
        b = data[i]
        if quote:
            if b == quote:
                quote = 0
        elif b == 0x22 or b == 0x27:
            quote = b
        elif b == 0x3E:
            return i + 1, i > 0 and data[i - 1] == 0x2F
        i += 1
    return end, False


@njit(_nrt=False)
def _name(data, i, end):
    """(packed lower-case name, index after it) of the tag name at i; -1 for a name over 8."""
    key = np.int64(0)
    n = 0
    while i < end:
        b = data[i]
        if not (_is_letter(b) or 0x30 <= b <= 0x39 or b == 0x2D or b == 0x3A):
            break
        if 0x41 <= b <= 0x5A:
            b += 0x20
        if n < 8:
            key = key * 256 + b
        n += 1
        i += 1
    return (key if n <= 8 else np.int64(-1)), i


@njit(_nrt=False)
def _member(sorted_keys, key):
    k = np.searchsorted(sorted_keys, key)
    return k < len(sorted_keys) and sorted_keys[k] == key


@njit(_nrt=False)
def _skip_raw_text(data, i, end, key):
    """The index just past ``</name`` (any case) of the raw-text element ``key``, or end."""
    while i < end:
        i = _find(data, i, end, 0x3C, 0x2F, 0)  # "</"
        if i >= end:
            return end
        closing, after = _name(data, i, end)
        if closing == key:
            return after
    return end


@njit(_nrt=False)
def nesting_depth(data, start, end, limit, uncounted, raw_text):
    """(deepest nesting of counted elements in data[start:end], at most limit + 1; the sum
    of every counted element's depth, the work of a walk from each element to the root)."""
    depth = 0
    deepest = 0
    work = 0
    i = start
    while i < end:
        if data[i] != 0x3C:  # '<'
            i += 1
            continue
        if i + 1 >= end:
            break
        b = data[i + 1]
        if b == 0x21:  # '!': a comment, a doctype, CDATA
            if i + 3 < end and data[i + 2] == 0x2D and data[i + 3] == 0x2D:
                i = _find(data, i + 4, end, 0x2D, 0x2D, 0x3E)  # "-->"
            else:
                i = _find(data, i + 2, end, 0x3E, 0, 0)
        elif b == 0x3F:  # '?': a processing instruction
            i = _find(data, i + 2, end, 0x3E, 0, 0)
        elif b == 0x2F and i + 2 < end and _is_letter(data[i + 2]):  # an end tag
            key, i = _name(data, i + 2, end)
            i, _ = _tag_end(data, i, end)
            if depth > 0 and not _member(uncounted, key):
                depth -= 1
        elif _is_letter(b):  # a start tag
            key, i = _name(data, i + 1, end)
            i, self_closed = _tag_end(data, i, end)
            if _member(raw_text, key):
                if not self_closed:
                    i = _skip_raw_text(data, i, end, key)
            elif not self_closed and not _member(uncounted, key):
                depth += 1
                work += depth
                if depth > deepest:
                    deepest = depth
                    if deepest > limit:
                        return deepest, work
        else:
            i += 1
    return deepest, work


@njit(_nrt=False)
def control_bytes(data, start, end):
    """How many bytes of data[start:end] are below 0x20 and not tab, newline, FF or CR."""
    n = 0
    for i in range(start, end):
        b = data[i]
        if b < 0x20 and b != 0x09 and b != 0x0A and b != 0x0C and b != 0x0D:
            n += 1
    return n


@njit(nogil=True)
def scan_pages(data, offsets, depth_limit, max_bytes, uncounted, raw_text):
    """Per page: its nesting depth (capped at depth_limit + 1; 0 for a page over
    max_bytes, which is never read), its nesting work (see ``nesting_depth``) and the
    control bytes in its first HEAD_BYTES."""
    n = len(offsets) - 1
    depths = np.zeros(n, np.int64)
    work = np.zeros(n, np.int64)
    controls = np.zeros(n, np.int64)
    for row in range(n):
        start, end = offsets[row], offsets[row + 1]
        if end - start > max_bytes:
            continue
        depths[row], work[row] = nesting_depth(data, start, end, depth_limit, uncounted, raw_text)
        controls[row] = control_bytes(data, start, min(end, start + HEAD_BYTES))
    return depths, work, controls


class PageScan:
    """What ``scan_pages`` found in a batch's pages, with the bytes it read."""

    def __init__(self, pages, depth_limit: int, max_bytes: int):
        self.data, self.offsets = page_buffers(pages)
        self.sizes = np.diff(self.offsets)
        self.depths, self.work, self.controls = scan_pages(
            self.data, self.offsets, depth_limit, max_bytes, UNCOUNTED, RAW_TEXT
        )

    def head(self, row: int, n: int) -> bytes:
        """The first ``n`` bytes of page ``row``."""
        start = self.offsets[row]
        return self.data[start : min(start + n, self.offsets[row + 1])].tobytes()


def page_buffers(pages) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, int64 offsets) of a binary or string array, nulls read as empty pages. The
    numpy views alias Arrow's buffers (``pipeline.kernels.buffers`` does the same for
    strings only: it would cast binary to text, which fails on bytes that are not UTF-8)."""
    import pyarrow as pa

    if isinstance(pages, pa.ChunkedArray):
        pages = pages.combine_chunks()
    large = pa.types.is_large_binary(pages.type) or pa.types.is_large_string(pages.type)
    _, off_buf, data_buf = pages.buffers()
    n = len(pages)
    if off_buf is None:
        return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)
    offsets = np.frombuffer(off_buf, np.int64 if large else np.int32)[pages.offset : pages.offset + n + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


@warms("extract", seconds=1.0)
def warm_scan() -> None:
    """A warm-up step: compile the scan kernel."""
    import pyarrow as pa

    PageScan(pa.array([b"<html><body><div><p>x</p></div></body></html>"]), 10, 100)
