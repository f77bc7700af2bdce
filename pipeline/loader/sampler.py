"""Which windows each rank gets, in which order, from any point of a pass (no torch).

Why this shape: exactly-once sharding and exact resume both follow from one rule that
depends only on the global count of samples consumed. From global position ``start``,
global batch ``b`` holds sample positions ``[start + b*B, start + (b+1)*B)`` and goes to
rank ``b % world_size``; a position is turned into a window id by ``WindowOrder``. The
DataLoader hands each rank's batches to its workers round-robin and returns them in
order, so workers need no sharding logic of their own. Resuming, even with another
world size or batch size, just restarts the rule at the saved global count.
"""

from __future__ import annotations

import numpy as np

WINDOW_SEED_TAG = 0x77696E  # keeps window shuffles independent of document shuffles


class WindowOrder:
    """Maps a position in a pass to a window id: a seeded shuffle within blocks.

    Windows are shuffled inside consecutive blocks of ``block`` windows (``block <= 1``:
    no shuffle), so the windows of a batch come from many documents while the stream's
    coarse order (epochs, a mixture's curriculum) is kept. A block's permutation depends
    only on ``(seed, block number)``: nothing to store, the same on every rank.
    """

    def __init__(self, num_samples: int, seed: int, block: int):
        self.num_samples = num_samples
        self.seed = seed
        self.block = block
        self._cached: tuple[int, np.ndarray] | None = None

    def _permutation(self, block_id: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != block_id:
            size = min(self.block, self.num_samples - block_id * self.block)
            rng = np.random.default_rng([self.seed, WINDOW_SEED_TAG, block_id])
            self._cached = (block_id, rng.permutation(size))
        return self._cached[1]

    def span(self, start: int, stop: int) -> np.ndarray:
        """The window ids (int64) of positions ``start .. stop - 1`` of the pass.

        Positions of a batch are consecutive, so they are slices of (usually one) block
        permutation: a few numpy calls per batch, in the loader's main process.
        """
        if self.block <= 1:
            return np.arange(start, stop, dtype=np.int64)
        ids = [np.zeros(0, dtype=np.int64)]  # so that an empty range gives an empty array
        while start < stop:
            block_id, inside = divmod(start, self.block)
            end = min(stop, (block_id + 1) * self.block)
            ids.append(block_id * self.block + self._permutation(block_id)[inside : inside + end - start])
            start = end
        return np.concatenate(ids)


def rank_batch_count(remaining: int, batch_size: int, rank: int, world_size: int, drop_last: bool) -> int:
    """How many batches ``rank`` gets from ``remaining`` samples.

    With ``drop_last`` every rank gets the same number of full batches (DDP needs equal
    step counts) and fewer than ``batch_size * world_size`` trailing samples are left
    out; without it the last batch may be short and ranks may differ by one batch.
    """
    if remaining <= 0:
        return 0
    if drop_last:
        return (remaining // batch_size) // world_size
    total = -(-remaining // batch_size)
    return len(range(rank, total, world_size))


class BatchChunk(tuple):
    """The window ids of up to ``batches_per_fetch`` consecutive batches of one rank.

    What the sampler yields: one DataLoader task, so one worker builds these batches
    together and one message carries them (per-message costs dominate otherwise).
    """


class RankBatchSampler:
    """The batch sampler of one rank: yields ``BatchChunk``s of window ids from ``start``.

    ``start`` (global samples already consumed) is read when iteration begins; the
    loader sets it from its state.
    """

    def __init__(
        self,
        window_order: WindowOrder,
        batch_size: int,
        rank: int,
        world_size: int,
        drop_last: bool,
        batches_per_fetch: int = 1,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        if batch_size < 1 or batches_per_fetch < 1:
            raise ValueError("batch_size and batches_per_fetch must be at least 1")
        self.window_order = window_order
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.batches_per_fetch = batches_per_fetch
        self.start = 0

    @property
    def num_samples(self) -> int:
        return self.window_order.num_samples

    def num_batches(self) -> int:
        """Batches this rank yields from ``start`` to the end of the pass."""
        remaining = self.num_samples - self.start
        return rank_batch_count(remaining, self.batch_size, self.rank, self.world_size, self.drop_last)

    def __len__(self) -> int:
        return -(-self.num_batches() // self.batches_per_fetch)

    def batch(self, step: int, start: int) -> np.ndarray:
        """Window ids of this rank's ``step``-th batch counted from global ``start``."""
        first = start + (self.rank + step * self.world_size) * self.batch_size
        return self.window_order.span(first, min(first + self.batch_size, self.num_samples))

    def __iter__(self):
        start, count, per = self.start, self.num_batches(), self.batches_per_fetch
        for first in range(0, count, per):
            yield BatchChunk(self.batch(step, start) for step in range(first, min(first + per, count)))
