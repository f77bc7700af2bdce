"""One WARC record's bytes to what the reader makes of it: a document (``Page``), a record
counted and skipped (``Skip``), or damage (``BadInput``, a ledger row at its location).

The framing (``warc_framing``) hands over a ``ByteStream`` of WARC records (the
inflated bytes of one gzip member, or a plain file from some offset on); ``records``
reads them in order and stops at the first damage, after which the framing resumes at
the next gzip member or ``WARC/1.`` line. A record is a header block (``WARC/1.x``,
fields, a blank line), ``Content-Length`` bytes of block, and ``\\r\\n\\r\\n``: a record
whose bytes disagree with its ``Content-Length`` in either direction is damage
(``warc-length-mismatch``), never guessed at.

Which records become documents:

* ``response`` with an HTTP block (``application/http``), status 200, and an HTML type
  (``text/html``, ``application/xhtml+xml``; the HTTP ``Content-Type``, else
  ``WARC-Identified-Payload-Type``). Its body, de-chunked and with a gzip or deflate
  ``Content-Encoding`` undone, is the page's raw bytes (``Page.html``): decoding them
  is the extract stage's job, which knows the HTTP charset, ``<meta>`` and detection.
  A body that is mostly control bytes is binary whatever its label
  (``warc-binary-body``), unless a UTF-16/32 charset or byte-order mark explains NULs.
* ``conversion`` (WET): the block is the text, as it is; it must be UTF-8.

Everything else is a ``Skip`` of a kind (``warc:request``, ``warc:status-404``,
``warc:non-html``, ``warc:truncated`` for ``WARC-Truncated``, ...), counted, not a
document. Fields are matched on header blocks with regular expressions, never byte by
byte; header values are UTF-8 (bad bytes replaced), so every string is valid.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from pipeline.readers.common import BadInput

END = b"\r\n\r\n"
HEADER_CAP = 1 << 16  # a WARC or HTTP header block longer than this is damage
HTML_TYPES = ("text/html", "application/xhtml+xml")
BINARY_SAMPLE = 1 << 13  # bytes of a body looked at to tell binary from text
BINARY_SHARE = 0.02  # more control bytes than this share of the sample: binary
# Control bytes that text does not hold (tab, LF, FF, CR and ESC are text's).
_CONTROL = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROL)
_WIDE_CHARSET = re.compile(r"utf-?(16|32)|ucs-?[24]|unicode", re.I)
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff")

_FIELD = re.compile(rb"^([^:\r\n]+):[ \t]*(.*?)[ \t]*\r?$", re.M)
_STATUS = re.compile(rb"HTTP/\d(?:\.\d)?[ \t]+(\d{3})\b")
_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
_CHUNK_END = re.compile(rb"\r?\n")
_BLANK = re.compile(rb"[\r\n]*")
_KIND = re.compile(r"[a-z][a-z0-9-]{0,31}")
# ASCII digits only: ``str.isdigit`` also takes "²" (which ``int`` refuses) and "١٢٣".
_LENGTH = re.compile(r"[0-9]{1,15}")


class Page(NamedTuple):
    """A record that is a document; ``html`` holds a response's raw body, ``text`` a
    WET conversion's text ("" for HTML, which the extract stage turns into text)."""

    location: int
    record_id: str | None
    url: str | None
    date: str | None
    content_type: str | None
    charset: str | None
    payload_type: str | None
    html: bytes | None
    text: str


class Skip(NamedTuple):
    kind: str  # warc:<what>, counted in the unit's stats and the manifest


Item = Page | Skip | BadInput
# Damage after which where the next record starts is unknown; any other bad record was
# read to its end (an oversized or binary page), so the next one follows it.
FRAMING_DAMAGE = frozenset({"warc-truncated", "warc-bad-header", "warc-length-mismatch"})


