"""Which documents, in which order.

Each source's documents form a sequence: whole passes over the source for whole epochs,
then the fraction still needed, picked by a hash of (document id, seed) so the choice
never depends on worker count or file order. Within a pass, documents are ordered by
the curriculum key (easy to hard), or by the same hash when there is none. Phases take
consecutive stretches of each sequence, so an ordered curriculum advances across phases.

Inside a phase, sources are interleaved like weighted fair queueing: each document is
given the point of the phase at which its source, running exactly on target, would reach
its middle, and all documents are merged by that point. Every source's realised share
then stays within about one document's length of its target at every position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.kernels.mixing import splitmix64
from pipeline.mix.inventory import Inventory
from pipeline.mix.plan import Plan


def seeded_hash(id_hashes: np.ndarray, seed: int, repetition: int) -> np.ndarray:
    # Modulo 2**64: any int seed (negative, or past uint64) salts; those in range as before.
    salt = splitmix64(np.array([(seed * 1_000_003 + repetition) % 2**64], dtype=np.uint64))[0]
    return splitmix64(id_hashes ^ salt)


def source_sequence(
    lengths: np.ndarray, id_hashes: np.ndarray, demand: int, seed: int, key: np.ndarray | None
) -> np.ndarray:
    """Document indices (repeats allowed) whose tokens add up to ``demand`` as closely as
    whole documents allow."""
    available = int(lengths.sum())
    if demand <= 0 or available == 0:
        return np.zeros(0, dtype=np.int64)
    full, remainder = divmod(demand, available)
    passes = []
    for repetition in range(full + (1 if remainder else 0)):
        # Hashes are distinct (up to 2^-64 collisions), so any sort gives one order.
        order = np.argsort(seeded_hash(id_hashes, seed, repetition))
        if repetition == full:  # the partial pass: the hash picks which documents
            cumulative = np.cumsum(lengths[order])
            take = int(np.searchsorted(cumulative, remainder, side="left"))
            # Whole documents: stop at whichever boundary is nearer the target.
            if take < len(order) and (take == 0 or cumulative[take] - remainder < remainder - cumulative[take - 1]):
                take += 1
            order = order[:take]
        if key is not None:
            order = order[np.argsort(key[order], kind="stable")]
        passes.append(order.astype(np.int64))
    return np.concatenate(passes)


@dataclass
class MixOrder:
    sources: list[str]
    source: np.ndarray  # uint16 index into ``sources``, one per position
    document: np.ndarray  # int64 document index within its source
    tokens: np.ndarray  # int64 tokens of the document at each position
    phase_starts: list[int]  # first position of each phase (and the end, last)
    used: dict[str, int]  # tokens each source supplies


def build_order(inventory: Inventory, plan: Plan, seed: int, keys: dict[str, np.ndarray | None]) -> MixOrder:
    names = sorted(inventory.sources)
    sequences = {}
    for name in names:
        source = inventory.sources[name]
        demand = sum(t[name] for t in plan.targets)
        sequence = source_sequence(source.lengths, source.id_hashes, demand, seed, keys.get(name))
        sequences[name] = (sequence, np.cumsum(source.lengths[sequence]))
    cursors = {name: 0 for name in names}
    cumulative_target = {name: 0 for name in names}
    parts_source, parts_document, parts_tokens, phase_starts = [], [], [], [0]
    for phase, targets in enumerate(plan.targets):
        points, owners, documents, lengths = [], [], [], []
        for index, name in enumerate(names):
            sequence, cumulative = sequences[name]
            cumulative_target[name] += targets[name]
            last_phase = phase == len(plan.targets) - 1
            end = len(sequence) if last_phase else _nearest_boundary(cumulative, cumulative_target[name])
            start = cursors[name]
            cursors[name] = end
            if end <= start or targets[name] <= 0:
                continue
            piece = sequence[start:end]
            piece_lengths = inventory.sources[name].lengths[piece]
            progress = np.cumsum(piece_lengths) - piece_lengths / 2
            points.append(progress / max(targets[name], 1))
            owners.append(np.full(len(piece), index, dtype=np.uint16))
            documents.append(piece)
            lengths.append(piece_lengths)
        if points:
            point = np.concatenate(points)
            owner = np.concatenate(owners)
            # Stable: ties keep source order, since pieces were concatenated by source.
            merge = np.argsort(point, kind="stable")
            parts_source.append(owner[merge])
            parts_document.append(np.concatenate(documents)[merge])
            parts_tokens.append(np.concatenate(lengths)[merge])
        phase_starts.append(phase_starts[-1] + (len(merge) if points else 0))
    source = np.concatenate(parts_source) if parts_source else np.zeros(0, np.uint16)
    tokens = np.concatenate(parts_tokens) if parts_tokens else np.zeros(0, np.int64)
    used = {name: int(tokens[source == i].sum()) for i, name in enumerate(names)}
    return MixOrder(
        sources=names,
        source=source,
        document=np.concatenate(parts_document) if parts_document else np.zeros(0, np.int64),
        tokens=tokens,
        phase_starts=phase_starts,
        used=used,
    )


def _nearest_boundary(cumulative: np.ndarray, target: int) -> int:
    """How many documents of the sequence bring its tokens nearest ``target``."""
    take = int(np.searchsorted(cumulative, target, side="left"))
    if take < len(cumulative) and (take == 0 or cumulative[take] - target < target - cumulative[take - 1]):
        take += 1
    return take


def window_shares(order: MixOrder, window: int) -> np.ndarray:
    """Each source's share of tokens in consecutive windows of ``window`` tokens
    (rows: windows, columns: sources), counting each document's tokens where they fall."""
    total = int(order.tokens.sum())
    windows = max(total // window, 0)
    shares = np.zeros((windows, len(order.sources)))
    if windows == 0:
        return shares
    ends = np.cumsum(order.tokens)
    starts = ends - order.tokens
    edges = np.arange(windows + 1, dtype=np.int64) * window
    for index in range(len(order.sources)):
        mine = order.source == index
        # Tokens of this source before each edge: whole documents before it, plus the
        # part of the document that straddles it.
        s, e = starts[mine], ends[mine]
        before = np.concatenate(([0], np.cumsum(e - s)))
        at = np.searchsorted(e, edges, side="right")
        straddle = np.where(at < len(s), np.clip(edges - s[np.minimum(at, len(s) - 1)], 0, None), 0)
        upto = before[at] + straddle
        shares[:, index] = np.diff(upto) / window
    return shares
