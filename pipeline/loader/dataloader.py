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

import warnings
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from pipeline.formats.token_shards import ShardError
from pipeline.loader.dataset import PackedBatch, TokenDataset, largest_packed_size, unpack
from pipeline.loader.ring import RingWorkerInit, SlotRing
from pipeline.loader.sampler import WINDOW_ORDER_SCHEME, RankBatchSampler, rank_batch_count
from pipeline.loader.state import STATE_VERSION, check_state


def _refuse_an_empty_rank(sampler: RankBatchSampler, seq_len: int) -> None:
    """A rank that gets no batch of a whole pass would train on nothing, silently (or
    leave DDP's other ranks waiting for it): surely a mistake, refused saying why."""
    if sampler.num_batches():
        return
    windows, batch_size, world_size = sampler.num_samples, sampler.batch_size, sampler.world_size
    if sampler.drop_last:
        why = f"no full round of {world_size} batches of {batch_size} (drop_last=True drops a partial round)"
    else:
        why = f"{-(-windows // batch_size)} batches of {batch_size}, fewer than the world size {world_size}"
    raise ValueError(
        f"rank {sampler.rank} would get no batch: {windows} windows of seq_len {seq_len} make {why}; "
        "use a smaller batch_size, world_size or seq_len, or more data"
    )


def _pin_batches(pin_memory: bool | None) -> bool:
    """Whether batches are copied into pinned memory: by default when CUDA is there; when
    asked for without an accelerator, not, with torch's own DataLoader warning (pinning
    then raised ``RuntimeError: Cannot access accelerator device`` on the first batch, so a
    GPU script could not be tried on a CPU machine)."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6 and later
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if pin_memory and not available:
        warnings.warn(
            "'pin_memory' argument is set as true but no accelerator is found, "
            "then device pinned memory won't be used.",
            stacklevel=3,
        )
        return False
    return torch.cuda.is_available() if pin_memory is None else pin_memory


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
        _refuse_an_empty_rank(sampler, dataset.seq_len)
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
        self.pin_batches = _pin_batches(pin_memory)
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
        try:
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
        except (ShardError, RuntimeError) as error:
            cause = self._shard_at_fault(error)
            if cause is error:
                raise
            raise cause from None
        if generation == self._generation:
            self._epoch += 1
            self._consumed = 0
            sampler.start = 0

    def _shard_at_fault(self, error: Exception) -> Exception:
        """The one-line ``ShardError`` behind a worker's failure, else ``error`` itself.

        A worker's ``ShardError`` reaches this process re-raised by torch with the worker's
        traceback as its message; its last line is the error's own. A worker that died
        outright ("exited unexpectedly", "killed by signal": a SIGBUS from a ``.bin``
        truncated during a read) leaves no message at all, so the shards are checked here,
        and one whose size changed is named instead.
        """
        lines = str(error).strip().splitlines()
        if isinstance(error, ShardError):
            if len(lines) > 1 and lines[0].startswith("Caught ShardError"):
                return ShardError(lines[-1].split("ShardError: ", 1)[-1])
            return error
        if not lines or not lines[0].startswith("DataLoader worker"):
            return error
        try:
            self.dataset.corpus.check_unchanged()
        except ShardError as cause:
            return cause
        return error

    def __len__(self) -> int:
        """Batches left in this pass for this rank (a whole pass before it starts).

        Counted from the samples consumed (``state_dict``'s), not from where the sampler
        last started: after a loop that broke off, or mid-iteration, the sampler's start
        is still that of the iteration, and the count was of a whole pass.
        """
        sampler: RankBatchSampler = self.batch_sampler
        remaining = sampler.num_samples - self._consumed
        return rank_batch_count(remaining, sampler.batch_size, sampler.rank, sampler.world_size, sampler.drop_last)

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
        The data (windows and their order) must be the same. Every key is checked
        (``pipeline.loader.state``): a missing, mistyped or out-of-range one is a
        ``ValueError`` naming it, before the loader moves.
        """
        dataset: TokenDataset = self.dataset
        expected = {"dataset": dataset.identity, "num_samples": len(dataset), "seq_len": dataset.seq_len}
        state = check_state(state, {**expected, "seed": dataset.seed})
        self._generation += 1
        self._epoch = state["epoch"]
        self._consumed = self.batch_sampler.start = state["samples"]


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
