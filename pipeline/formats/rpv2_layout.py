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
from pathlib import Path

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


def _listed(listing: Path) -> list[str]:
    """The documents files a listing names; its tree's root is the folder above
    ``listings/`` (or the listing's own folder)."""
    root = listing.parent.parent if listing.parent.name == "listings" else listing.parent
    lines = [line.strip() for line in listing.read_text(encoding="utf-8").splitlines()]
    return [str(root / DOCUMENTS / (t if t.endswith(DOCUMENT_SUFFIX) else t + DOCUMENT_SUFFIX)) for t in lines if t]
