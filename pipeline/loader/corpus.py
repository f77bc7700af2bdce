"""The documents of a token-shard folder, numbered globally, with where their tokens live.

Why: the loader walks a stream of documents that may come from many shards and many
sources (``tokens/<source>/`` folders of a run). It needs, for any global document id, its
length and where its tokens start in which ``.bin``, without opening every ``.idx`` in
every worker. ``ShardCorpus`` builds three small arrays once (document sizes, document
starts, first document of each shard), caches them beside the data and memory-maps them;
the ``.bin`` files are memory-mapped lazily in each process that reads tokens.

Every shard is opened once, checked (``IndexedShard``: index arrays, ``.bin`` size,
sidecar; ``verify`` adds the checksum), when the corpus is made, cache or no cache: a
damaged shard fails there with a ``ShardError`` naming its file, never later as wrong
tokens or an out-of-bounds read in a worker's kernel.

Document boundaries come from each ``.idx``'s document index (a document may span several
sequences in Megatron files from elsewhere; prep writes one sequence per document).
No torch here: the rest of the package may use this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.formats.indexed_shard import IndexedShard, ShardBin
from pipeline.formats.layout import Layout
from pipeline.formats.run_shards import missing_shards
from pipeline.formats.scratch import LOADER_CACHE
from pipeline.formats.token_shards import (
    IncompatibleShards,
    ShardError,
    check_compatible,
    list_shards,
    shard_paths,
    sidecar_path,
)
from pipeline.loader.cache import cached_array, chunks, fingerprint, outside, temporary_cache_dir

CORPUS_FORMAT = 1


@dataclass(frozen=True)
class Source:
    """A group of shards (one ``tokens/<source>/`` folder): its global document range."""

    name: str
    first_document: int
    documents: int


def discover_shards(root: Path) -> list[tuple[str, str]]:
    """``(source, prefix)`` for every complete shard below ``root``, in a stable order.

    The source is the folder's path relative to ``root`` (``""`` for shards at the top).
    Hidden folders (the loader cache, temporary outputs) are skipped.
    """
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        source = "" if rel == "." else rel.replace(os.sep, "/")
        found.extend((source, prefix) for prefix in list_shards(dirpath))
    return found


def resolve_root(path: str | os.PathLike) -> Path:
    """The folder holding the shards: ``path/tokens`` for a run folder, else ``path``."""
    path = Path(path)
    tokens = Layout(path).tokens_folder
    if tokens.is_dir():
        return tokens
    return path


def _shard_documents(shard: IndexedShard) -> tuple[np.ndarray, np.ndarray]:
    """Sizes (tokens) and starts (element offsets in the ``.bin``) of a shard's documents."""
    seq_starts = np.concatenate([[0], np.cumsum(shard.sizes, dtype=np.int64)])
    first_seq = shard.document_index.astype(np.int64)
    sizes = seq_starts[first_seq[1:]] - seq_starts[first_seq[:-1]]
    item = shard.dtype.itemsize
    starts = np.zeros(len(sizes), dtype=np.int64)
    present = first_seq[:-1] < len(shard.pointers)
    starts[present] = shard.pointers[first_seq[:-1][present]] // item
    return sizes, starts


def _within(largest: int):
    """A cached sizes array's check: every size from 0 to ``largest`` (the largest shard's tokens)."""

    def check(sizes: np.ndarray) -> str | None:
        bad = outside(sizes, 0, largest)
        return None if bad is None else f"document {bad:,} has {int(sizes[bad]):,} tokens"

    return check


