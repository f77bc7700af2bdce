"""What a ``--sample`` run projects for the full input, and how sure it is.

A sample keeps documents by their id's hash, so its document count alone varies, and one
long document more or less moves a per-document projection by far more than the count
suggests (issue 48: 876k tokens projected, 1,275,863 made). So the projection is a ratio
estimate on text bytes: every input document is read before the sample is picked, so
each source's text bytes and documents are known exactly, and the sample measures what
each byte of input yields in tokens, and each document in documents kept, per source.

The interval comes from the sample's own variance: the sampled documents fall, by the
low bits of their id's hash (independent of the bits, or the seeded hash, that chose
the sample), into ``GROUPS`` random groups; each unit tallies per group its sampled
documents, their text bytes and what they yielded. A delete-a-group jackknife gives
each source's variance, held above floors for what a small sample cannot see
(``project``); the sources' variances add, times the finite-population correction, and
Student's t widens the standard error into the interval.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats.documents import TEXT
from pipeline.kernels.hashing import id_hashes

# Random groups of the sampled documents: enough for a jackknife's variance to settle,
# few enough that a small sample has documents in most of them.
GROUPS = 20

# Student's t for a two-sided 95% interval with GROUPS - 1 degrees of freedom.
T_95 = 2.093

# The figures each group tallies: sampled documents and their text bytes, and what they
# yielded (documents kept, tokens).
FIGURES = ("documents", "bytes", "kept", "tokens")

# What each projected figure is scaled on: a group figure of the sample and its source's
# total read. Tokens follow text bytes (a long document yields many); documents kept
# follow documents (a short one is kept as often as a long one: math's problems).
BASES = {"tokens": ("bytes", "read_bytes"), "kept": ("documents", "read_documents")}


def new_tally() -> dict:
    """A unit's sample tally: the documents and text bytes read (``read_documents``,
    ``read_bytes``: all of them, before the sample is picked) and, per group, each of
    ``FIGURES``."""
    return {"read_documents": 0, "read_bytes": 0, **{figure: [0] * GROUPS for figure in FIGURES}}


def text_bytes(batch: pa.RecordBatch | None) -> np.ndarray:
    """Each document's text length in UTF-8 bytes (empty for no batch)."""
    if batch is None or batch.num_rows == 0:
        return np.zeros(0, np.int64)
    return pc.binary_length(batch.column(TEXT)).to_numpy(zero_copy_only=False).astype(np.int64)


def add(tally: dict, figure: str, ids: pa.Array, weights: np.ndarray) -> None:
    """Add ``weights`` (one per document) to ``figure``'s groups, by each id's group."""
    if len(ids) == 0:
        return
    groups = (id_hashes(ids) % np.uint64(GROUPS)).astype(np.int64)
    sums = np.bincount(groups, weights=np.asarray(weights, np.float64), minlength=GROUPS)
    tally[figure] = [int(a + round(b)) for a, b in zip(tally[figure], sums)]


def merge(tallies: list[tuple[str, dict]]) -> dict[str, dict]:
    """The units' tallies (each with its source) added up by source."""
    by_source: dict[str, dict] = {}
    for source, tally in tallies:
        total = by_source.setdefault(source, new_tally())
        for key in ("read_documents", "read_bytes"):
            total[key] += tally.get(key, 0)
        for figure in FIGURES:
            total[figure] = [a + b for a, b in zip(total[figure], tally[figure])]
    return by_source


def project(by_source: dict[str, dict], figure: str, fraction: float) -> dict | None:
    """The full input's ``figure`` projected from a ``fraction`` sample, per unit of its
    base (``BASES``) in each source: the point, and a 95% interval (``low``, ``high``).
    None when a source that was read had no document sampled: nothing to scale from.

    Each source's variance is its jackknife's, but never below two floors, since a few
    dozen documents can hide what a few rare ones hold (a 5% sample's jackknife missed
    the bundled sample's tokens by four standard errors; with the floors, 27 draws at
    5-20% all held, the furthest truth at 0.76 of the half-width): the point's square over the
    four times the documents sampled (as if each document's share varied by 50%), and, for a source
    where nothing or little was kept, one-and-a-half documents' worth (a kept document's
    mean ``figure``) scaled by the source's inverse sampling rate (the rule of three)."""
    sampled, total = BASES[figure]
    documents = sum(sum(t["kept"]) for t in by_source.values())
    one_document = sum(sum(t[figure]) for t in by_source.values()) / documents if documents else 0.0
    point = variance = 0.0
    for tally in by_source.values():
        x, y = np.array(tally[sampled], np.float64), np.array(tally[figure], np.float64)
        n = sum(tally["documents"])
        if tally[total] == 0:
            continue
        if x.sum() == 0 or n == 0:
            return None
        estimate = y.sum() / x.sum() * tally[total]
        rest = x.sum() - x
        spread = 0.0
        if (rest > 0).all():
            replicates = (y.sum() - y) / rest * tally[total]
            spread = (GROUPS - 1) / GROUPS * float(((replicates - replicates.mean()) ** 2).sum())
        unseen = 1.5 * one_document * tally["read_documents"] / n
        variance += max(spread, estimate**2 / (4 * n), unseen**2) * (1 - fraction)
        point += estimate
    half = T_95 * variance**0.5
    return {"point": point, "low": max(point - half, 0.0), "high": point + half}
