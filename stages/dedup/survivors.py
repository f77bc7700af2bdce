"""Pick each cluster's survivors and decide, member by member, who is removed and why.

Why separate: this is the only place policy lives. Members of a cluster are ranked: a
document of the imported index first (those are never removed), then the highest
survivor signal (null lowest), the smallest ``id``, the smallest gid. The best member
survives; a member is removed for it as ``exact-duplicate`` when its normalised-text hash
equals the survivor's, or as ``near-duplicate`` when its similarity to the survivor
(exact Jaccard of shingle sets with ``verify``, else the estimate from the stored
signatures) is at least ``min_similarity``. Members below that bar only reached the
cluster through a chain of other documents (A~B, B~C, A and C unlike); the best of them
survives in turn and the same test repeats among the rest (greedy star clustering), so
chaining neither removes C for A nor keeps two duplicates of each other.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.compile.jit import njit
from stages.dedup.minhash import jaccard_sorted
from stages.dedup.store import fixed_binary_matrix, list_values

# A removed document: the survivor it is removed for, by id (what the filter phase
# writes) and by gid (one document: ids may repeat, across sources above all; the filter
# names the survivor's source from it, and the clusters are counted by it).
DECIDED = pa.schema(
    [
        pa.field("gid", pa.int64()),
        pa.field("reason", pa.uint8()),
        pa.field("similarity", pa.float32()),
        pa.field("survivor", pa.string()),
        pa.field("survivor_gid", pa.int64()),
    ]
)
REASONS = ("exact-duplicate", "near-duplicate")  # reason codes 0 and 1
# Survivors tried per cluster before the rest of it is kept as is (bounds the work on
# huge clusters of mutually dissimilar documents chained by LSH).
MAX_SURVIVORS = 1000


def decide(members: pa.Table, *, imported: int, verify: bool, min_similarity: float, exact: bool) -> pa.Table:
    """Decisions (``DECIDED`` rows) for the clusters of ``members`` (rows of
    ``shipping.member_schema``: each member's gid, its cluster's centre ``comp``, its
    attributes), in any order."""
    if members.num_rows == 0:
        return DECIDED.empty_table()
    gids = members.column("gid").to_numpy()
    comp = members.column("comp").to_numpy()
    ranking = pa.table(
        {
            "comp": comp,
            "locked": (gids < imported).astype(np.int8),
            "quality": members.column("quality"),
            "id": members.column("id"),
            "gid": gids,
        }
    )
    keys = [
        ("comp", "ascending"),
        ("locked", "descending"),
        ("quality", "descending"),
        ("id", "ascending"),
        ("gid", "ascending"),
    ]
    order = pc.sort_indices(ranking, sort_keys=[(k, d, "at_end") for k, d in keys]).to_numpy()
    sorted_comp = comp[order]
    head = np.ones(len(order), bool)
    head[1:] = sorted_comp[1:] != sorted_comp[:-1]
    bounds = np.append(np.flatnonzero(head), len(order))
    sig = fixed_binary_matrix(members.column("sig"))[order]
    hashes = members.column("exact").to_numpy()[order]
    if verify:
        values, offsets = _select(*list_values(members.column("shingles")), order)
    else:
        values, offsets = np.empty(0, np.uint64), np.zeros(1, np.int64)
    locked = gids[order] < imported
    n = len(order)
    survivor, similarity = np.full(n, -1, np.int64), np.zeros(n, np.float32)
    reason, decided = np.zeros(n, np.uint8), np.zeros(n, np.bool_)
    inputs = (bounds, sig, hashes, locked, exact, verify, values, offsets, float(min_similarity))
    _greedy(*inputs, survivor, similarity, reason, decided)
    removed = survivor >= 0
    data = {
        "gid": gids[order][removed],
        "reason": reason[removed],
        "similarity": similarity[removed],
        "survivor": members.column("id").take(pa.array(order[survivor[removed]])),
        "survivor_gid": gids[order][survivor[removed]],
    }
    return pa.table(data, schema=DECIDED)


@njit
def _greedy(
    bounds, sig, hashes, locked, exact, verify, values, offsets, threshold, survivor, similarity, reason, decided
):
    """Within each component (rows ``bounds[c]:bounds[c+1]``, best first): the best row
    survives and removes every row that duplicates it; the best row left survives next,
    and so on. Writes per row the row it is removed for (``survivor``, -1 before: kept),
    similarity and reason; ``decided`` (False before) is scratch. The arrays come from
    Python (see ``minhash._scratch`` for why)."""
    width = sig.shape[1]
    for c in range(bounds.shape[0] - 1):
        lo, hi = bounds[c], bounds[c + 1]
        rounds = 0
        for i in range(lo, hi):
            if decided[i]:
                continue
            decided[i] = True  # i is kept and now absorbs what duplicates it
            rounds += 1
            if rounds > MAX_SURVIVORS:
                continue  # a pathological cluster: keep the rest rather than go quadratic
            for j in range(i + 1, hi):
                if decided[j] or locked[j]:
                    continue
                if exact and hashes[i] == hashes[j]:
                    decided[j] = True
                    survivor[j] = i
                    similarity[j] = 1.0
                    reason[j] = 0
                    continue
                if verify:
                    sim = jaccard_sorted(values[offsets[i] : offsets[i + 1]], values[offsets[j] : offsets[j + 1]])
                else:
                    same = 0
                    for k in range(width):
                        same += sig[i, k] == sig[j, k]
                    sim = same / width
                if sim >= threshold:
                    decided[j] = True
                    survivor[j] = i
                    similarity[j] = sim
                    reason[j] = 1


def _select(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lists at ``rows`` as a new (values, offsets) pair."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    idx = np.repeat(offsets[rows] - new_offsets[:-1], lengths) + np.arange(new_offsets[-1])
    return values[idx], new_offsets
