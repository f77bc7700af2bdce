"""Batch slots in shared memory, allocated once, so workers send only a slot number.

Why: sending a tensor from a DataLoader worker costs a fresh shared-memory segment and a
file-descriptor handshake per tensor, about a millisecond here, which is more than
building the batch. Instead the loader allocates, before its workers start, ``workers x
slots`` shared buffers, each the size of one fetch (a few batches). Worker ``w`` writes
its ``j``-th fetch into its slot ``j % slots`` and returns small ``PackedBatch`` records
naming the slot; the main process hands the batches to the training loop as views of the
slot (no copy), or copies them into pinned memory when asked.

Why a slot is never overwritten too early: the DataLoader keeps ``prefetch_factor``
fetches outstanding per worker, sends task ``t`` to worker ``t % workers`` and sends
one new task each time it returns a fetch; the task it sends on returning fetch ``t``
goes to the same worker. With ``slots = prefetch_factor + 2``, the task that would
reuse fetch ``t``'s slot is sent only when fetch ``t + 2 * workers`` is returned, after
every batch of fetch ``t`` has been delivered. (``in_order=False`` would break this,
so the loader refuses it.) What the training loop does with delivered batches is its own
business: the main process marks a slot ``held`` while any tensor it handed out over
that slot is alive (the slot's storage use count tells), and a worker that finds its
next slot held builds that fetch in fresh memory instead (slower, never wrong). The
second spare slot is what lets a ``for batch in loader`` loop, which still holds the
previous batch while asking for the next, never hit that case.

The ring reaches the workers through ``worker_init_fn`` (it sets this module's
per-process ``_ACTIVE``), so a dataset shared by several loaders is never modified.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import get_worker_info

_ACTIVE: SlotRing | None = None
_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)  # absent from older torch


class SlotRing:
    """``workers * slots`` int64 slots of ``slot_size`` elements in shared memory.

    Each slot is a tensor of its own, so that its storage's use count tells whether the
    training loop still holds a batch in it.
    """

    def __init__(self, workers: int, slots: int, slot_size: int):
        self.slots = slots
        self.buffers = [torch.empty(slot_size, dtype=torch.int64).share_memory_() for _ in range(workers * slots)]
        self.held = torch.zeros(workers * slots, dtype=torch.uint8).share_memory_()
        self._flags = self.held.numpy()
        self._written = 0  # fetches written by this process (meaningful in a worker)
        # Main-process bookkeeping: the slots marked held, and each slot's use count
        # when no tensor over it is out (read through its storage's address).
        self._lent: set[int] = set()
        self._storages = [buffer.untyped_storage()._cdata for buffer in self.buffers]
        self._idle = [_USE_COUNT(storage) for storage in self._storages] if _USE_COUNT else []

    def __getstate__(self) -> dict:
        # For spawned workers: a numpy view would be pickled by value, not shared.
        state = self.__dict__.copy()
        del state["_flags"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._flags = self.held.numpy()

    def claim(self) -> tuple[int, np.ndarray | None]:
        """In a worker: the number and the memory of this worker's next slot, or
        ``(-1, None)`` while the training loop still holds a batch in it."""
        slot = get_worker_info().id * self.slots + self._written % self.slots
        self._written += 1
        if self._flags[slot]:
            return -1, None
        return slot, self.buffers[slot].numpy()

    def view(self, slot: int, offset: int, size: int) -> np.ndarray:
        """A batch's memory in ``slot``, to copy from."""
        return self.buffers[slot].numpy()[offset : offset + size]

    def lend(self, slot: int, offset: int, size: int) -> torch.Tensor:
        """A batch's memory in ``slot``, for the training loop: the slot is held until
        every tensor over it is gone (a copy where torch cannot tell that)."""
        if _USE_COUNT is None:
            return torch.from_numpy(self.view(slot, offset, size).copy())
        self._flags[slot] = 1
        self._lent.add(slot)
        return self.buffers[slot][offset : offset + size]

    def release_unused(self) -> None:
        """In the main process: clear the held mark of slots with no tensor left over them.

        Called each time the training loop asks for a batch, before the DataLoader sends
        new tasks, so a worker sees the slots of dropped batches free.
        """
        for slot in [slot for slot in self._lent if _USE_COUNT(self._storages[slot]) == self._idle[slot]]:
            self._flags[slot] = 0
            self._lent.discard(slot)


def active_ring() -> SlotRing | None:
    """The ring of the loader whose worker this process is (``None`` in the main process)."""
    return _ACTIVE


class RingWorkerInit:
    """``worker_init_fn`` that installs a ring in the worker, then runs the user's own.

    It also takes what the worker inherited out of its garbage collector's reach
    (``gc.freeze``). A forked worker shares its parent's memory copy-on-write (the
    training script's objects, torch's modules); a full collection in the worker would
    write into the header of every inherited object and so copy every page holding one:
    60 MiB more private memory per worker when the parent holds 2M small objects. Objects
    the worker makes are collected as before. ``python -m benchmarks.loader`` measures
    a worker's private memory.
    """

    def __init__(self, ring: SlotRing, user_fn: Callable[[int], None] | None):
        self.ring = ring
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        global _ACTIVE
        _ACTIVE = self.ring
        gc.freeze()
        if self.user_fn is not None:
            self.user_fn(worker_id)
