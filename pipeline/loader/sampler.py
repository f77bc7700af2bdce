"""Which windows each rank gets, in which order, from any point of a pass (no torch).

Why this shape: exactly-once sharding and exact resume both follow from one rule that
depends only on the global count of samples consumed. From global position ``start``,
global batch ``b`` holds sample positions ``[start + b*B, start + (b+1)*B)`` and goes to
rank ``b % world_size``; a position is turned into a window id by ``WindowOrder``. The
DataLoader hands each rank's batches to its workers round-robin and returns them in
order, so workers need no sharding logic of their own. Resuming, even with another
world size or batch size, just restarts the rule at the saved global count.

The window shuffle, and why it keeps a mixture's shares. Windows are shuffled so that
the windows of a batch come from many documents, but only inside blocks, so the
stream's coarse order (epochs, a mixture's curriculum and phases) is kept. A plain
shuffle inside blocks of 4,096 windows let sources drift by 1 to 3.5 points in the
1M-token windows of what the model saw (``--code 0.25 --math 0.08``, seq_len 1024), where
the plan itself is within 0.2: part of a block is a random sample of its windows, and
most windows hold a single source. Blocks of 1M tokens alone fix the 1M-token windows
that match them, not the spans across two blocks (2.5 points). So, by default:

- **Blocks are the share windows.** Block ``k`` holds the windows whose first token lies
  in ``[k * 1M, (k + 1) * 1M)`` of the stream (``SHARE_WINDOW_TOKENS``: 976 or 977
  windows of 1,024 tokens), the windows ``prep mix`` plans shares on. A window never
  leaves its 1M tokens, so order beyond that is the mixture's, and the aligned 1M-token
  windows of training order (counted from the start of the pass) hold what the plan's
  hold, but for the window cut at each edge.
- **Every stretch of a block holds the block's mix** (``balanced_order``). Windows are
  classed single-source (a class per source) or mixed; each class, in a seeded random
  order, is spread evenly over the block (member ``r`` of ``n`` at ``(2r + 1) / 2n`` of
  the way), so a window's place does not depend on its kind (documents per window are
  the same early and late in a block). Walking the block, the next window is the first
  of the next ``BALANCE_POOL`` of that order that keeps the prefix within
  ``BALANCE_TOLERANCE`` of a window's tokens (Euclidean, over sources) of the block's
  composition, else the one that comes closest. The most typical window goes last,
  where an aligned 1M-token window cuts.

So any 1M-token span of training order (the end of one block, the start of the next)
holds those blocks' compositions, which are the plan's, within about a window's tokens
per source at each end: the plan's own deviation passes through, plus a term that grows
with seq_len (a window is seq_len / 1M of the span). ``python -m benchmarks.mix_stream``:
worst 0.19 points in aligned 1M-token windows and 0.30 in sliding ones (one starting at
every window), where the plan, read in stream order, has 0.18 and 0.33; seq_len 2048:
0.21 and 0.36.

Why resume and ranks stay exact: a block's order is a pure function of the seed, the
block number and its windows' source counts, which come from the stream (the same
cached arrays on every rank and for every world size); integer counts and IEEE
arithmetic in a fixed order (no fast-math) make it the same on every machine. Nothing
depends on what came before the block, so ``span`` starts at any position by computing
that block's order (under a millisecond for 1,000 windows), cached while the batches
stay in it. A single-source corpus gets exactly the seeded permutation (nothing to
balance). ``shuffle_block`` (windows) sets the block size instead; blocks are still
balanced. A loader state saved under the former shuffle is refused, naming both orders.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np

from pipeline.compile.jit import njit

WINDOW_SEED_TAG = 0x77696E  # keeps window shuffles independent of document shuffles
SHARE_WINDOW_TOKENS = 1_000_000  # the window ``prep mix`` holds shares in (``window_shares``)
BALANCE_POOL = 128  # how far ahead of the stratified order a window may be taken
BALANCE_TOLERANCE = 0.75  # of a window's tokens: prefixes closer than this need no correction
# Part of a loader state's data identity: a saved position means other windows under another scheme.
WINDOW_ORDER_SCHEME = "share-window-balanced-1"


@njit
def _stratified(tokens, shuffled):
    """``shuffled`` with each class (single-source windows of each source; mixed windows)
    spread evenly: member ``r`` of ``n`` at time ``(2r + 1) / 2n``, ties in shuffled order."""
    size, sources = tokens.shape
    kind = np.full(size, sources, np.int64)
    for w in range(size):
        window = 0
        for s in range(sources):
            window += tokens[w, s]
        for s in range(sources):
            if window > 0 and tokens[w, s] == window:
                kind[w] = s
    members = np.zeros(sources + 1, np.int64)
    for w in range(size):
        members[kind[w]] += 1
    rank = np.zeros(sources + 1, np.int64)
    times = np.empty(size, np.float64)
    for i in range(size):
        c = kind[shuffled[i]]
        times[i] = (2.0 * rank[c] + 1.0) / (2.0 * members[c])  # exact IEEE division: the same everywhere
        rank[c] += 1
    return shuffled[np.argsort(times, kind="mergesort")]


@njit
def _distance(deviation, tokens, w, size, total):
    """Squared distance from the block's composition after taking window ``w`` (tokens x size)."""
    score = 0.0
    for s in range(len(total)):
        d = float(deviation[s] + size * tokens[w, s] - total[s])
        score += d * d
    return score