def records(stream, cap: int) -> Iterator[Item]:
    """The records of ``stream``, up to the first damage to its framing (a record whose
    block was read whole but is no page, as an oversized or binary one, is a row and the
    next record follows). Each is located where the stream says its first byte lies (the
    gzip member it starts in, or its own offset in a plain file)."""
    while True:
        stream.between_records = True
        stream.skip_blank()
        if stream.at_end():
            return
        stream.between_records = False
        at = stream.location()
        head = stream.until(END, HEADER_CAP)
        if head is None:
            kind = "warc-truncated" if stream.at_end() else "warc-bad-header"
            yield BadInput(at, kind, f"no WARC header block ends within {HEADER_CAP} bytes", None)
            return
        if not head.startswith(b"WARC/"):
            yield BadInput(at, "warc-bad-header", "a record that does not start with WARC/", head[:4096])
            return
        fields = _fields(head[head.find(b"\n") + 1 :])
        length = fields.get("content-length", "")
        if not _LENGTH.fullmatch(length):
            yield BadInput(at, "warc-bad-header", f"Content-Length {length[:40]!r} is no length", head[:4096])
            return
        item = _record(stream, fields, int(length), at, cap)
        if isinstance(item, BadInput) and item.kind in FRAMING_DAMAGE:
            yield item
            return
        trailer = stream.take(len(END))
        if trailer not in (END, b""):  # b"": a writer that ends the member or file after the block
            yield BadInput(at, "warc-length-mismatch", f"no record end after Content-Length {length}", None)
            return
        yield item


def _record(stream, fields: dict[str, str], length: int, at: int, cap: int) -> Item:
    """The record's block, read (a document), or skipped; never more than ``cap`` held."""
    kind = fields.get("warc-type", "").lower()
    wanted = kind in ("response", "conversion") and "warc-truncated" not in fields
    if kind == "response" and "application/http" not in fields.get("content-type", "").lower():
        wanted, kind = False, "non-http"
    if not wanted:
        read = stream.skip(length)
        if read < length:
            return _short(at, length, read, stream)
        return Skip("warc:truncated" if "warc-truncated" in fields else f"warc:{_kind(kind)}")
    head = stream.take(min(length, HEADER_CAP))
    http = None
    if kind == "response":
        http = _http(head, at)
        if isinstance(http, BadInput):
            read = len(head) + stream.skip(length - len(head))
            return _short(at, length, read, stream) if read < length else http
        unwanted = _unwanted(http, fields.get("warc-identified-payload-type"))
        if unwanted is not None:
            read = len(head) + stream.skip(length - len(head))
            return _short(at, length, read, stream) if read < length else unwanted
    if length > cap:
        read = len(head) + stream.skip(length - len(head))
        if read < length:
            return _short(at, length, read, stream)
        return BadInput(at, "warc-oversized", f"a {length}-byte record > max_doc_bytes {cap}", None)
    block = head + stream.take(length - len(head)) if length > len(head) else head
    if len(block) < length:
        return _short(at, length, len(block), stream)
    meta = (fields.get("warc-record-id"), _uri(fields.get("warc-target-uri")), fields.get("warc-date"))
    if http is None:
        return _conversion(block, at, meta, fields)
    return _page(block, http, at, meta, fields.get("warc-identified-payload-type"), cap)


def _short(at: int, length: int, read: int, stream) -> BadInput:
    """A block that ends before its ``Content-Length``: the file's end (truncated) or
    the member's (a length that lies)."""
    if stream.truncates:
        return BadInput(at, "warc-truncated", f"the file ends {read} bytes into a {length}-byte block", None)
    return BadInput(at, "warc-length-mismatch", f"Content-Length {length}, but the record holds {read} bytes", None)


def _conversion(block: bytes, at: int, meta: tuple, fields: dict[str, str]) -> Item:
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as error:
        return BadInput(at, "warc-invalid-utf8", f"conversion record: {error}", block[:4096])
    if not text.strip():
        return Skip("warc:empty-conversion")
    content_type = fields.get("content-type")
    return Page(at, *meta, content_type, None, fields.get("warc-identified-payload-type"), None, text)


