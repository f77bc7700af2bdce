"""Batch slots in shared memory, allocated once, so workers send only a slot number.

Why: sending a tensor from a DataLoader worker costs a fresh shared-memory segment and a
file-descriptor handshake per tensor, about a millisecond here, which is more than
building the batch. Instead the loader allocates, before its workers start, one shared
buffer of ``workers x slots`` slots, each the size of one fetch (a few batches). Worker
``w`` writes its ``j``-th fetch into its slot ``j % slots`` and returns small
``PackedBatch`` records naming the slot; the main process copies each batch out (into
pinned memory when asked) before handing it to the training loop, so a slot is free
again once its batches are delivered.

Why a slot is never overwritten too early: the DataLoader keeps ``prefetch_factor``
fetches outstanding per worker, sends task ``t`` to worker ``t % workers`` and sends
one new task each time it returns a fetch; the task it sends on returning fetch ``t``
goes to the same worker. With ``slots = prefetch_factor + 1``, the task that would
reuse fetch ``t``'s slot is sent only when fetch ``t + workers`` is returned, after
every batch of fetch ``t`` has been copied out. (``in_order=False`` would break this,
so the loader refuses it.)

The ring reaches the workers through ``worker_init_fn`` (it sets this module's
per-process ``_ACTIVE``), so a dataset shared by several loaders is never modified.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import get_worker_info

_ACTIVE: SlotRing | None = None


class SlotRing:
    """``workers * slots`` int64 slots of ``slot_size`` elements in one shared buffer."""

    def __init__(self, workers: int, slots: int, slot_size: int):
        self.workers = workers
        self.slots = slots
        self.slot_size = slot_size
        self.buffer = torch.empty(workers * slots * slot_size, dtype=torch.int64).share_memory_()
        self._written = 0  # batches written by this process (meaningful in a worker)

    def claim(self) -> tuple[int, torch.Tensor]:
        """In a worker: the number and the memory of this worker's next slot."""
        slot = get_worker_info().id * self.slots + self._written % self.slots
        self._written += 1
        return slot, self.view(slot, 0, self.slot_size)

    def view(self, slot: int, offset: int, size: int) -> torch.Tensor:
        start = slot * self.slot_size + offset
        return self.buffer[start : start + size]


def active_ring() -> SlotRing | None:
    """The ring of the loader whose worker this process is (``None`` in the main process)."""
    return _ACTIVE


class RingWorkerInit:
    """``worker_init_fn`` that installs a ring in the worker, then runs the user's own."""

    def __init__(self, ring: SlotRing, user_fn: Callable[[int], None] | None):
        self.ring = ring
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        global _ACTIVE
        _ACTIVE = self.ring
        if self.user_fn is not None:
            self.user_fn(worker_id)


class ReusableBuffers:
    """Memory for delivered batches, reused once the training loop holds no view of it.

    Why: a fresh buffer per batch takes new pages from the kernel every time, which costs
    more than copying the batch (several times more on virtual machines). A buffer is
    handed out again only when its storage's use count shows that every tensor (and
    numpy array) the training loop was given over it is gone, so holding on to batches is
    always safe. Not for pinned memory: an asynchronous copy to the GPU may still read a
    buffer after its tensors are dropped (torch's pinned caching allocator tracks that,
    so pinned batches are allocated from it instead).
    """

    def __init__(self, size: int, limit: int):
        self.size = size
        self.limit = limit
        self._buffers: list[tuple[torch.Tensor, int]] = []
        self._count = getattr(torch._C, "_storage_Use_Count", None)

    def _in_use(self, buffer: torch.Tensor, idle: int) -> bool:
        return self._count(buffer.untyped_storage()._cdata) > idle

    def take(self) -> torch.Tensor:
        for buffer, idle in self._buffers:
            if not self._in_use(buffer, idle):
                return buffer
        buffer = torch.empty(self.size, dtype=torch.int64)
        if self._count is not None and len(self._buffers) < self.limit:
            self._buffers.append((buffer, self._count(buffer.untyped_storage()._cdata)))
        return buffer
