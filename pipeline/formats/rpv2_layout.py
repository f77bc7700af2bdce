"""Where the parts of a RedPajama-V2 tree are, as the dataset ships it (its card, and
RedPajama-Data's ``app/src/core/worker.py``)::

    <root>/documents/<snapshot>/<shard>/<lang>_<bucket>.json.gz
    <root>/quality_signals/<snapshot>/<shard>/<lang>_<bucket>.signals.json.gz
    <root>/duplicates/<snapshot>/<shard>/<lang>_<bucket>.duplicates.parquet
    <root>/minhash/<snapshot>/<shard>/<lang>_<bucket>.minhash.parquet
    <root>/listings/<lang>-<snapshot>-<partition>.txt    one <snapshot>/<shard>/<lang>_<bucket> a line

A source's ``paths`` may name the root, a snapshot (or shard) folder, a listing file or
documents files, globs included: ``documents_of`` turns each into its documents files.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from pipeline.util.file_kind import refuse_special
from pipeline.util.printable import printable, printable_path

COMPONENTS = {
    "signals": ("quality_signals", ".signals.json.gz"),
    "duplicates": ("duplicates", ".duplicates.parquet"),
    "minhash": ("minhash", ".minhash.parquet"),
}
DOCUMENTS = "documents"
DOCUMENT_SUFFIX = ".json.gz"
LISTING_SUFFIX = ".txt"
ID_SEPARATOR = "/"  # between a document id's file and its row


def document_tag(path: Path) -> str | None:
    """``<snapshot>/<shard>/<lang>_<bucket>`` of a documents file, None for a file that is
    not at ``documents/<snapshot>/<shard>/<name>.json.gz``."""
    parts = Path(path).parts
    if len(parts) < 4 or parts[-4] != DOCUMENTS or not parts[-1].endswith(DOCUMENT_SUFFIX):
        return None
    return "/".join([*parts[-3:-1], parts[-1].removesuffix(DOCUMENT_SUFFIX)])


def id_prefix(tag: str) -> str:
    """What every document id of a documents file starts with: the file's path below
    ``documents/`` (``<snapshot>/<shard>/<lang>_<bucket>.json.gz``); ``ID_SEPARATOR`` and
    the document's row follow, as RedPajama-V2 numbers its documents."""
    return f"{tag}{DOCUMENT_SUFFIX}"


def bucket(tag: str) -> str:
    """``head``, ``middle`` or ``tail``: what follows the language in the file's name."""
    return tag.rsplit("_", 1)[-1]


def component_path(document: Path, component: str) -> Path:
    """Where the tree keeps ``component`` (``COMPONENTS``) of a documents file."""
    folder, suffix = COMPONENTS[component]
    tag = document_tag(document)
    return Path(document).parents[3] / folder / f"{tag}{suffix}"


def documents_of(patterns: list[str], base: Path) -> list[str]:
    """The documents files that ``patterns`` (relative to ``base``) name, in order: a
    folder gives the documents under it (the root its ``documents`` folder), a listing
    the files it lists, a file itself. A pattern that matches nothing, or a listed file
    that is missing, is passed on as it is, for the source's listing to refuse by name."""
    out: list[str] = []
    for pattern in patterns:
        full = pattern if Path(pattern).is_absolute() else str(base / pattern)
        matches = sorted(glob.glob(full, recursive=True))
        if not matches:
            out.append(full)
        for match in map(Path, matches):
            if match.is_dir():
                top = match / DOCUMENTS if (match / DOCUMENTS).is_dir() else match
                out += sorted(str(p) for p in top.rglob(f"*{DOCUMENT_SUFFIX}"))
            elif match.name.endswith(LISTING_SUFFIX):
                out += _listed(match)
            else:
                out.append(str(match))
    return out


class ListingError(ValueError):
    """A listing line that names no documents file of its tree; the message says where."""


# A listing line: ``<snapshot>/<shard>/<lang>_<bucket>``, names without glob characters.
_TAG = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")


def _listed(listing: Path) -> list[str]:
    """The documents files a listing names; its tree's root is the folder above
    ``listings/`` (or the listing's own folder). A line is data, checked as it is read:
    one that climbs out of the tree (``../``), is absolute or holds a glob (``*``, which
    the source's listing then expanded) read files outside what the listing names."""
    refuse_special(listing)  # a FIFO would block the read for good
    root = listing.parent.parent if listing.parent.name == "listings" else listing.parent
    files = []
    for number, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), 1):
        tag = line.strip()
        if not tag:
            continue
        if not _TAG.fullmatch(tag) or ".." in tag.split("/"):
            raise ListingError(
                f"{printable_path(listing)} line {number}: {printable(tag)!r} is no <snapshot>/<shard>/<lang>_<bucket> "
                "name inside the tree"
            )
        files.append(str(root / DOCUMENTS / (tag if tag.endswith(DOCUMENT_SUFFIX) else tag + DOCUMENT_SUFFIX)))
    return files
