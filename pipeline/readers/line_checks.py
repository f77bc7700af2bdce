"""What a JSON line the reader quarantines is told: the scan's verdicts (too deep, too
many fields) and the checks of the slow path (UTF-8, JSON, an object), each ledger detail
with the likely cause and its fix where the line shows one (a JSON array, a UTF-16 file,
files joined, a lone ``\\r``): the parser's words alone rarely say what to do."""

from __future__ import annotations

import orjson

from pipeline.readers.common import BadInput as Bad
from pipeline.readers.nesting import MAX_DEPTH, MAX_FIELDS, MAX_NULLS, TOO_DEEP

# Keep at most this much of a bad line in the ledger (the location finds the rest).
RAW_KEEP_BYTES = 1 << 20

# What JSON (and Arrow, and arrow_json.row_lines) counts as whitespace: a line of only these is blank.
JSON_WHITESPACE = b" \t\r\n"

# Skipped where it starts a file (Arrow skips it where a buffer starts; orjson refuses it).
UTF8_BOM = b"\xef\xbb\xbf"
# What a line of a JSON array (a file written by json.dump, pandas' to_json) is told.
ARRAY_HINT = (
    "is the file one JSON array? JSON lines hold one object a line, no brackets or commas between "
    "(jq -c '.[]' converts)"
)

# A tar archive's header says "ustar" at this offset (POSIX and GNU tar alike).
TAR_MAGIC, TAR_MAGIC_AT = b"ustar", 257

# A file that starts with one of these is UTF-16 (or UTF-32), as Windows tools write text: not JSON lines.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
UTF16_HINT = (
    "the file is UTF-16 (it starts with its byte-order mark); JSON lines are UTF-8: convert it (iconv -t UTF-8)"
)


def unparsed(text: bytes, line: int, kind: int) -> Bad:
    """The ledger entry of a line the scan quarantines before any parser sees it."""
    if kind == TOO_DEEP:
        return Bad(line, "too-deep", f"JSON nested deeper than {MAX_DEPTH} levels", text[:RAW_KEEP_BYTES])
    detail = f"over {MAX_FIELDS} distinct fields (nested ones by path) or {MAX_NULLS} nulls for fields it lacks"
    return Bad(line, "too-many-fields", detail, text[:RAW_KEEP_BYTES])


def check_line(text: bytes, line: int) -> Bad | None:
    """The ledger entry of a line of a block that failed a scan or the parse, or None
    for a good one (a JSON object in valid UTF-8)."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        detail = str(error)
        if line == 1 and text.startswith(UTF16_BOMS):
            detail += f"; {UTF16_HINT}"
        return Bad(line, "invalid-utf8", detail, text[:RAW_KEEP_BYTES])
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        return Bad(line, "broken-json", _broken_json_detail(error, text, line), text[:RAW_KEEP_BYTES])
    if not isinstance(value, dict):
        detail = f"a JSON {type(value).__name__}, not an object" + (
            f"; {ARRAY_HINT}" if isinstance(value, list) else ""
        )
        return Bad(line, "not-an-object", detail, text[:RAW_KEEP_BYTES])
    return None


def _broken_json_detail(error: orjson.JSONDecodeError, text: bytes, line: int) -> str:
    """The parser's message, with the likely cause where the line shows one: a lone
    ``\\r`` (a file with old Mac line ends), the commas and brackets of a JSON array
    written one element a line (``json.dump(docs, f, indent=2)``), or a byte-order mark
    past the file's start (files joined); or, at line 1, a tar archive's header."""
    detail = str(error)
    content = text.rstrip(JSON_WHITESPACE)
    if line == 1 and text[TAR_MAGIC_AT : TAR_MAGIC_AT + len(TAR_MAGIC)] == TAR_MAGIC:
        detail += "; the file is a tar archive (.tar.gz): unpack it (tar xf) and name the files in it"
    elif b"\r" in content:
        detail += "; a lone \\r does not end a line (JSON lines end at \\n)"
    elif content.endswith(b",") or content.lstrip(JSON_WHITESPACE) in (b"[", b"]"):
        detail += f"; {ARRAY_HINT}"
    elif content.startswith(UTF8_BOM):
        detail += "; a byte-order mark starts the line (a file that has one joined to another, by cat?)"
    return detail
