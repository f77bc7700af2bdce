"""Dedup's finalize as rounds of independent tasks (``pipeline.phases.Finalize``), so no
step runs on one machine over the whole corpus and each task holds one range in memory.

Rounds, each planned from what the rounds before returned (the driver reads no file):

1. ``units``, one task: the global order of documents (``units.json``, see ``store``);
   it returns, per document range, the docs files of the units overlapping it.
2. ``components step s``, a task per node range ``q``: one large-star (even ``s``) or
   small-star (odd ``s``) step over range ``q`` of the previous step's files (the
   reduce forests for step 0), written to ``cc/step<s>/q<q>.part``; the task returns
   the count and hash of the edges it read. When the input of three steps in a row is
   the same graph, the input of the last one is the fixed point (``clusters``). The
   steps use R node ranges, R dividing P, as few as keep a range's edges bounded
   (``clusters.step_ranges``, from the forests' size the units task reads): a small
   graph takes one task a step instead of P tasks each reading P tiny files. A node
   range is a range of a hash of the gid (``clusters.hash_partition``): the centres,
   each its component's smallest gid, crowd into the first gids of a corpus that
   repeats itself, and ranges of gids would give one task most of the graph.
3. ``labels``, a task per node range ``q``: each node of range ``q`` of the fixed point
   with its centre, to ``cc/labels/q<q>.part`` partitioned by document range.
4. ``members``, a task per document range ``r``: range ``r``'s clustered documents with
   their attributes (partition ``r`` of the labels), from the docs files of range
   ``r``'s units only, to
   ``members/r<r>.part`` partitioned by a hash of their cluster's centre (``shipping``:
   a centre is its cluster's smallest gid, so in a corpus that repeats itself the
   centres crowd into the first range, which would leave one decide task every member).
5. ``decide``, ``P`` tasks: task ``q`` the clusters whose centre hashes to ``q``, from
   partition ``q`` of the members files; survivors and removals (``survivors.decide``),
   with the survivor's id, go to ``decided/q<q>.part`` partitioned by the removed
   document's range.
6. ``regroup``, a task per document range ``r``: range ``r`` of every decide file,
   sorted by gid, as ``decisions/r<r>.arrow``.
7. ``done``, one task: ``done.json`` with the counters, which the filter phase waits for
   and the manifest shows: ``dedup.exact_removed`` / ``near_removed`` (the ledger's
   ``exact-duplicate`` / ``near-duplicate`` rows), ``dedup.clusters`` (survivors with at
   least one removed duplicate: the report's duplicate clusters) and
   ``dedup.components`` (LSH candidate components, see ``_decide``).

Each round names the files its tasks read (fetched when the work folder is on an object
store: of the partitioned files, just the task's range; of the docs files, only by the
members tasks, each its range's units) and the folders no later round needs (removed
before it runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.formats import partfile
from pipeline.formats.unit_table import UNITS, DocStore
from pipeline.formats.work_files import PerIndex
from pipeline.phases import Round
from stages.dedup import clusters, shipping
from stages.dedup.store import BANDS, DECISIONS, DOCS, DONE, FOREST
from stages.dedup.survivors import DECIDED, REASONS, decide

LABELS = PerIndex("cc/labels", "q", ".part")  # each clustered node's centre, by document range
MEMBERS = PerIndex("members", "q", ".part")  # clustered documents with their attributes, by centre
DECIDED_FILES = PerIndex("decided", "q", ".part")  # each decide task's removals, by document range


def plan(done: list[list[dict]], partitions: int) -> Round | dict[str, int]:
    """The next round after the rounds ``done``, or the counters once all have run."""
    P = partitions
    if not done:
        # The task reads the band and forest files' headers: a slice of each brings one along.
        return Round("units", 1, ("units",), slices=(BANDS, FOREST))
    units = done[0][0]
    total = units["total"]
    R = clusters.step_ranges(units["entries"], P)
    history: list[tuple[int, int]] = []
    for results in done[1:]:
        history.append(_edges_seen(results))
        if clusters.converged(history):
            break
    step = len(history)
    if not clusters.converged(history):
        if step > clusters.MAX_STEPS:
            raise RuntimeError("dedup: connected components did not converge")
        inputs = FOREST if step == 0 else _steps(step - 1)
        drops = (_steps(step - 2),) if step >= 2 else ()
        # The forests have P partitions, a range k of them; the steps' own files have R.
        k = P // R
        parts = tuple((q * k, q * k + k - 1) for q in range(R)) if step == 0 else ()
        spec = ("step", step, R)
        return Round(f"components step {step}", R, spec, slices=(inputs,), slice_ranges=parts, drops=drops)
    fixed = step - 2  # the input of the last step: the output of the one before it
    after = done[1 + step :]
    if not after:
        spec = ("labels", fixed, total, R)
        return Round("labels", R, spec, slices=(_steps(fixed),), drops=(_steps(fixed + 1),))
    if len(after) == 1:
        docs = tuple(tuple((source, unit) for source, unit in pairs) for pairs in units["docs"])
        spec = ("members", R)
        return Round(
            "members",
            P,
            spec,
            reads=(UNITS,),
            slices=(LABELS,),
            drops=(_steps(fixed),),
            unit_reads=DOCS,
            task_units=docs,
        )
    if len(after) == 2:
        spec = ("decide", total, total - units["documents"])
        return Round("decide", P, spec, slices=(MEMBERS,), drops=(LABELS,))
    if len(after) == 3:
        return Round("regroup", P, ("regroup",), slices=(DECIDED_FILES,), drops=(MEMBERS,))
    summary = {
        "dedup.documents": units["documents"],
        "dedup.clusters": sum(r["clusters"] for r in after[2]),
        "dedup.components": sum(r["components"] for r in after[2]),
        "dedup.exact_removed": sum(r["exact"] for r in after[3]),
        "dedup.near_removed": sum(r["near"] for r in after[3]),
        "dedup.cc_steps": step - 1,
    }
    if len(after) == 4:
        return Round("done", 1, ("done", summary), drops=(DECIDED_FILES,))
    return summary


def _edges_seen(results: list[dict]) -> tuple[int, int]:
    """One step's input graph as (edges, hash): the sums over its ranges."""
    return sum(r["edges"] for r in results), sum(r["hash"] for r in results) & 0xFFFFFFFFFFFFFFFF