class ShardCorpus:
    """All documents under a shard folder or a run folder, numbered 0..num_documents-1.

    Numbering follows ``discover_shards`` (sources sorted by folder, shards by name,
    documents in file order), so it is the same on every rank and every run.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        cache_dir: str | os.PathLike | None = None,
        shards: list[tuple[str, str]] | None = None,
        verify: bool = False,
    ):
        """Shards under ``path``, or exactly ``shards`` (``(source, prefix)`` pairs in order;
        a mixture lists its own), with the cache under ``path`` then. ``verify``: also
        check each ``.bin`` against its sidecar's sha256 (reads every byte)."""
        self.root = resolve_root(path) if shards is None else Path(path)
        found = discover_shards(self.root) if shards is None else list(shards)
        if not found:
            raise ValueError(f"no token shards (.idx + .bin) under {self.root}")
        self.prefixes = [prefix for _, prefix in found]
        self._shard_sources = [source for source, _ in found]
        self.shard_first_document = self._open_shards(verify)
        if shards is None and self.root != Path(path):  # a run folder: all its shards, or a word
            missing = missing_shards(Path(path), {source.name: source.documents for source in self.sources})
            if missing:
                raise ShardError(missing)
        stats = []
        for prefix in self.prefixes:
            bin_path, idx_path = shard_paths(prefix)
            idx_stat, bin_stat = idx_path.stat(), bin_path.stat()
            rel = os.path.relpath(prefix, self.root)
            stats.append((rel, idx_stat.st_size, idx_stat.st_mtime_ns, bin_stat.st_size))
        self.fingerprint = fingerprint("corpus", CORPUS_FORMAT, stats)
        self.cache_dir = self._choose_cache_dir(cache_dir)
        self._bins: dict[int, ShardBin] = {}
        self._map_documents()

    def _map_documents(self) -> None:
        """Open (building on first use) the per-document size and start arrays."""
        tag = f"corpus-{self.fingerprint}"
        self._built: tuple[np.ndarray, np.ndarray] | None = None
        n, cache = self.num_documents, self.cache_dir
        largest = max(tokens for _, tokens, _ in self._shard_layout)
        sizes = cached_array(cache, f"{tag}-sizes.npy", lambda: self._build_documents()[0], n, _within(largest))
        self.document_sizes = sizes
        self.document_starts = cached_array(
            cache, f"{tag}-starts.npy", lambda: self._build_documents()[1], n, lambda s: self._outside_shards(sizes, s)
        )
        self._built = None

    def _outside_shards(self, sizes: np.ndarray, starts: np.ndarray) -> str | None:
        """Where a document of ``starts`` and ``sizes`` (cached arrays) reaches outside its
        shard's tokens, in words; None when none does."""
        for shard, (_, tokens, _) in enumerate(self._shard_layout):
            first, end = int(self.shard_first_document[shard]), int(self.shard_first_document[shard + 1])
            for part in chunks(end - first):
                span = slice(first + part.start, first + part.stop)
                bad = outside(starts[span], 0, tokens)
                bad = outside(starts[span] + sizes[span], 0, tokens) if bad is None else bad
                if bad is not None:
                    name = shard_paths(self.prefixes[shard])[0].name
                    return f"document {span.start + bad:,} reaches past the {tokens:,} tokens of {name}"
        return None

    def _choose_cache_dir(self, cache_dir: str | os.PathLike | None) -> Path | None:
        """``cache_dir``, else ``.loader_cache`` beside the shards, else (read-only data)
        a folder of this user's in the machine's temporary folder, named after the shards'.

        Arrays built in memory instead would be built again, and held privately, by every
        process the dataset is pickled into (each rank, and each loader worker under the
        spawn and forkserver start methods): on 8M documents, 214 MiB and 17 s per worker.
        """
        if cache_dir is not None:
            return Path(cache_dir)
        if os.access(self.root, os.W_OK):
            return self.root / LOADER_CACHE
        return temporary_cache_dir(fingerprint("root", str(self.root.resolve())))

    def _open_shards(self, verify: bool) -> np.ndarray:
        """Open and check every shard; return the first global document of each (and the total).

        Keeps what a process needs to map a ``.bin`` later without opening its shard
        again, and to know it for the file checked here: its dtype, token count and
        identity (``shard_tokens``).

        Shards with sidecars must agree on the tokenizer (``check_compatible``): the
        stream lays them end to end, so a source tokenized otherwise (a folder copied in
        from another run, a shard replaced) would be served as ids of another vocabulary.
        """
        counts, self._shard_layout = [], []
        reference = None
        for prefix in self.prefixes:
            shard = IndexedShard(prefix, verify=verify)
            if shard.meta is not None:
                reference = reference or (shard.meta, sidecar_path(prefix))
                try:
                    check_compatible(reference[0], shard.meta, str(sidecar_path(prefix)))
                except IncompatibleShards as error:
                    raise ShardError(f"{error} (the first shard's sidecar: {reference[1]})") from None
            counts.append(shard.num_documents)
            self._shard_layout.append((shard.dtype, shard.num_tokens, shard.bin.identity))
        # The ids a model trained on these shards can embed; None without a sidecar saying so.
        self.vocab_size = reference[0].get("vocab_size") if reference else None
        self.vocab_sidecar = reference[1] if reference else None
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    def _build_documents(self) -> tuple[np.ndarray, np.ndarray]:
        if self._built is None:
            parts = [_shard_documents(self._reopen(shard)) for shard in range(len(self.prefixes))]
            sizes = np.concatenate([p[0] for p in parts]).astype(np.int64)
            starts = np.concatenate([p[1] for p in parts]).astype(np.int64)
            self._built = (sizes, starts)
        return self._built

    def _reopen(self, shard: int) -> IndexedShard:
        """``shard`` opened again (and checked) to build the document arrays, refused unless
        it still holds what it held at open: a process without the cache (a spawned worker,
        with data and temporary folder read-only) must number the documents as the first did."""
        opened = IndexedShard(self.prefixes[shard])
        documents = int(self.shard_first_document[shard + 1] - self.shard_first_document[shard])
        found = (opened.dtype, opened.num_tokens, opened.num_documents)
        if found != (*self._shard_layout[shard][:2], documents):
            raise ShardError(
                f"{shard_paths(self.prefixes[shard])[1]}: now lists {found[2]} documents and {found[1]} {found[0]} "
                f"tokens, but {documents} documents and {self._shard_layout[shard][1]} tokens when the corpus was "
                "opened: the shard changed under the loader"
            )
        return opened

    # -- what the order providers and the dataset read -------------------------------

    @property
    def num_documents(self) -> int:
        return int(self.shard_first_document[-1])

    @property
    def num_tokens(self) -> int:
        return int(np.sum(self.document_sizes, dtype=np.int64))

    @property
    def sources(self) -> list[Source]:
        """Sources in numbering order; each covers a contiguous range of global ids."""
        out: list[Source] = []
        for shard, name in enumerate(self._shard_sources):
            first, end = int(self.shard_first_document[shard]), int(self.shard_first_document[shard + 1])
            if out and out[-1].name == name:
                out[-1] = Source(name, out[-1].first_document, out[-1].documents + end - first)
            else:
                out.append(Source(name, first, end - first))
        return out

    def shard_of(self, documents: np.ndarray) -> np.ndarray:
        """Shard number of each global document id."""
        return np.searchsorted(self.shard_first_document, documents, side="right") - 1

    def shard_tokens(self, shard: int) -> np.ndarray:
        """The ``.bin`` of ``shard`` as a token array, mapped on first use in this process and
        checked before every read: a ``.bin`` whose size changed since is a ``ShardError``
        naming it, never a SIGBUS (see ``ShardBin``). Call it right before each read."""
        held = self._bins.get(shard)
        if held is None:
            # Mapped as checked at open (dtype, size), without parsing the .idx again.
            bin_path, idx_path = shard_paths(self.prefixes[shard])
            dtype, tokens_count, identity = self._shard_layout[shard]
            held = self._bins[shard] = ShardBin(bin_path, dtype, tokens_count, idx_path.name, identity)
        held.check()
        return held.tokens

    def check_unchanged(self) -> None:
        """Refuse any shard whose ``.bin`` no longer has its size at open (see ``shard_tokens``):
        what tells why a loader worker died, when a SIGBUS killed it."""
        for shard in range(len(self.prefixes)):
            self.shard_tokens(shard)

    def __getstate__(self) -> dict:
        # Pickled into spawned workers / DDP processes: send paths, never mapped arrays
        # (pickling a memmap copies its whole content). The receiver maps them again.
        state = self.__dict__.copy()
        state["_bins"] = {}
        for name in ("_built", "document_sizes", "document_starts"):
            state[name] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._map_documents()
