"""Dedup's finalize as rounds of independent tasks (``GlobalStage.finalize_plan``), so no
step runs on one machine over the whole corpus and each task holds one range in memory.

Rounds, each planned from what the rounds before returned (the driver reads no file):

1. ``units``, one task: the global order of documents (``units.json``, see ``store``).
2. ``components step s``, a task per node range ``q``: one large-star (even ``s``) or
   small-star (odd ``s``) step over range ``q`` of the previous step's files (the
   reduce forests for step 0), written to ``cc/step<s>/q<q>.part``; the task returns
   the count and hash of the edges it read. When the input of three steps in a row is
   the same graph, the input of the last one is the fixed point (``clusters``).
3. ``decide``, a task per node range ``q``: the fixed point's stars centred in ``q``
   are clusters; survivors and removals (``survivors.decide``) go to
   ``decided/q<q>.part``, partitioned by the removed document's range.
4. ``regroup``, a task per document range ``r``: range ``r`` of every decide file,
   sorted by gid, survivor ids resolved, as ``decisions/r<r>.arrow``.
5. ``done``, one task: ``done.json`` with the counters, which the filter phase waits for.

Each round names the files its tasks read (fetched when the work folder is on an object
store: of the partitioned files, just the task's range) and the folders no later round
needs (removed before it runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.formats import partfile
from pipeline.stage import FinalizeRound
from stages.dedup import clusters
from stages.dedup.store import UNITS_FILE, DocStore, UnitTable, decisions_path, forest_path
from stages.dedup.survivors import DECISION, REASONS, decide

DONE_FILE = "done.json"
DOCS = "map/*/*.docs.arrow"


def plan(done: list[list[dict]], partitions: int) -> FinalizeRound | dict[str, int]:
    """The next round after the rounds ``done``, or the counters once all have run."""
    P = partitions
    if not done:
        # The task reads the band files' headers: a slice of each brings one along.
        return FinalizeRound("units", 1, ("units",), reads=(), slices=("map/*/*.bands",))
    total = done[0][0]["total"]
    history: list[tuple[int, int]] = []
    for results in done[1:]:
        history.append(_edges_seen(results))
        if clusters.converged(history):
            break
    step = len(history)
    if not clusters.converged(history):
        if step > clusters.MAX_STEPS:
            raise RuntimeError("dedup: connected components did not converge")
        inputs = "reduce/*.forest" if step == 0 else f"{_step_dir(step - 1)}/*"
        drops = (_step_dir(step - 2),) if step >= 2 else ()
        return FinalizeRound(
            f"components step {step}", P, ("step", step, total), reads=(), slices=(inputs,), drops=drops
        )
    fixed = step - 2  # the input of the last step: the output of the one before it
    after = done[1 + step :]
    if not after:
        stars = (f"{_step_dir(fixed)}/*",)
        drops = (_step_dir(fixed + 1),)
        return FinalizeRound("decide", P, ("decide", fixed), reads=(UNITS_FILE, DOCS), slices=stars, drops=drops)
    if len(after) == 1:
        decided = ("decided/*",)
        return FinalizeRound("regroup", P, ("regroup",), reads=(UNITS_FILE, DOCS), slices=decided, drops=("cc",))
    summary = {
        "dedup.documents": done[0][0]["documents"],
        "dedup.clusters": sum(r["clusters"] for r in after[0]),
        "dedup.exact_removed": sum(r["exact"] for r in after[1]),
        "dedup.near_removed": sum(r["near"] for r in after[1]),
        "dedup.cc_steps": step - 1,
    }
    if len(after) == 2:
        return FinalizeRound("done", 1, ("done", summary), reads=(), drops=("decided",))
    return summary


def _edges_seen(results: list[dict]) -> tuple[int, int]:
    """One step's input graph as (edges, hash): the sums over its ranges."""
    return sum(r["edges"] for r in results), sum(r["hash"] for r in results) & 0xFFFFFFFFFFFFFFFF


def _step_dir(step: int) -> str:
    return f"cc/step{step:03d}"


def _range_file(folder: Path, q: int) -> Path:
    return folder / f"q{q:05d}.part"


def run_task(stage, step: FinalizeRound, task: int, work_dir: Path) -> dict:
    """Task ``task`` of ``step`` for the Dedup ``stage``."""
    work_dir = Path(work_dir)
    kind, *args = step.spec
    P = stage.partitions()
    if kind == "units":
        table = stage.scan(work_dir)
        table.save(work_dir)
        return {"documents": table.total - table.imported, "total": table.total}
    if kind == "step":
        s, total = args
        inputs = [forest_path(work_dir, p) for p in range(P)] if s == 0 else _range_files(work_dir, s - 1, P)
        edges, digest = clusters.star_step(inputs, task, s, _range_file(work_dir / _step_dir(s), task), total, P)
        return {"edges": edges, "hash": digest}
    if kind == "decide":
        return _decide(stage, work_dir, _range_files(work_dir, args[0], P), task)
    if kind == "regroup":
        return _regroup(work_dir, task, P)
    tmp = partfile.temp_for(work_dir / DONE_FILE)
    tmp.write_text(json.dumps(args[0]))
    os.replace(tmp, work_dir / DONE_FILE)
    return {}


def _range_files(work_dir: Path, step: int, partitions: int) -> list[Path]:
    return [_range_file(work_dir / _step_dir(step), q) for q in range(partitions)]


def _decide(stage, work_dir: Path, stars: list[Path], q: int) -> dict:
    """Survivors and removals of the clusters centred in node range ``q``."""
    table = UnitTable.load(work_dir)
    P, o = stage.partitions(), stage.options
    adj = clusters.read_adjacency(stars, q)
    star = adj[adj["v"] > adj["u"]]  # at the fixed point only a centre has larger neighbours
    decisions = decide(
        star["u"],
        star["v"],
        DocStore(table),
        imported=table.imported,
        verify=o.verify,
        min_similarity=o.min_similarity,
        exact=o.exact,
    )
    final = _range_file(work_dir / "decided", q)
    tmp = partfile.temp_for(final)
    partfile.write(tmp, decisions, clusters.node_partition(decisions["gid"], table.total, P), P)
    os.replace(tmp, final)
    return {"clusters": len(np.unique(star["u"]))}


def _regroup(work_dir: Path, r: int, partitions: int) -> dict:
    """Document range ``r``'s removals from every decide task, with survivor ids."""
    table = UnitTable.load(work_dir)
    parts = [partfile.read(_range_file(work_dir / "decided", q), r, DECISION) for q in range(partitions)]
    rows = np.concatenate(parts)
    rows = rows[np.argsort(rows["gid"], kind="stable")]
    counts = np.bincount(rows["reason"], minlength=len(REASONS))
    survivor_ids = DocStore(table).gather(rows["survivor"], ["id"]).column("id")
    data = {
        "gid": rows["gid"],
        "reason": rows["reason"],
        "similarity": rows["similarity"],
        "survivor": survivor_ids.cast(pa.string()),  # an empty gather has no type
    }
    final = decisions_path(work_dir, r)
    tmp = partfile.temp_for(final)
    written = pa.table(data)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, written.schema) as writer:
        writer.write_table(written)
    os.replace(tmp, final)
    return {"exact": int(counts[0]), "near": int(counts[1])}