def _steps(step: int) -> PerIndex:
    """The files of connected-components step ``step``, one per node range."""
    return PerIndex(f"cc/step{step:03d}", "q", ".part")


def run_task(stage, step: Round, task: int, work_dir: Path) -> dict:
    """Task ``task`` of ``step`` for the Dedup ``stage``."""
    work_dir = Path(work_dir)
    kind, *args = step.spec
    P = stage.partitions()
    if kind == "units":
        table = stage.numbering().table(work_dir)
        table.save(work_dir)
        # From each forest's count, which a slice keeps: where another machine wrote the
        # forests, this one holds only a slice of each, whose offsets count one partition.
        entries = sum(partfile.header(path)[1] for path in FOREST.paths(work_dir, P))
        docs = _docs_by_range(table, P)
        return {"documents": table.total - table.imported, "total": table.total, "docs": docs, "entries": entries}
    if kind == "step":
        s, R = args
        inputs = FOREST.paths(work_dir, P) if s == 0 else _steps(s - 1).paths(work_dir, R)
        out = _steps(s).path(work_dir, task)
        edges, digest = clusters.star_step(inputs, step.sliced(task), s, out, R)
        return {"edges": edges, "hash": digest}
    if kind == "labels":
        fixed, total, R = args
        stars = _steps(fixed).paths(work_dir, R)
        return {"nodes": clusters.label_nodes(stars, task, LABELS.path(work_dir, task), total, P)}
    if kind == "members":
        table = stage.numbering().saved(work_dir)
        (R,) = args
        labels = LABELS.paths(work_dir, R)
        out = MEMBERS.path(work_dir, task)
        members = shipping.ship(labels, task, DocStore(table), out, P, _member_schema(stage))
        return {"members": members}
    if kind == "decide":
        return _decide(stage, work_dir, task, *args)
    if kind == "regroup":
        return _regroup(work_dir, task, P)
    tmp = partfile.temp_for(DONE.path(work_dir))
    tmp.write_text(json.dumps(args[0]))
    os.replace(tmp, DONE.path(work_dir))
    return {}


def _docs_by_range(table, partitions: int) -> list[list[tuple[str, str]]]:
    """Per document range, the (source, unit) of this run's units with documents in it,
    whose docs files its members task reads; an imported index's are read where they are."""
    ranges: list[list[tuple[str, str]]] = [[] for _ in range(partitions)]
    for u in np.flatnonzero(~table.locked & (table.counts > 0)):
        ends = np.array([table.starts[u], table.starts[u + 1] - 1])
        first, last = clusters.node_partition(ends, table.total, partitions)
        for r in range(first, last + 1):
            ranges[r].append((table.sources[u], table.units[u]))
    return ranges


def _member_schema(stage) -> pa.Schema:
    return shipping.member_schema(stage.signer.num_hashes, stage.options.verify)


def _decide(stage, work_dir: Path, q: int, total: int, imported: int) -> dict:
    """Survivors and removals of the components whose centre hashes to ``q`` (``clusters.hash_partition``).

    Returns two counts that differ: ``components``, the connected components of the LSH
    candidate graph (two or more documents each), and ``clusters``, the survivors that had
    at least one document removed for them, by gid (one document, whatever its id: two
    sources may each hold an id "1"), which the ledger's ``detail`` names by source and id
    and ``prep report`` counts. A component can hold no cluster (its candidates all
    below ``min_similarity``) or several (greedy star clustering, ``survivors``); a
    component lies in one task, so the sums over tasks count each once."""
    P, o = stage.partitions(), stage.options
    members = shipping.read_tables(MEMBERS.paths(work_dir, P), q, _member_schema(stage))
    decisions = decide(members, imported=imported, verify=o.verify, min_similarity=o.min_similarity, exact=o.exact)
    gid = decisions.column("gid").to_numpy()
    shipping.write_tables(DECIDED_FILES.path(work_dir, q), decisions, clusters.node_partition(gid, total, P), P)
    return {
        "components": len(np.unique(members.column("comp").to_numpy())),
        "clusters": pc.count_distinct(decisions.column("survivor_gid")).as_py(),
    }


def _regroup(work_dir: Path, r: int, partitions: int) -> dict:
    """Document range ``r``'s removals from every decide task, sorted by gid."""
    rows = shipping.read_tables(DECIDED_FILES.paths(work_dir, partitions), r, DECIDED)
    rows = rows.take(pa.array(np.argsort(rows.column("gid").to_numpy(), kind="stable"))).combine_chunks()
    counts = np.bincount(rows.column("reason").to_numpy(), minlength=len(REASONS))
    final = DECISIONS.path(work_dir, r)
    tmp = partfile.temp_for(final)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    os.replace(tmp, final)
    return {"exact": int(counts[0]), "near": int(counts[1])}
