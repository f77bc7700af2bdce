"""The id field's value in each JSON line as the line writes it, read from the raw bytes.

Arrow infers one type per column of a block, so a neighbour changes a value's type, and
its text with it: 1500000000000000001 beside 2.5 became 1.5e+18, an integer past int64 a
double, a string like "2020-01-01" a timestamp. Ids must not depend on their
neighbours, and the raw bytes are the one place the exact text of a number survives.
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa

from pipeline.compile.jit import njit
from pipeline.readers.nesting import (
    BACKSLASH,
    CLOSERS,
    COLON,
    COMMA,
    CR,
    NEWLINE,
    OPENERS,
    QUOTE,
    SPACE,
    TAB,
    string_end,
)

# What each one-letter escape in a JSON string stands for (0: not an escape).
_UNESCAPED = np.zeros(256, np.uint8)
for _escape, _plain in zip(b'"\\/bfnrt', b'"\\/\b\f\n\r\t'):
    _UNESCAPED[_escape] = _plain


def raw_values(block, field: str, rows: int) -> pa.Array:
    """The value of each object's top-level ``field`` as the line writes it, one per
    object of ``block`` (a block of one object per nonblank line): a number or
    ``true``/``false`` exactly as written, a string's value; null where the object has no
    such field, or ``null``, or an object or array there."""
    data = np.frombuffer(block, dtype=np.uint8)
    words = np.frombuffer(block, dtype=np.uint64, count=len(block) // 8)
    target = np.frombuffer(field.encode(), dtype=np.uint8)
    starts, ends, escaped = _value_spans(data, words, target, rows)
    offsets, values = _gathered(data, starts, ends)
    buffers = [np.packbits(starts >= 0, bitorder="little"), offsets, values]
    strings = pa.Array.from_buffers(pa.string(), rows, [pa.py_buffer(b) for b in buffers])
    if escaped.any():  # a string with escapes, where a string's value was needed (rare)
        texts = strings.to_pylist()
        for row in np.flatnonzero(escaped).tolist():
            texts[row] = orjson.loads(b'"' + texts[row].encode() + b'"')
        strings = pa.array(texts, pa.string())
    return strings


@njit(nogil=True)
def _value_spans(data, words, target, rows):
    """Per object, where its top-level ``target`` field's value starts and ends (-1 for
    none), and whether that value is a string with escapes. (A string's span is its
    body.)"""
    starts = np.full(rows, -1, np.int64)
    ends = np.full(rows, -1, np.int64)
    escaped = np.zeros(rows, np.bool_)
    n = len(data)
    row, depth, wants_name = -1, 0, False
    i = 0
    while i < n:
        c = data[i]
        if c == QUOTE:
            end = string_end(data, words, i + 1)
            if depth == 1 and wants_name:
                wants_name = False
                if 0 <= row < rows and starts[row] < 0 and _decodes_to(data, i + 1, end, target):
                    _record_value(data, words, end + 1, row, starts, ends, escaped)
            i = end if end >= n or data[end] == NEWLINE else end + 1
        else:
            if c == NEWLINE:
                depth, wants_name = 0, False
            elif c == OPENERS[0] or c == OPENERS[1]:
                depth += 1
                if depth == 1:
                    row += 1
                    wants_name = c == OPENERS[0]
            elif c == CLOSERS[0] or c == CLOSERS[1]:
                depth = max(depth - 1, 0)
            elif c == COMMA and depth == 1:
                wants_name = True
            i += 1
    return starts, ends, escaped


@njit(inline="always")
def _is_space(c):
    return c == SPACE or c == TAB or c == CR or c == NEWLINE


@njit(inline="always")
def _record_value(data, words, i, row, starts, ends, escaped):
    """Records the value after the name that ends before ``i`` (past its colon)."""
    n = len(data)
    while i < n and (_is_space(data[i]) or data[i] == COLON):
        i += 1
    if i >= n or data[i] == OPENERS[0] or data[i] == OPENERS[1]:
        return
    if data[i] == QUOTE:
        end = string_end(data, words, i + 1)
        starts[row], ends[row] = i + 1, end
        for k in range(i + 1, end):
            if data[k] == BACKSLASH:
                escaped[row] = True
                break
        return
    end = i
    while end < n and not (_is_space(data[end]) or data[end] == COMMA or data[end] == CLOSERS[0]):
        end += 1
    if not (end - i == 4 and data[i] == ord("n") and data[i + 1] == ord("u")):  # null
        starts[row], ends[row] = i, end


@njit(nogil=True)
def _gathered(data, starts, ends):
    """The spans' bytes one after another, with Arrow string offsets (empty for -1)."""
    offsets = np.zeros(len(starts) + 1, np.int32)
    for r in range(len(starts)):
        offsets[r + 1] = offsets[r] + (ends[r] - starts[r] if starts[r] >= 0 else 0)
    values = np.empty(offsets[-1], np.uint8)
    for r in range(len(starts)):
        if starts[r] >= 0:
            values[offsets[r] : offsets[r + 1]] = data[starts[r] : ends[r]]
    return offsets, values


@njit(inline="always")
def _hex4(data, i):
    """The 4 hex digits at ``i`` as a number; -1 where they are not 4 hex digits."""
    value = 0
    for k in range(i, i + 4):
        if k >= len(data):
            return -1
        c = data[k]
        if 48 <= c <= 57:
            digit = c - 48
        elif 97 <= (c | 32) <= 102:
            digit = (c | 32) - 87
        else:
            return -1
        value = value * 16 + digit
    return value


@njit(inline="always")
def _utf8_byte(code, k):
    """Byte ``k`` of ``code``'s UTF-8 encoding; -1 past its end."""
    size = 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    if k >= size:
        return -1
    if size == 1:
        return code
    lead = (0, 0, 0xC0, 0xE0, 0xF0)[size]
    shift = 6 * (size - 1 - k)
    return (lead | (code >> shift)) if k == 0 else (0x80 | ((code >> shift) & 0x3F))


@njit
def _decodes_to(data, start, end, target):
    """Whether the JSON string body ``data[start:end]`` means the bytes ``target``:
    ``"id"`` and ``"\\u0069d"`` name the same field, for Arrow as for any JSON reader."""
    i, k, m = start, 0, len(target)
    while i < end:
        if data[i] != BACKSLASH:
            if k >= m or data[i] != target[k]:
                return False
            i, k = i + 1, k + 1
            continue
        if i + 1 >= end:
            return False
        e = data[i + 1]
        if e == ord("u"):
            code = _hex4(data, i + 2)
            i += 6
            if 0xD800 <= code < 0xDC00 and i + 1 < end and data[i] == BACKSLASH and data[i + 1] == ord("u"):
                low = _hex4(data, i + 2)
                if 0xDC00 <= low < 0xE000:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    i += 6
            if code < 0:
                return False
            b = 0
            while True:
                byte = _utf8_byte(code, b)
                if byte < 0:
                    break
                if k >= m or target[k] != byte:
                    return False
                k, b = k + 1, b + 1
            continue
        plain = _UNESCAPED[e]
        if k >= m or plain == 0 or target[k] != plain:
            return False
        i, k = i + 2, k + 1
    return k == m
