"""Candidate edges and connected components, through files, one partition in memory.

Why this design: LSH makes a graph whose edges are "shares a band key"; duplicates are
its connected components. Holding the graph for a big corpus in one union-find is the
wall every peer hits, so:

1. ``band_edges`` (per key partition, in ``reduce_partition``): sort the partition's
   (key, gid) records; documents with the same key become a star to the key's smallest
   gid; a union-find over just this partition compresses the stars into a forest
   ``node -> smallest gid of its local component``. Only documents that share a key
   appear, so singletons cost nothing downstream.
2. ``star_step`` (in finalize, one task per node range and step): the union of the
   partitions' forests is solved with alternating large-star / small-star steps
   (Kiveris et al., "Connected Components in MapReduce and Beyond", 2014). Adjacency
   lives in partitioned record files keyed by node range; a step's task reads one node
   range of the previous step's files and writes one file for the next step, so memory
   is one range's adjacency and the ranges of a step run in parallel. The fixed point is
   a star per component centred on its smallest gid; LSH graphs get there in a few steps.
3. ``label_nodes`` (one task per node range): each node of the fixed point with its
   centre, regrouped by document range (``node_partition``) for the members round,
   which reads the documents of one range.

Why node ranges are ranges of a hash (``hash_partition``), not of gids: every centre is
its component's smallest gid, so where a corpus repeats itself (copies of a crawl, the
same pages in several dumps, the benchmarks' repeated corpora) the centres, and with
them the steps' large neighbourhoods, all lie in the first copy's gids: ranges of gids
gave one step task nearly half the graph (4.1 GB of a 10 GB run). A well-mixed hash
spreads nodes over the ranges whatever their gids, and the steps' results do not depend
on which task holds a node. The hash is cut into *ranges* (its top 32 bits scaled to
the partition count), so range ``q`` of ``R`` is exactly partitions ``q*P/R`` to
``(q+1)*P/R - 1`` of ``P`` where ``R`` divides ``P``: the steps read a few whole
partitions of the forests (``step_ranges``), as slices of them on an object store.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.compile.jit import njit
from pipeline.formats import partfile
from pipeline.kernels.mixing import GOLDEN_GAMMA, mix64, splitmix64

EDGE = np.dtype([("u", "<i8"), ("v", "<i8")])
LABEL = np.dtype([("gid", "<i8"), ("comp", "<i8")])  # a clustered node and its centre
MAX_STEPS = 400
# A component step's range in memory: its adjacency entries (an edge is two, 16 bytes
# each) and the sort's copies stay within a few hundred MB.
ENTRIES_PER_RANGE = 4_000_000


def node_partition(gids: np.ndarray, total: int, partitions: int) -> np.ndarray:
    """Document range of gids: contiguous ranges, so a unit's documents sit in one or two
    (the members, regroup and filter tasks each read the documents of one range)."""
    return (np.asarray(gids, np.int64) * partitions // max(total, 1)).astype(np.int64)


def hash_partition(gids: np.ndarray, partitions: int) -> np.ndarray:
    """Hash range of gids: the top 32 bits of their SplitMix64 hash, scaled to
    ``partitions`` (at most 2**31), so ``hash_partition(g, R) == hash_partition(g, P) // (P // R)``
    where ``R`` divides ``P``, and gids crowded in one range still spread evenly."""
    top = splitmix64(np.asarray(gids, np.int64)) >> np.uint64(32)
    return ((top * np.uint64(partitions)) >> np.uint64(32)).astype(np.int64)


@njit
def _forest(u, v, parent):
    """Union-find over the edges (u[k], v[k]) in ``parent`` (``np.arange(n)`` before:
    from Python, see ``minhash._scratch``): each node's root, the smallest node of its tree."""
    n = parent.shape[0]
    for k in range(u.shape[0]):
        a, b = u[k], v[k]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r


