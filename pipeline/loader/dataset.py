"""``TokenDataset``: a map-style torch Dataset of packed fixed-length windows.

Sample ``i`` is the window of ``seq_len + 1`` stream positions starting at ``i * seq_len``
(consecutive windows share their boundary token, no token is wasted) over the stream of
documents in the order's sequence, across as many epochs as asked. ``__getitems__``
builds a whole batch at once (a few numba kernels, see ``pipeline.loader.windows``)
and returns it packed in a single int64 buffer; in a loader's worker that buffer is a
slot of a shared ring allocated once, so only a slot number crosses processes (see
``pipeline.loader.ring``). ``unpack`` turns a buffer into the batch dict without copying.

Batch dict: ``input_ids``, ``labels`` (int64, ``[B, seq_len]``, labels are the inputs
shifted by one), ``position_ids`` (int64, restart at 0 at each document start and at
each window start), ``cu_seqlens`` (int32, boundaries of the document pieces of the
flattened batch, for flash-attn varlen), ``max_seqlen`` (int), ``sample_index`` (int64
window ids, for checks and debugging).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from pipeline.formats.token_shards import ShardError
from pipeline.loader.cache import fingerprint
from pipeline.loader.corpus import ShardCorpus
from pipeline.loader.mixture import MixtureOrder, is_mixture, mixture_corpus
from pipeline.loader.order import DocumentOrder, DocumentStream, ShuffledEpochs
from pipeline.loader.ring import active_ring
from pipeline.loader.sampler import SHARE_WINDOW_TOKENS, WINDOW_ORDER_SCHEME, BatchChunk, WindowOrder, whole_number
from pipeline.loader.windows import WindowSources, count_segments, fill_segments, locate, read_windows


class PackedBatch(NamedTuple):
    """A collated batch as one int64 buffer plus the sizes needed to slice it.

    Buffer layout: input_ids, labels, position_ids (``rows * seq_len`` each), window ids
    (``rows``), then ``segments + 1`` int32 cu_seqlens packed two per int64 slot. From a
    loader's worker, ``buffer`` is ``None`` and the data sits at ``offset`` in ``slot``
    of the loader's shared ring (see ``pipeline.loader.ring``), unless that slot was
    still held by the training loop: then ``buffer`` carries the data.
    """

    buffer: torch.Tensor | None
    slot: int
    offset: int
    size: int
    rows: int
    seq_len: int
    segments: int
    max_seqlen: int


def packed_size(rows: int, seq_len: int, segments: int) -> int:
    """int64 elements of a packed batch."""
    return 3 * rows * seq_len + rows + (segments + 2) // 2


def largest_packed_size(rows: int, seq_len: int) -> int:
    """The most a batch of ``rows`` windows can need (every token its own document)."""
    return packed_size(rows, seq_len, rows * seq_len)


def unpack(packed: PackedBatch, buffer: torch.Tensor | None = None) -> dict:
    """The batch dict, as views into ``buffer`` (default ``packed.buffer``; no copy).

    One ``split_with_sizes`` and one ``unbind`` make all the views: slicing each one
    apart took twice as long, in the main process, for every batch.
    """
    rows, seq_len, n = packed.rows, packed.seq_len, packed.rows * packed.seq_len
    buffer = packed.buffer if buffer is None else buffer
    tokens, sample_index, cu_slots = buffer.split_with_sizes([3 * n, rows, (packed.segments + 2) // 2])
    input_ids, labels, position_ids = tokens.view(3, rows, seq_len).unbind()
    return {
        "input_ids": input_ids,
        "labels": labels,
        "position_ids": position_ids,
        "cu_seqlens": cu_slots.view(torch.int32)[: packed.segments + 1],
        "max_seqlen": packed.max_seqlen,
        "sample_index": sample_index,
    }


class TokenDataset(Dataset):
    """Packed windows over a shard folder, a run folder (``tokens/<source>/``) or a mixture.

    ``order`` chooses the document order (see ``pipeline.loader.order``), over the
    documents of the folder (a mixture's numbered as ``mixture_corpus`` does); by default a
    mixture folder's own order (``mix.json``; ``epochs`` is then the mixture's business)
    or else ``ShuffledEpochs(seed, epochs)``. The loader draws windows shuffled inside
    blocks, each block in an order that holds the sources' shares in every stretch of it
    (see ``pipeline.loader.sampler``): by default the blocks are the stream's 1M-token
    share windows (a window never moves out of its 1M tokens); ``shuffle_block`` sets
    blocks of that many windows instead (1: stream order). Indexes are cached in
    ``cache_dir`` (default: ``.loader_cache`` beside the shards, or for read-only data a
    folder of the machine's temporary folder).

    Every shard is checked once, here, before any window is read (see
    ``pipeline.formats.indexed_shard.IndexedShard``): the ``.idx`` is well formed (header, sizes
    that fit the file, non-negative lengths, pointers that are the running offsets,
    document index 0..n), the ``.bin`` holds exactly the tokens the index lists (its size,
    by stat) and the sidecar agrees on dtype and counts; a shard listed by an ``.idx``, a
    sidecar or a mixture whose ``.bin`` is missing is an error, not a skipped shard. This
    costs a pass over the small ``.idx`` arrays, no read of the ``.bin``. ``verify=True``
    also hashes every ``.bin`` and compares it with its sidecar's sha256, which catches
    bytes changed in place (it reads all the data: minutes on a large corpus). Any
    failure raises ``pipeline.formats.token_shards.ShardError`` (a ``ValueError``) whose message
    starts with the file at fault; so does a ``.bin`` that changes under the reads (see
    ``ShardCorpus.shard_tokens``). A stream too short for a single window of ``seq_len``
    is a ``ValueError`` giving both counts: a dataset of no window is surely a mistake.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        seq_len: int,
        seed: int = 0,
        epochs: int = 1,
        order: DocumentOrder | None = None,
        shuffle_block: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        verify: bool = False,
    ):
        seq_len, epochs, seed = (
            whole_number("seq_len", seq_len, 1),
            whole_number("epochs", epochs, 1),
            whole_number("seed", seed, 0),
        )
        shuffle_block = None if shuffle_block is None else whole_number("shuffle_block", shuffle_block, 1)
        self.seq_len = seq_len
        self.seed = seed
        self.shuffle_block = shuffle_block
        if is_mixture(path):  # a mixture's own order, unless another is asked for
            self.corpus = mixture_corpus(path, cache_dir, verify)
            order = MixtureOrder(path) if order is None else order
        else:
            self.corpus = ShardCorpus(path, cache_dir, verify=verify)
        self.stream = DocumentStream(self.corpus, order if order is not None else ShuffledEpochs(seed, epochs))
        self.num_samples = max(0, (self.stream.num_tokens - 1) // seq_len)
        if not self.num_samples:  # a loader over it would yield nothing, silently
            raise ValueError(
                f"{path}: no window of seq_len {seq_len} fits: a window takes {seq_len + 1} tokens, "
                f"the document stream holds {self.stream.num_tokens}"
            )
        # What a saved loader state must match: the windows and their order, not file
        # paths or times (a resumed job may read a copy of the data elsewhere). A provider
        # whose cache key holds file times (a mixture's) gives its ``identity()`` instead.
        provider = self.stream.provider
        self.identity = fingerprint(
            "windows",
            provider.identity() if hasattr(provider, "identity") else provider.key(),
            self.corpus.num_documents,
            len(self.stream.order),
            self.stream.num_tokens,
            seq_len,
            seed,
            shuffle_block,
            WINDOW_ORDER_SCHEME,
            SHARE_WINDOW_TOKENS,
            [(source.first_document, source.documents) for source in self.corpus.sources],  # what it balances
        )

    def __len__(self) -> int:
        return self.num_samples

    def window_order(self) -> WindowOrder:
        """The order in which a loader draws windows (same for every rank and world size)."""
        if self.shuffle_block is None:
            block, per = SHARE_WINDOW_TOKENS, self.seq_len
        else:
            block, per = self.shuffle_block, 1
        sources = WindowSources(self.stream, self.seq_len)
        # One source: nothing to balance, the seeded permutation is the balanced order.
        return WindowOrder(self.num_samples, self.seed, block, per, sources if sources.count > 1 else None)

    def warm_up(self) -> None:
        """Build one batch in this process, so that forked workers inherit compiled kernels.

        Loading numba's cached kernels costs a second or more of CPU in each new process;
        paid once here, before a loader forks its workers, instead of in every worker of
        every pass.
        """
        self.__getitems__([0])

    def __getitems__(self, indices) -> PackedBatch | list[PackedBatch]:
        """The batch of windows ``indices``; for a ``BatchChunk``, the list of its batches.

        In a loader's worker the batches are written into the worker's next ring slot.
        """
        chunk = indices if isinstance(indices, BatchChunk) else (indices,)
        ring = active_ring()
        slot, space = ring.claim() if ring is not None else (-1, None)
        offset = 0
        packed = []
        for batch in chunk:
            packed.append(self._pack(np.asarray(batch, dtype=np.int64), slot, space, offset))
            offset += packed[-1].size
        return packed if isinstance(indices, BatchChunk) else packed[0]

    def _pack(self, indices: np.ndarray, slot: int, space: np.ndarray | None, offset: int) -> PackedBatch:
        if len(indices) and (indices.min() < 0 or indices.max() >= self.num_samples):
            raise IndexError(f"window index out of range 0..{self.num_samples - 1}")
        rows, seq_len = len(indices), self.seq_len
        n = rows * seq_len
        pieces = locate(self.stream, indices * seq_len, seq_len + 1)
        segments = count_segments(pieces, seq_len)
        size = packed_size(rows, seq_len, segments)
        if space is not None:  # in a loader's worker: write into the shared slot
            if offset + size > len(space):
                raise ValueError(f"a fetch of {offset + size} elements does not fit a slot of {len(space)}")
            flat, carried = space[offset : offset + size], None
        else:
            # numpy's allocator reuses freed memory; a fresh torch.empty of this size
            # takes new pages from the kernel each time (slow on virtual machines).
            flat = np.empty(size, dtype=np.int64)
            carried = torch.from_numpy(flat)
        self._check_ids(*read_windows(self.stream, pieces, seq_len, flat[:n], flat[n : 2 * n]), indices)
        cu_seqlens = flat[3 * n + rows :].view(np.int32)
        max_seqlen = fill_segments(pieces.row, pieces.begin, rows, seq_len, cu_seqlens, flat[2 * n : 3 * n])
        flat[3 * n : 3 * n + rows] = indices
        return PackedBatch(carried, slot, offset, size, rows, seq_len, segments, max_seqlen)

    def _check_ids(self, low: int, high: int, indices: np.ndarray) -> None:
        """Refuse a batch holding an id outside the shards' vocabulary (``low`` and ``high``:
        its smallest and largest): bytes of a ``.bin`` changed in place (checked by sha256
        only with ``verify=True``) would otherwise reach the model's embedding, where a GPU
        fails with a device-side assert naming no file."""
        vocab = self.corpus.vocab_size
        if vocab is not None and (low < 0 or high >= vocab):
            raise ShardError(
                f"windows {indices.tolist()[:8]}: token id {high if high >= vocab else low} is outside the "
                f"vocabulary of {vocab} ids ({self.corpus.vocab_sidecar}): a shard's .bin changed since it was "
                "written; TokenDataset(..., verify=True) names it"
            )

    def __getitem__(self, index: int) -> dict:
        """One window: ``input_ids``, ``labels``, ``position_ids`` of shape ``[seq_len]``, ..."""
        batch = unpack(self.__getitems__([index]))
        for name in ("input_ids", "labels", "position_ids", "sample_index"):
            batch[name] = batch[name][0]
        return batch
