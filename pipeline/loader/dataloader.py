"""``build_dataloader``: a standard torch DataLoader over a TokenDataset, sharded and resumable.

Why a DataLoader subclass and not a custom loop: training scripts already know
DataLoader (workers, prefetch, pinned memory, persistent workers); ours only adds the
batch sampler that shards by rank and the two methods ``state_dict`` /
``load_state_dict``. Workers receive batches of window ids from the sampler round-robin
and return whole packed batches (see ``TokenDataset.__getitems__``), which the
DataLoader delivers in sampler order, so the output is deterministic whatever the number
of workers.

The state is counted where batches leave the loader for the training loop, not where
workers produce them: batches prefetched but never handed over are produced again after
a resume. It is a handful of integers: the pass number and the global count of samples
consumed in the pass (by all ranks, in lockstep), plus what identifies the data and the
window order (``sampler.WINDOW_ORDER_SCHEME``). It is the same on every rank, so rank 0
can save it for all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from pipeline.loader.dataset import PackedBatch, TokenDataset, largest_packed_size, unpack
from pipeline.loader.ring import RingWorkerInit, SlotRing
from pipeline.loader.sampler import WINDOW_ORDER_SCHEME, RankBatchSampler

STATE_VERSION = 1


def _keep(batch: PackedBatch) -> PackedBatch:
    """The collate function: the dataset already returns a collated batch."""
    return batch


class TokenDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` of packed batches with exact, elastic resume.

    Iterating continues from the current state: from the beginning of a pass, from
    where a previous (interrupted) iteration stopped, or from a loaded state. After a
    pass completes, the next iteration starts the next pass, with the same windows in
    the same order (ask ``TokenDataset`` for more ``epochs`` to see new orders).
    """

    def __init__(
        self,
        dataset: TokenDataset,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 2,
        prefetch_factor: int | None = None,
        pin_memory: bool | None = None,
        drop_last: bool = True,
        persistent_workers: bool = False,
        batches_per_fetch: int = 8,
        **kwargs: Any,
    ):
        sampler = RankBatchSampler(dataset.window_order(), batch_size, rank, world_size, drop_last, batches_per_fetch)
        if kwargs.get("in_order", True) is False:
            raise ValueError("in_order=False would make batches depend on worker timing; it is not supported")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        self._user_worker_init = kwargs.pop("worker_init_fn", None)
        super().__init__(
            dataset,
            batch_sampler=sampler,
            num_workers=num_workers,
            collate_fn=_keep,
            pin_memory=False,  # batches are pinned as they leave the ring, see _deliver
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers and num_workers > 0,
            worker_init_fn=self._user_worker_init,
            **kwargs,
        )
        self.pin_batches = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.samples_per_batch = batch_size
        self.rank = rank
        self.world_size = world_size
        self._ring: SlotRing | None = None
        self._epoch = 0
        self._consumed = 0
        self._generation = 0

    def _prepare_ring(self) -> None:
        """A fresh ring for fresh workers (persistent workers keep theirs)."""
        if self.num_workers == 0 or (self.persistent_workers and self._iterator is not None):
            return
        dataset: TokenDataset = self.dataset
        dataset.warm_up()
        slot_size = self.batch_sampler.batches_per_fetch * largest_packed_size(self.samples_per_batch, dataset.seq_len)
        self._ring = SlotRing(self.num_workers, self.prefetch_factor + 2, slot_size)
        self.worker_init_fn = RingWorkerInit(self._ring, self._user_worker_init)

    def _deliver(self, packed: PackedBatch) -> dict:
        """The batch dict: views of its ring slot, or a copy in pinned memory if asked.

        The copy is a single-threaded numpy copy (``Tensor.copy_`` would wake intra-op
        threads for this size) into torch's caching pinned allocator.
        """
        if packed.buffer is None:
            if self.pin_batches:
                buffer = torch.empty(packed.size, dtype=torch.int64, pin_memory=True)
                np.copyto(buffer.numpy(), self._ring.view(packed.slot, packed.offset, packed.size))
            else:
                buffer = self._ring.lend(packed.slot, packed.offset, packed.size)
        elif self.pin_batches:
            buffer = packed.buffer.pin_memory()
        else:
            buffer = packed.buffer
        return unpack(packed, buffer)

    def __iter__(self):
        self._generation += 1
        generation = self._generation
        sampler: RankBatchSampler = self.batch_sampler
        start = self._consumed
        sampler.start = start
        step = self.samples_per_batch * self.world_size
        handed = 0
        self._prepare_ring()
        for fetched in super().__iter__():
            for packed in fetched if isinstance(fetched, list) else (fetched,):
                if generation != self._generation:
                    return  # a newer iteration or a loaded state took over
                batch = self._deliver(packed)
                handed += 1
                self._consumed = min(start + handed * step, sampler.num_samples)
                yield batch
                if self._ring is not None:
                    self._ring.release_unused()
        if generation == self._generation:
            self._epoch += 1
            self._consumed = 0
            sampler.start = 0

    def __len__(self) -> int:
        """Batches left in this pass for this rank (a whole pass before it starts)."""
        return self.batch_sampler.num_batches()

    def state_dict(self) -> dict[str, Any]:
        """Where the training loop is: constant size, the same on every rank."""
        dataset: TokenDataset = self.dataset
        return {
            "version": STATE_VERSION,
            "window_order": WINDOW_ORDER_SCHEME,
            "dataset": dataset.identity,
            "num_samples": len(dataset),
            "seq_len": dataset.seq_len,
            "seed": dataset.seed,
            "epoch": self._epoch,
            "samples": self._consumed,
            "world_size": self.world_size,
            "batch_size": self.samples_per_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next iteration yields what an uninterrupted run would.

        The world size and batch size may differ from the run that saved it: iteration
        continues at the saved global sample count, repeating and skipping nothing.
        The data (windows and their order) must be the same.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported loader state version {state.get('version')!r}")
        scheme = state.get("window_order", "plain blocks of 4,096 windows (before share windows)")
        if scheme != WINDOW_ORDER_SCHEME:
            raise ValueError(
                f"loader state was saved under window order {scheme!r}, this loader draws {WINDOW_ORDER_SCHEME!r}: "
                "resuming would give other batches; resume with the loader version that saved it"
            )
        dataset: TokenDataset = self.dataset
        expected = {"dataset": dataset.identity, "num_samples": len(dataset), "seq_len": dataset.seq_len}
        for key, value in expected.items():
            if state.get(key) != value:
                raise ValueError(f"loader state is for other data: {key} {state.get(key)!r} != {value!r}")
        samples = int(state["samples"])
        if not 0 <= samples <= len(dataset):
            raise ValueError(f"loader state has {samples} samples consumed, outside 0..{len(dataset)}")
        self._generation += 1
        self._epoch = int(state["epoch"])
        self._consumed = samples
        self.batch_sampler.start = samples


def build_dataloader(
    dataset: TokenDataset,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 2,
    **options: Any,
) -> TokenDataLoader:
    """A DataLoader of ``rank``'s share of ``dataset``: ``batch_size`` windows per batch.

    Options (see ``TokenDataLoader``): ``prefetch_factor`` (default 2 fetches per
    worker), ``pin_memory`` (default: whether CUDA is present; batches are then copied
    from the workers' shared ring into pinned memory, so the base DataLoader's pinning
    thread is off; unpinned batches are views of the ring), ``drop_last`` (default True:
    every rank takes the same number of full batches), ``persistent_workers``,
    ``batches_per_fetch`` (default 8: a worker builds that many batches per task and
    sends them in one message, as a message costs the main process and the worker
    several times what building a batch does); anything else goes to
    ``torch.utils.data.DataLoader`` (``multiprocessing_context``, ``timeout``,
    ``worker_init_fn``, ...).
    """
    return TokenDataLoader(dataset, batch_size, rank=rank, world_size=world_size, num_workers=num_workers, **options)
