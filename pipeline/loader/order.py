"""The document order: which documents the token stream visits, in which sequence.

Why a separate, pluggable piece: the loader's samples are windows over one long stream of
tokens, the documents of the corpus laid end to end in some order. Everything else (the
windows, sharding, resume) only needs that order as an array of global document ids,
repeats allowed. A plain shard folder uses ``ShuffledEpochs`` (a seeded permutation of
all documents per epoch); a mixture folder (``prep mix``) uses ``MixtureOrder``
(``pipeline.loader.mixture``), which turns the mixture's global (source, document) order
into global ids. ``TokenDataset`` picks one of the two from the folder; any other order
(a new curriculum, say) plugs in as ``TokenDataset(path, seq_len, order=provider)``.

A provider has two methods:

``key()``
    a string naming everything the order depends on besides the corpus (seed, epochs,
    the mixture manifest's hash); it goes into the cache file name.
``build(corpus)``
    the order as an integer array of global document ids (``0 <= id <
    corpus.num_documents``). Called once per corpus and key; the result is cached.
``identity()`` (optional)
    what a loader state records of the order, when ``key()`` holds what a copy of the
    data changes (file times: ``MixtureOrder``); ``key()`` otherwise.

``DocumentStream`` adds the cumulative sizes that map a stream position to a document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pipeline.loader.cache import cached_array, chunks, fingerprint, outside
from pipeline.loader.corpus import ShardCorpus

STREAM_FORMAT = 1


class DocumentOrder(Protocol):
    def key(self) -> str: ...

    def build(self, corpus: ShardCorpus) -> np.ndarray: ...


def index_dtype(n: int) -> np.dtype:
    """The narrowest of int32/int64 that holds ids below ``n`` (halves the order file)."""
    return np.dtype(np.int32) if n < 2**31 else np.dtype(np.int64)


@dataclass(frozen=True)
class ShuffledEpochs:
    """Every document once per epoch, in a fresh seeded permutation each epoch.

    Epoch ``e``'s permutation depends only on ``(seed, e)``, so asking for more epochs
    later extends the stream without changing its beginning.
    """

    seed: int = 0
    epochs: int = 1

    def key(self) -> str:
        return f"shuffled-epochs(seed={self.seed},epochs={self.epochs})"

    def build(self, corpus: ShardCorpus) -> np.ndarray:
        n = corpus.num_documents
        order = np.empty(n * self.epochs, dtype=index_dtype(n))
        for epoch in range(self.epochs):
            rng = np.random.default_rng([self.seed, epoch])
            order[epoch * n : (epoch + 1) * n] = rng.permutation(n)
        return order


class DocumentStream:
    """The stream of tokens: ``order`` (global document ids) and ``cumulative`` sizes.

    ``cumulative[k]`` is the stream position where the k-th document of the order
    starts; ``cumulative[-1]`` is the stream's length. Both arrays are cached beside the
    data and memory-mapped, so ranks and workers share them.
    """

    def __init__(self, corpus: ShardCorpus, provider: DocumentOrder):
        self.corpus = corpus
        self.provider = provider
        self.fingerprint = fingerprint("stream", STREAM_FORMAT, corpus.fingerprint, provider.key())
        self._open()

    def _open(self) -> None:
        tag = f"stream-{self.fingerprint}"
        cache = self.corpus.cache_dir
        self.order = cached_array(cache, f"{tag}-order.npy", self._build_order, fits=self._order_outside)
        self.cumulative = cached_array(
            cache, f"{tag}-cumulative.npy", self._build_cumulative, len(self.order) + 1, self._cumulative_differs
        )

    def _order_outside(self, order: np.ndarray) -> str | None:
        """Where a cached order names a document the corpus does not have, in words."""
        n = self.corpus.num_documents
        bad = outside(order, 0, n - 1)
        return None if bad is None else f"position {bad:,} names document {int(order[bad]):,} of {n:,}"

    def _cumulative_differs(self, cumulative: np.ndarray) -> str | None:
        """Where cached cumulative sizes differ from the order's documents' sizes, in words:
        a step off by one shifts every window after it, so each is checked."""
        if cumulative[0] != 0:
            return f"it starts at {int(cumulative[0]):,}"
        sizes = self.corpus.document_sizes
        for part in chunks(len(self.order)):
            steps = np.diff(cumulative[part.start : part.stop + 1])
            bad = np.flatnonzero(steps != sizes[self.order[part]])
            if len(bad):
                return f"position {part.start + int(bad[0]):,} does not step by its document's size"
        return None

    def _build_order(self) -> np.ndarray:
        order = np.asarray(self.provider.build(self.corpus))
        n = self.corpus.num_documents
        if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer):
            raise ValueError("a document order must be a 1-D integer array of global document ids")
        if len(order) and (order.min() < 0 or order.max() >= n):
            raise ValueError(f"document order has ids outside 0..{n - 1}")
        return order.astype(index_dtype(n), copy=False)

    def _build_cumulative(self) -> np.ndarray:
        sizes = np.asarray(self.corpus.document_sizes)[np.asarray(self.order)]
        cumulative = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=cumulative[1:])
        return cumulative

    @property
    def num_tokens(self) -> int:
        return int(self.cumulative[-1])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["order"] = state["cumulative"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()