@njit
def _balanced_order(tokens, shuffled, pool_size, tolerance):
    size, sources = tokens.shape
    out = np.empty(size, np.int64)
    if size == 0:
        return out
    total = np.zeros(sources, np.int64)
    window = 0  # tokens of the largest window (every window of a pass: seq_len)
    for w in range(size):
        held = 0
        for s in range(sources):
            total[s] += tokens[w, s]
            held += tokens[w, s]
        window = max(window, held)
    base = _stratified(tokens, shuffled)
    deviation = np.zeros(sources, np.int64)  # size * (tokens taken) - taken * total, per source
    # The most typical window (the last of equals) goes last.
    last, best = size - 1, -1.0
    for i in range(size):
        score = _distance(deviation, tokens, base[i], size, total)
        if best < 0 or score <= best:
            last, best = i, score
    out[size - 1] = base[last]
    for i in range(last, size - 1):
        base[i] = base[i + 1]
    walk = size - 1
    limit = (tolerance * window * size) ** 2
    pool = np.empty(max(1, min(pool_size, walk)), np.int64)
    filled = 0
    while filled < len(pool) and filled < walk:
        pool[filled] = base[filled]
        filled += 1
    following = filled
    for j in range(walk):
        chosen, best = 0, -1.0
        for i in range(filled):
            score = _distance(deviation, tokens, pool[i], size, total)
            if score <= limit:
                chosen = i
                break
            if best < 0 or score < best:
                chosen, best = i, score
        w = pool[chosen]
        out[j] = w
        for s in range(sources):
            deviation[s] += size * tokens[w, s] - total[s]
        for i in range(chosen, filled - 1):
            pool[i] = pool[i + 1]
        filled -= 1
        if following < walk:
            pool[filled] = base[following]
            filled += 1
            following += 1
    return out


def balanced_order(tokens: np.ndarray, shuffled: np.ndarray) -> np.ndarray:
    """A block's order (indices into it) whose every prefix holds about the block's mix.

    ``tokens``: ``(windows, sources)`` int64, each source's tokens in each window's
    inputs; ``shuffled``: a seeded permutation of the block. See the module docstring.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    shuffled = np.ascontiguousarray(shuffled, dtype=np.int64)
    return _balanced_order(tokens, shuffled, BALANCE_POOL, BALANCE_TOLERANCE)


class WindowOrder:
    """Maps a position in a pass to a window id: a seeded, balanced shuffle within blocks.

    Block ``k`` holds positions ``[ceil(k * block / per), ceil((k + 1) * block / per))``:
    ``block / per`` windows (a fraction), so ``block=SHARE_WINDOW_TOKENS, per=seq_len``
    makes the blocks the stream's 1M-token share windows, and ``per=1`` blocks of
    ``block`` windows (``block <= per``: no shuffle). A block's permutation depends
    only on ``(seed, block number)`` and, with ``sources`` (a ``WindowSources``, or any
    ``(first, count) -> (count, sources)`` token counts), on its windows' sources:
    nothing to store, the same on every rank.
    """

    def __init__(
        self,
        num_samples: int,
        seed: int,
        block: int,
        per: int = 1,
        sources: Callable[[int, int], np.ndarray] | None = None,
    ):
        if per < 1:
            raise ValueError("per must be at least 1")
        self.num_samples = num_samples
        self.seed = seed
        self.block = block
        self.per = per
        self.sources = sources
        self._cached: tuple[int, np.ndarray] | None = None

    def block_of(self, position: int) -> int:
        return position * self.per // self.block

    def block_start(self, block_id: int) -> int:
        return min(self.num_samples, -(-block_id * self.block // self.per))

    def _permutation(self, block_id: int) -> np.ndarray:
        if self._cached is None or self._cached[0] != block_id:
            first = self.block_start(block_id)
            size = self.block_start(block_id + 1) - first
            rng = np.random.default_rng([self.seed, WINDOW_SEED_TAG, block_id])
            permutation = rng.permutation(size)
            if self.sources is not None and size > 1:
                permutation = balanced_order(self.sources(first, size), permutation)
            self._cached = (block_id, first + permutation)
        return self._cached[1]

    def span(self, start: int, stop: int) -> np.ndarray:
        """The window ids (int64) of positions ``start .. stop - 1`` of the pass.

        Positions of a batch are consecutive, so they are slices of (usually one) block
        permutation: a few numpy calls per batch, in the loader's main process.
        """
        if self.block <= self.per:
            return np.arange(start, stop, dtype=np.int64)
        ids = [np.zeros(0, dtype=np.int64)]  # so that an empty range gives an empty array
        while start < stop:
            block_id = self.block_of(start)
            first, end = self.block_start(block_id), min(stop, self.block_start(block_id + 1))
            ids.append(self._permutation(block_id)[start - first : end - first])
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


def whole_number(name: str, value: object, least: int) -> int:
    """``value`` as an int, refused unless a whole number of at least ``least``, in one line
    naming it: a float failed deep in numpy or range() with a TypeError, a negative seed in
    numpy's generator, ``True`` passed as 1 (and a loader state, which records seq_len,
    seed and batch_size, refuses bools), a shuffle_block below 1 meant stream order
    without a word."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be an integer of at least {least}, not {value!r}")
    return int(value)


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
        world_size, rank = whole_number("world_size", world_size, 1), whole_number("rank", rank, 0)
        if rank >= world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        batch_size = whole_number("batch_size", batch_size, 1)
        batches_per_fetch = whole_number("batches_per_fetch", batches_per_fetch, 1)
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
