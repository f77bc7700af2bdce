"""Untrusted strings made safe to print and to store as text.

Documents, ids and file names come from input nobody vetted. Printed raw they can
retitle, clear or rewrite the user's terminal; a file name that is not UTF-8 cannot even
be written into an Arrow string column. ``printable`` turns both into visible escapes.
"""

from __future__ import annotations

import errno
import os
import re

# Characters a terminal acts on instead of printing: C0 controls (ESC starts colour, title
# and clear-screen sequences; BEL, backspace and carriage return hide or overwrite what came
# before), DEL, C1 controls (U+009B is a one-character CSI) and the bidi overrides and
# isolates that make text read differently from what it is ("Trojan Source").
_UNSAFE = r"\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_VALUE = re.compile(f"[{_UNSAFE}]")
_UNSAFE_IN_TEXT = re.compile(rf"(?![\n\t])[{_UNSAFE}]")  # a document's own lines and tabs stay


def printable(value: object, *, text: bool = False) -> str:
    """``value`` with every character a terminal would act on written as a visible escape
    (``\\x1b``, ``\\u202e``). Documents, ids and file names come from untrusted input: printed
    raw, they can retitle, clear or rewrite the user's terminal. ``text``: the document body,
    whose newlines and tabs are kept so it reads as written."""
    pattern = _UNSAFE_IN_TEXT if text else _UNSAFE_IN_VALUE
    return pattern.sub(_escape, str(value))


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_path(path: object) -> str:
    """A file name or path as valid, printable text: bytes that are not UTF-8 (which
    Python keeps as lone surrogates) become ``\\xNN``, control characters escapes."""
    raw = str(path).encode("utf-8", "surrogateescape")
    return printable(raw.decode("utf-8", "backslashreplace"))


def error_line(error: BaseException) -> str:
    """Why something failed, on one line: the OS's words for an OS error, else the first
    line of the message (pyarrow appends source locations below it)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(error, FileNotFoundError) and not any(c.isspace() for c in first):
        # pyarrow and fsspec raise it with only the path as message; a sentence (prep's
        # own "units.json is missing: ...") is the cause, and is kept
        return os.strerror(errno.ENOENT)
    return first or type(error).__name__