def _page(block: bytes, http: tuple, at: int, meta: tuple, payload_type: str | None, cap: int) -> Item:
    """A wanted response's HTTP block: a page, a skip (encoding, empty) or damage."""
    _, headers, body_start = http
    content_type = headers.get("content-type")
    body = block[body_start:]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunked(body)
        if body is None:
            return BadInput(at, "warc-bad-chunking", "a chunked body whose chunks do not add up", block[:4096])
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        if encoding not in ("gzip", "x-gzip", "deflate"):
            return Skip(f"warc:content-encoding-{_kind(encoding)}")
        body = _decoded(body, encoding, cap)
        if body is None:
            return BadInput(at, "warc-bad-content-encoding", f"a {encoding} body that does not inflate", None)
        if len(body) > cap:
            return BadInput(at, "warc-oversized", f"a body over max_doc_bytes {cap} once inflated", None)
    if not body.strip():
        return Skip("warc:empty-body")
    charset = _charset(content_type)
    if _binary(body, charset):
        return BadInput(at, "warc-binary-body", f"a body labelled {content_type!r} that is binary", body[:4096])
    return Page(at, *meta, content_type, charset, payload_type, body, "")


def _unwanted(http: tuple[int, dict[str, str], int], payload_type: str | None) -> Skip | None:
    """Why a response is no page (its status, its type), told from its HTTP header alone."""
    status, headers, _ = http
    if status != 200:
        return Skip(f"warc:status-{status}")
    mime = (headers.get("content-type") or payload_type or "").split(";")[0].strip().lower()
    return None if mime in HTML_TYPES else Skip("warc:non-html")


def _http(head: bytes, at: int) -> tuple[int, dict[str, str], int] | BadInput:
    """(status, header fields, where the body starts) of an HTTP response's start."""
    status = _STATUS.match(head)
    end = head.find(END)
    end, gap = (end, len(END)) if end >= 0 else (head.find(b"\n\n"), 2)
    if status is None or end < 0:
        why = "no HTTP status line" if status is None else f"no HTTP header end within {HEADER_CAP} bytes"
        return BadInput(at, "warc-bad-http", why, head[:4096])
    return int(status.group(1)), _fields(head[head.find(b"\n") + 1 : end + 2]), end + gap


def _fields(block: bytes) -> dict[str, str]:
    """Header fields by lower-case name (the first of a repeated name wins)."""
    fields: dict[str, str] = {}
    for name, value in _FIELD.findall(block):
        fields.setdefault(name.decode("utf-8", "replace").strip().lower(), value.decode("utf-8", "replace"))
    return fields


def _uri(value: str | None) -> str | None:
    """WARC/1.0 writers (wget) put the target URI in angle brackets; WARC/1.1 does not."""
    return value[1:-1] if value and value.startswith("<") and value.endswith(">") else value


def _kind(word: str) -> str:
    """A name safe to count under: a record type or encoding as written, else ``other``."""
    return word if _KIND.fullmatch(word) else "other"


def _charset(content_type: str | None) -> str | None:
    found = re.search(r"charset\s*=\s*[\"']?([^\"';\s]+)", content_type or "", re.I)
    return found.group(1) if found else None


def _dechunked(body: bytes) -> bytes | None:
    """The body of ``Transfer-Encoding: chunked``; the body as it is when it does not
    start with a chunk size (writers that de-chunked it and kept the header); None when
    the chunks are broken."""
    first = _CHUNK.match(body)
    if first is None:
        return body
    parts, position = [], 0
    while (size_line := _CHUNK.match(body, position)) is not None:
        size, position = int(size_line.group(1), 16), size_line.end()
        if size == 0:
            return b"".join(parts)
        if position + size > len(body):
            return None
        parts.append(body[position : position + size])
        end = _CHUNK_END.match(body, position + size)
        position = position + size if end is None else end.end()
    return b"".join(parts) if position >= len(body.rstrip()) else None


def _decoded(body: bytes, encoding: str, cap: int) -> bytes | None:
    """A gzip or deflate body inflated (at most ``cap`` + 1 bytes: a bomb stops there);
    deflate as zlib data or, as some servers send it, raw."""
    for wbits in (47,) if encoding != "deflate" else (15, -15):
        inflate = zlib.decompressobj(wbits)
        try:
            inflated = inflate.decompress(body, cap + 1)
        except zlib.error:
            continue
        if inflate.eof or len(inflated) > cap:
            return inflated
    return None


def _binary(body: bytes, charset: str | None) -> bool:
    sample = body[:BINARY_SAMPLE]
    if (charset and _WIDE_CHARSET.search(charset)) or sample.startswith(_WIDE_BOMS):
        return False
    control = len(sample.translate(None, _NOT_CONTROL))
    return control > BINARY_SHARE * len(sample)
