"""Finding a document's URL in its batch, and taking the URL apart: host and words.

The URL is named by a dotted path: ``url`` (C4), ``meta.url`` (RedPajama),
``metadata.url`` (Dolma). Readers keep an input's other fields as columns, a JSON
object as a struct column, so the path walks struct fields; a top-level column whose
own name holds a dot (``meta.url`` flattened) is found first.

The host is what a browser would connect to: lowercase, without userinfo, port or
trailing dot, percent-decoded, Unicode labels as punycode (Python's ``idna`` codec,
IDNA 2003 as in UTS #46 transitional processing; full-width dots are dots). A URL
without a scheme (``example.com/page``) is read as host and path; one with a scheme but
no ``//`` authority (``mailto:``, ``javascript:``), an empty host, a host with
characters no host has, or a port that is not a number, is malformed.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.kernels.buffers import is_string

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_PORT_AFTER = re.compile(r"\d*(?:[/?#\\]|$)")
_AUTHORITY_END = re.compile(r"[/?#\\]")
_HOST = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*")
_IPV6 = re.compile(r"[0-9a-f:.]+(?:%[a-z0-9]+)?")
# Words of a URL: runs of letters and digits (Unicode ones too), split at anything else.
WORD_SPLIT = re.compile(r"[\W_]+")


def column_at(batch: pa.RecordBatch, path: str) -> pa.Array | None:
    """The array at dotted ``path`` (top-level column, then struct fields), or None when
    the batch has no such field (every document then has no URL)."""
    names = batch.schema.names
    parts = path.split(".")
    for k in range(len(parts), 0, -1):  # the longest prefix that names a column
        name = ".".join(parts[:k])
        if name in names:
            array = batch.column(name)
            break
    else:
        return None
    for part in parts[k:]:
        if not pa.types.is_struct(array.type) or array.type.get_field_index(part) < 0:
            return None
        array = pc.struct_field(array, part)  # with the struct's own nulls (.field ignores them)
    return array


def url_strings(array: pa.Array | None, n: int) -> list[str | None]:
    """The URLs as Python strings (None where null or absent); another scalar type is read
    as its text form, a nested one as absent."""
    if array is None:
        return [None] * n
    if not is_string(array.type):
        if pa.types.is_nested(array.type):
            return [None] * n
        array = array.cast(pa.large_string())
    return array.to_pylist()


def normalize_host(host: str) -> str | None:
    """The host as lists name it, or None when it is not a host."""
    if "%" in host:
        host = unquote(host)
    host = host.strip().rstrip(".")
    if not host:
        return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except (UnicodeError, ValueError):
            return None
        host = host.rstrip(".")
    host = host.lower()
    return host if _HOST.fullmatch(host) else None


def split_url(url: str) -> tuple[str | None, str, str]:
    """(normalised host or None when malformed, the raw host text, the rest: path, query,
    fragment)."""
    s = url.strip()
    scheme = _SCHEME.match(s)
    if scheme and s.startswith("//", scheme.end()):
        rest = s[scheme.end() + 2 :]
    elif s.startswith("//"):
        rest = s[2:]
    elif scheme and not _PORT_AFTER.match(s, scheme.end()):
        return None, "", s  # a scheme without an authority: mailto:, javascript:, data:
    else:
        rest = s  # no scheme: example.com/page, or example.com:8080/page
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        close = authority.find("]")
        raw, port = (authority[1:close], authority[close + 1 :]) if close > 0 else (authority, "")
        host = raw.lower() if close > 0 and _IPV6.fullmatch(raw.lower()) else None
    else:
        raw, _, port = authority.partition(":")
        host = normalize_host(raw)
    if port.startswith(":"):
        port = port[1:]
    if port and not port.isdigit():
        host = None
    return host, raw, tail


def host_suffixes(host: str) -> list[str]:
    """``a.b.example.com`` -> itself, ``b.example.com``, ``example.com``, ``com``: a listed
    domain blocks itself and every sub-domain of it."""
    if ":" in host:  # an IPv6 literal has no parent domains
        return [host]
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(len(labels))]


def url_words(raw_host: str, tail: str) -> list[str]:
    """The URL's words: host and path (percent-decoded, lowercase) split at every
    character that is not a letter or digit."""
    text = unquote(f"{raw_host} {tail}") if "%" in tail or "%" in raw_host else f"{raw_host} {tail}"
    return [w for w in WORD_SPLIT.split(text.lower()) if w]
