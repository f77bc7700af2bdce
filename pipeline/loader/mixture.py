"""Reading a ``prep mix`` folder: its shards and its global document order.

Why here: the mixture decides which documents the stream visits and in which order
(weights, up- and down-sampling, curriculum); the loader only has to follow it. A mixture
folder holds ``mix.json`` (``sources``: for each source, in order, its ``shards``) and
two arrays giving, for every position, the source number and the document's index
within that source (documents numbered across the source's shards in the listed order).
``mixture_corpus`` numbers the documents of all sources in that same order, and
``MixtureOrder`` turns (source, document) into those global ids. No torch here.

A shard the mixture lists must be there and unchanged in document count (``mix.json``'s
``shard_documents``), or the order would point at other documents: either is a
``ShardError`` naming the shard.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from pipeline.formats.mix import MixLayout
from pipeline.formats.mix_order import OrderArrayError, check_positions, read_order
from pipeline.formats.token_shards import ShardError
from pipeline.loader.cache import fingerprint
from pipeline.loader.corpus import ShardCorpus
from pipeline.util.printable import error_line
from pipeline.util.records import COUNT, Each, Optional, read_record


def is_mixture(path: str | os.PathLike) -> bool:
    return MixLayout(path).manifest.is_file()


# What the loader reads of ``mix.json``, checked where it enters: read bare, a damaged one
# (an array, no "sources", JSON nested too deep) left AttributeError, KeyError or
# RecursionError naming no file. ``shard_documents`` may be missing (an older mixture).
MIXTURE_SHAPE = {
    "sources": Each({"shards": [str], "shard_documents": Optional([COUNT]), "tokens_used": Optional(COUNT)}),
    "order": {"source": str, "document": str},
}


def _description(mix_dir: Path) -> dict:
    manifest = MixLayout(mix_dir).manifest
    description = read_record(manifest, MIXTURE_SHAPE)
    if description.get("format") != "prep-mix":
        raise ValueError(f"{manifest} is not a prep mixture (format {description.get('format')!r})")
    return description


def mixture_corpus(
    mix_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None, verify: bool = False
) -> ShardCorpus:
    """The documents of every source of the mixture, numbered source after source.

    Every listed shard is opened and checked (``verify``: checksums too); a missing or
    damaged one fails naming it and the ``mix.json`` that lists it.
    """
    mix_dir = Path(mix_dir)
    description = _description(mix_dir)
    folder = MixLayout(mix_dir)
    shards = [(name, prefix) for name, source in description["sources"].items() for prefix in folder.shards(source)]
    try:
        corpus = ShardCorpus(mix_dir, cache_dir, shards=shards, verify=verify)
    except ShardError as e:
        raise ShardError(f"{e} (a shard listed in {MixLayout(mix_dir).manifest})") from e
    _check_shard_documents(corpus, description, MixLayout(mix_dir).manifest)
    return corpus


def _check_shard_documents(corpus: ShardCorpus, description: dict, where: Path) -> None:
    """Refuse shards whose document count changed since the mixture was planned.

    The order numbers documents across each source's shards; a shard that now holds more
    or fewer documents shifts every number after it onto other documents.
    """
    sources = description["sources"]
    if all("shard_documents" not in source for source in sources.values()):  # an older mix.json
        return
    for name, source in sources.items():
        if len(source.get("shard_documents", ())) != len(source["shards"]):
            raise ShardError(
                f"{where}: source {name!r} lists {len(source['shards'])} shards but "
                f"{len(source.get('shard_documents', ()))} shard document counts: the file was edited or "
                "damaged; make the mixture again"
            )
    planned = [n for source in sources.values() for n in source["shard_documents"]]
    found = np.diff(corpus.shard_first_document)
    for prefix, n, m in zip(corpus.prefixes, found, planned):
        if n != m:
            raise ShardError(
                f"{prefix}: holds {n} documents, but {where} was planned with {m}: "
                "the shard changed since the mixture was made; make the mixture again"
            )


class MixtureOrder:
    """The document order of a mixture folder, as global ids of ``mixture_corpus``."""

    def __init__(self, mix_dir: str | os.PathLike):
        self.mix_dir = Path(mix_dir)
        self.folder = MixLayout(self.mix_dir)
        self.description = _description(self.mix_dir)

    def key(self) -> str:
        """Names, sizes and times of ``mix.json`` and its order arrays; an order array that
        is missing fails here, first: a one-line error naming it, not a bare ``FileNotFoundError``."""
        stats = []
        for f in [self.folder.manifest] + [self.folder.order(self.description, w) for w in self.description["order"]]:
            try:
                found = f.stat()
            except OSError as error:
                raise OrderArrayError(f"{f}: cannot be read ({error_line(error)}); make the mixture again") from None
            stats.append((f.name, found.st_size, found.st_mtime_ns))
        return "mixture-" + fingerprint(stats)

    def identity(self) -> str:
        """What a loader state records of this order (``TokenDataset.identity``): the order
        arrays' content. Not ``key()``, which holds the files' times so that the cache
        follows them: a copy of the mixture folder (``cp -r``, ``rsync`` without ``-t``) has
        other times and the same order, and a state saved on one must resume on the other."""
        digest = hashlib.sha256()
        for which in ("source", "document"):
            array = read_order(self.folder.order(self.description, which))
            digest.update(f"{which} {array.dtype.str} {len(array)}".encode())
            digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
        return "mixture-" + digest.hexdigest()[:20]

    def build(self, corpus: ShardCorpus) -> np.ndarray:
        names = list(self.description["sources"])
        first = {source.name: source.first_document for source in corpus.sources}
        # A source without shards (every document of it filtered out) has no documents in
        # the corpus; ``_check_order`` refuses any position that names it.
        offsets = np.array([first.get(name, 0) for name in names], dtype=np.int64)
        source = read_order(self.folder.order(self.description, "source"))
        document = read_order(self.folder.order(self.description, "document"))
        if len(source) != len(document):
            raise ValueError(f"{self.mix_dir}: order arrays differ in length")
        source, document = source.astype(np.int64), document.astype(np.int64)
        self._check_order(source, document, corpus)
        order = offsets[source] + document
        self._check_tokens(source, np.asarray(corpus.document_sizes)[order])
        return order

    def _check_tokens(self, source: np.ndarray, sizes: np.ndarray) -> None:
        """Each source must still give the tokens ``mix.json`` planned (``tokens_used``).

        Shards re-made with the same document counts (another tokenizer, other filters)
        pass the count check but change every document's length: the stream would no
        longer hold the planned shares or token count, and ``prep estimate``, which reads
        ``mix.json``, would disagree with what the loader serves.
        """
        sources = self.description["sources"]
        per_source = np.bincount(source, weights=sizes, minlength=len(sources))  # exact below 2**53 tokens
        for (name, planned), found in zip(sources.items(), per_source.astype(np.int64).tolist()):
            if "tokens_used" not in planned:  # an older mix.json
                continue
            if found != planned["tokens_used"]:
                raise ShardError(
                    f"{Path(planned['shards'][0]).parent}: source {name!r} gives {found:,} tokens at the mixture's "
                    f"positions, but {self.folder.manifest} was planned with {planned['tokens_used']:,}: its shards "
                    "changed since the mixture was made; make the mixture again"
                )

    def _check_order(self, source: np.ndarray, document: np.ndarray, corpus: ShardCorpus) -> None:
        """Each position must name a listed source and a document inside it (``check_positions``)."""
        names = list(self.description["sources"])
        counts = {s.name: s.documents for s in corpus.sources}
        sizes = np.array([counts.get(name, 0) for name in names], dtype=np.int64)
        paths = (self.folder.order(self.description, "source"), self.folder.order(self.description, "document"))
        check_positions(paths, source, document, sizes, names)
