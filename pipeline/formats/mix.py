"""The mixture folder: its file names and paths, shared by the writer and every reader.

``prep mix`` writes them (``pipeline.mix.output``); the loader (``pipeline.loader.mixture``),
the report and the CLIs read them. This module imports only prep's small record checks, so a
reader can take the names without importing the planner (numpy, pyarrow, the shard
inventory).
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.formats.scratch import LOADER_CACHE
from pipeline.util.records import COUNT, Each, Optional, read_record

# The manifest: sources, shards, weights, phases and the names of the two order arrays.
# Written last, so a folder holding it is a complete mixture.
MIX_JSON = "mix.json"
# The global order: for every position, the source number (uint16) and the document's
# index within that source (int64).
ORDER_SOURCE = "order_source.npy"
ORDER_DOCUMENT = "order_document.npy"
# Written first and removed last by ``prep mix``: order arrays beside it and no
# ``mix.json`` are what a ``prep mix`` stopped early left, not the user's files.
WRITING = ".prep-mix-writing"
# What readers of ``mix.json`` rely on (``pipeline.mix.output.describe`` writes more).
MIX_RECORD = {
    "tokens": COUNT,
    "curriculum": Optional(str),
    "sources": Each({"shards": [str], "shard_documents": [COUNT]}),
    "order": Optional({"source": str, "document": str}),
    "phases": Optional([{"start": int, "weights": Each(float)}]),  # a start past the order: an empty phase
}


def read_description(path: str | os.PathLike) -> dict:
    """A mixture's ``mix.json``, checked: ``RecordError`` naming the file and the key that is
    missing or of the wrong type."""
    return read_record(path, MIX_RECORD)


class MixLayout:
    """Every path of a mixture folder, in one place."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    @property
    def manifest(self) -> Path:
        """``mix.json``."""
        return self.folder / MIX_JSON

    @property
    def order_source(self) -> Path:
        return self.folder / ORDER_SOURCE

    @property
    def order_document(self) -> Path:
        return self.folder / ORDER_DOCUMENT

    @property
    def writing(self) -> Path:
        """The mark of a ``prep mix`` writing here (see ``WRITING``)."""
        return self.folder / WRITING

    def own(self) -> list[Path]:
        """What ``prep mix`` and the loader write here: all ``--force`` may remove, and the
        names a new mixture must not write over in a folder that holds none."""
        return [self.manifest, self.order_source, self.order_document, self.folder / LOADER_CACHE, self.writing]

    def order(self, description: dict, which: str) -> Path:
        """An order array (``which``: "source" or "document") by the name the mixture's
        ``mix.json`` (``description``) gives it under ``"order"``."""
        return self.folder / description["order"][which]

    def shards(self, source: dict) -> list[str]:
        """A source's shard prefixes (``description["sources"][name]``), in order. ``prep mix``
        writes absolute paths; a relative one (a mixture edited or moved by hand) is this
        folder's, not the working directory's, which would change with the reader's ``cd``."""
        return [str(self.folder / prefix) for prefix in source["shards"]]