def band_edges(keys: np.ndarray, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Sort one key partition; return (unique keys, their smallest gid, forest edges, candidate pairs).

    The forest edges are EDGE records ``(node, root)`` with root the smallest gid of
    the node's component inside this partition."""
    order = np.lexsort((gids, keys))
    keys, gids = keys[order], gids[order]
    first = np.ones(len(keys), bool)
    first[1:] = keys[1:] != keys[:-1]
    root = gids[first][np.cumsum(first) - 1]
    pair = ~first & (gids != root)
    u, v = gids[pair], root[pair]
    nodes = np.unique(np.concatenate([u, v]))
    identity = np.arange(len(nodes))
    parent = identity.copy()
    _forest(np.searchsorted(nodes, u), np.searchsorted(nodes, v), parent)
    leaves = parent != identity
    edges = np.empty(int(leaves.sum()), EDGE)
    edges["u"], edges["v"] = nodes[leaves], nodes[parent[leaves]]
    return keys[first], gids[first], edges, int(pair.sum())


def symmetric(edges: np.ndarray) -> np.ndarray:
    """Both orientations of undirected edges."""
    out = np.empty(2 * len(edges), EDGE)
    out["u"][: len(edges)], out["v"][: len(edges)] = edges["u"], edges["v"]
    out["u"][len(edges) :], out["v"][len(edges) :] = edges["v"], edges["u"]
    return out


def write_adjacency(path: Path, edges: np.ndarray, partitions: int) -> None:
    """Write undirected ``edges`` as adjacency entries, each under its first node's hash
    range. The header's count is the file's number of entries: a slice of the file keeps
    it, while its offsets are its own partition's (``partfile.write_slice``)."""
    adj = symmetric(edges)
    tmp = partfile.temp_for(path)
    partfile.write(tmp, adj, hash_partition(adj["u"], partitions), partitions, count=len(adj))
    partfile.publish(tmp, path)


def read_adjacency(files: list[Path], partitions: range) -> np.ndarray:
    """Those partitions of every file, sorted by (u, v), duplicates removed."""
    parts = [partfile.read_range(f, partitions, EDGE) for f in files]
    adj = np.concatenate(parts) if parts else np.empty(0, EDGE)
    if len(adj) == 0:
        return adj
    adj = adj[np.lexsort((adj["v"], adj["u"]))]
    keep = np.ones(len(adj), bool)
    keep[1:] = (adj["u"][1:] != adj["u"][:-1]) | (adj["v"][1:] != adj["v"][:-1])
    return adj[keep]


@njit
def _fingerprint(u, v):
    h = np.uint64(0)
    for k in range(u.shape[0]):
        h += mix64(np.uint64(u[k]) * GOLDEN_GAMMA ^ np.uint64(v[k]))
    return h


def fingerprint(adj: np.ndarray) -> tuple[int, int]:
    return len(adj), int(_fingerprint(adj["u"], adj["v"]))


def _group_min(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per entry: index of its group (same u), and per group the smallest of u and its neighbours."""
    first = np.ones(len(adj), bool)
    first[1:] = adj["u"][1:] != adj["u"][:-1]
    group = np.cumsum(first) - 1
    m = np.minimum(adj["u"][first], adj["v"][first])  # v sorted within a group: first is smallest
    return group, m


def large_star(adj: np.ndarray) -> np.ndarray:
    """Connect every neighbour larger than u to the smallest node of u's neighbourhood."""
    if len(adj) == 0:
        return np.empty(0, EDGE)
    group, m = _group_min(adj)
    larger = adj["v"] > adj["u"]
    out = np.empty(int(larger.sum()), EDGE)
    out["u"], out["v"] = adj["v"][larger], m[group[larger]]
    return out


def small_star(adj: np.ndarray) -> np.ndarray:
    """Connect u and its smaller neighbours to the smallest of them."""
    if len(adj) == 0:
        return np.empty(0, EDGE)
    group, m = _group_min(adj)
    smaller = adj["v"] < adj["u"]
    mv = m[group[smaller]]
    sv = adj["v"][smaller]
    neigh = sv != mv
    first = np.ones(len(adj), bool)
    first[1:] = adj["u"][1:] != adj["u"][:-1]
    us = adj["u"][first]
    own = us != m
    out = np.empty(int(neigh.sum() + own.sum()), EDGE)
    out["u"] = np.concatenate([sv[neigh], us[own]])
    out["v"] = np.concatenate([mv[neigh], m[own]])
    return out


def star_step(inputs: list[Path], parts: range, step: int, out: Path, ranges: int) -> tuple[int, int]:
    """Step ``step`` (large-star when even, small-star when odd) over partitions ``parts``
    of the adjacency files ``inputs`` (one node range), written to ``out`` in ``ranges``
    node ranges; returns the (count, hash) of the edges it read, which tell when the
    steps have stopped changing the graph (``converged``)."""
    adj = read_adjacency(inputs, parts)
    kind = large_star if step % 2 == 0 else small_star
    write_adjacency(out, kind(adj), ranges)
    return fingerprint(adj)


def label_nodes(stars: list[Path], part: int, out: Path, total: int, partitions: int) -> int:
    """Each node of node range ``part`` of the fixed point ``stars`` with its centre
    (``LABEL``), written to ``out`` by document range (``node_partition``) over
    ``partitions``; returns how many. At the fixed point a centre's neighbours are all
    larger and a leaf's one neighbour is its centre, so a node's centre is the smaller of
    it and its first neighbour (the entries sorted by (u, v))."""
    adj = read_adjacency(stars, range(part, part + 1))
    first = np.ones(len(adj), bool)
    first[1:] = adj["u"][1:] != adj["u"][:-1]
    labels = np.empty(int(first.sum()), LABEL)
    labels["gid"] = adj["u"][first]
    labels["comp"] = np.minimum(labels["gid"], adj["v"][first])
    tmp = partfile.temp_for(out)
    partfile.write(tmp, labels, node_partition(labels["gid"], total, partitions), partitions, count=len(labels))
    partfile.publish(tmp, out)
    return len(labels)


def read_labels(files: list[Path], partition: int) -> np.ndarray:
    """Document range ``partition``'s labelled nodes from every file of ``label_nodes``, by gid."""
    labels = np.concatenate([partfile.read(f, partition, LABEL) for f in files] or [np.empty(0, LABEL)])
    return labels[np.argsort(labels["gid"], kind="stable")]


def step_ranges(entries: int, partitions: int) -> int:
    """How many node ranges (tasks) the component steps take, for forests of ``entries``
    adjacency entries: the fewest that divide ``partitions`` (so a range is whole
    partitions of the forests) and hold at most ``ENTRIES_PER_RANGE`` each. A small graph
    is one task a step, not ``partitions`` tasks of a few edges, each reading
    ``partitions`` files (on the bundled sample, 224 tasks of 5 ms); a large one keeps its
    ``partitions`` ranges."""
    needed = -(-entries // ENTRIES_PER_RANGE)
    return min(d for d in range(1, partitions + 1) if partitions % d == 0 and (d >= needed or d == partitions))


def converged(history: list[tuple[int, int]]) -> bool:
    """Whether the fixed point is reached, ``history[s]`` being the (count, hash) of step
    ``s``'s input: when both a large and a small step left the graph unchanged, the input
    of the last step (each component a star on its smallest gid) is the fixed point."""
    return len(history) >= 3 and history[-1] == history[-2] == history[-3]
