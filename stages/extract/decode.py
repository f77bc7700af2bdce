"""A page's bytes to text: the byte-order mark, the HTTP charset, the ``<meta>`` charset,
then detection; what nothing decodes cleanly is replaced or dropped.

The order is the browsers' (WHATWG's "encoding sniffing"), and each name goes through
WHATWG's table of labels (resiliparse's ``map_encoding_to_html5``: ``latin1`` and
``iso-8859-1`` are windows-1252, ``gb2312`` is GBK, ...). A name that the table does not
know (``<meta charset="bogus">``) is no answer, and the next source is asked.

Pages lie about their charset, most often a header saying ISO-8859-1 over UTF-8 bytes
(a server default) or UTF-8 over windows-1252 bytes (a template's default). So a declared
charset is used only where the bytes decode in it without error, with one exception: bytes
that are valid UTF-8 and hold multi-byte sequences are UTF-8 even where a single-byte
charset is declared (a single-byte text almost never forms valid UTF-8 by chance, and
every single-byte charset decodes anything, so its "success" proves nothing). Where no
declared charset decodes cleanly (or none is declared), valid UTF-8 is UTF-8, and so is a
page that is UTF-8 but for a few stray bytes (a windows-1252 quote pasted into a UTF-8
template), those bytes replaced, before detection (uchardet) is asked; a page whose best reading is still mostly
replacement characters is ``undecodable``. The text that comes out is always valid Unicode.
"""

from __future__ import annotations

import codecs
import functools
import re

BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"))
BOMS += ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
META_BYTES = 4096  # how much of a page's start is searched for a <meta> charset
DETECT_BYTES = 65536  # how much uchardet reads (both ends of a longer page)
# <meta charset="x"> and <meta http-equiv="Content-Type" content="text/html; charset=x">
_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_:.+-]{1,40})", re.IGNORECASE)
# A UTF-8 page with at least this many valid multi-byte characters for each invalid byte
# keeps its UTF-8 reading (a windows-1252 page read as UTF-8 has none: each accented
# letter is an invalid byte).
VALID_PER_STRAY = 4
# Replacement characters above this share of the text: nothing reads it, the page is undecodable.
MAX_REPLACED = 0.10


def codec_for(label: str | None) -> str | None:
    """The Python codec a charset label names under WHATWG's table, or None if none."""
    if not label:
        return None
    from resiliparse.parse.encoding import map_encoding_to_html5

    name = map_encoding_to_html5(label.strip().strip("\"'"), fallback_utf8=False)
    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def is_wide(codec: str | None) -> bool:
    """Whether text in ``codec`` is full of NUL bytes by nature (UTF-16, UTF-32)."""
    return codec is not None and codec.startswith(("utf-16", "utf-32"))


def bom_codec(raw: bytes) -> str | None:
    """The codec a byte-order mark at the start of ``raw`` names (UTF-32 before UTF-16,
    whose mark begins UTF-32-LE's)."""
    for bom, codec in BOMS:
        if raw.startswith(bom):
            return codec
    return None


def meta_label(raw: bytes) -> str | None:
    """The charset a ``<meta>`` tag in the first META_BYTES names, as written."""
    found = _META_CHARSET.search(raw, 0, META_BYTES)
    return found.group(1).decode("ascii") if found else None


@functools.cache
def _one_byte_each(codec: str) -> bool:
    """Whether ``codec`` is a single-byte charset: each of the 128 high bytes alone reads
    as one character (windows-1252's undefined bytes as one replacement each)."""
    return codec != "utf-8" and len(codecs.decode(bytes(range(0x80, 0x100)), codec, "replace")) == 128


def _strict(raw: bytes, codec: str) -> str | None:
    try:
        return raw.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return None


def _utf8_with_strays(raw: bytes) -> tuple[str | None, int]:
    """(``raw`` read as UTF-8, how many invalid bytes were replaced), or (None, n) when
    too few of its non-ASCII characters are valid to call it UTF-8."""
    text = raw.decode("utf-8", "replace")
    replaced = text.count("\ufffd")
    if not replaced:
        return text, 0
    valid = len(text) - len(raw.decode("ascii", "ignore")) - replaced
    return (text if valid >= VALID_PER_STRAY * replaced else None), replaced


def decode(raw: bytes, http_charset: str | None) -> tuple[str | None, str]:
    """(text, how it was read: ``bom``, ``http``, ``meta``, ``utf8-over-<declared>``,
    ``utf8`` (valid UTF-8, nothing declared that reads it), ``utf8-strays``, ``detected``,
    ``replaced``), or (None, ``undecodable``)."""
    bom = bom_codec(raw)
    if bom is not None:
        return raw.decode(bom, "replace").lstrip("\ufeff"), "bom"
    utf8 = None  # raw read strictly as UTF-8, once needed
    tried: list[str] = []
    for how, label in (("http", http_charset), ("meta", meta_label(raw))):
        codec = codec_for(label)
        if codec is None or codec in tried:
            continue
        tried.append(codec)
        if _one_byte_each(codec) and not raw.isascii():
            utf8 = _strict(raw, "utf-8") if utf8 is None else utf8
            if utf8:
                return utf8, f"utf8-over-{how}"
        text = _strict(raw, codec)
        if text is not None:
            return text, how
    text, replaced = _utf8_with_strays(raw)
    if text is not None:
        return text, "utf8-strays" if replaced else "utf8"
    from resiliparse.parse.encoding import detect_encoding

    detected = codec_for(detect_encoding(raw, max_len=DETECT_BYTES, from_html_meta=False)) or "utf-8"
    if detected not in tried:
        text = _strict(raw, detected)
        if text is not None:
            return text, "detected"
    text = raw.decode(tried[0] if tried else detected, "replace")
    if text.count("\ufffd") > MAX_REPLACED * len(text):
        return None, "undecodable"
    return text, "replaced"
