"""The list files ``url_filter`` and ``bad_words`` read: checking, naming, loading.

Domain lists are in the UT1 blacklist format FineWeb uses (``<category>/domains``): one
domain per line, blank lines and ``#`` comments ignored. Each entry is normalised like a
host (lowercase, IDNA to punycode, no trailing dot), so ``bücher.example`` in a list
blocks ``xn--bcher-kva.example`` in a URL and the other way round.

Word lists hold one word or phrase per line (LDNOOBW's format), blank lines and ``#``
comments ignored (``pipeline/sidefiles.py`` reads the lines of both).

A list is loaded once per process (keyed by path, size and modification time): stage
objects are built per source, and a UT1 ``domains`` file holds millions of entries.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.formats.bundled import bundled_list
from pipeline.sidefiles import list_entries
from stages.url_filter.urls import normalize_host

# C4's English list: LDNOOBW at the commit C4 (and datatrove) pin, unchanged. CC-BY-4.0,
# see stages/lists/NOTICE.md.
LDNOOBW_EN = bundled_list("ldnoobw_en.txt")
LDNOOBW_EN_SHA256 = "a506cbcf8a31935b122299f3bb1d32be6db3d0ad498765d28f365dfc4f4d7b8c"

_CACHE: dict[tuple, object] = {}


def checked_paths(option: str, paths: list[str]) -> list[str]:
    """The option's files, absolute; ValueError (one line) naming the first missing one."""
    out = []
    for path in paths:
        if not isinstance(path, str) or not path:
            raise ValueError(f"{option}: each entry must be a path to a list file, not {path!r}")
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_file():
            raise ValueError(f"{option}: list file {path} does not exist (or is not a file)")
        out.append(str(resolved))
    return out


def bundled_ldnoobw_en() -> str:
    """The bundled LDNOOBW English list, checked against its hash (a damaged install would
    otherwise filter with a different list without a word)."""
    try:
        digest = hashlib.sha256(LDNOOBW_EN.read_bytes()).hexdigest()
    except OSError as error:
        raise FileNotFoundError(f"the bundled bad-words list is missing: {LDNOOBW_EN} ({error.strerror})") from None
    if digest != LDNOOBW_EN_SHA256:
        raise ValueError(f"the bundled bad-words list {LDNOOBW_EN} is damaged (sha256 {digest})")
    return str(LDNOOBW_EN)


def short_names(paths: list[str]) -> list[str]:
    """The shortest trailing part of each path that tells the lists apart: ``block.txt``,
    or ``adult/domains`` and ``gambling/domains`` for two UT1 categories."""
    parts = [Path(p).parts for p in paths]
    for k in range(1, max((len(p) for p in parts), default=1) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return list(paths)


def _cached(kind: str, path: str, build):
    stat = os.stat(path)
    key = (kind, path, stat.st_size, stat.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = build(list_entries(path))
    return _CACHE[key]


def _domains(lines: list[str]) -> frozenset[str]:
    out = set()
    for line in lines:
        entry = line.split()[0]
        out.add(normalize_host(entry) or entry.lower().rstrip("."))
    return frozenset(out)


def load_domains(paths: list[str]) -> list[frozenset[str]]:
    """Each list's domains, normalised (one set per file: no merged copy of a huge list)."""
    return [_cached("domains", path, _domains) for path in paths]


def load_words(path: str) -> list[str]:
    """The list's entries, lowercased, in file order, without repeats."""
    return _cached("words", path, lambda lines: list(dict.fromkeys(line.lower() for line in lines)))
