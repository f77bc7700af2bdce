"""The lines ``prep run`` prints when a run ends: what each source and stage kept and
dropped, bad input, warnings, what an earlier run had done, the wall time, the tokens
written and where the output is, the disk the work files took, the object-store requests
tried again, and for a sampled run what it projects for the full input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.engine.cost import (
    RESUMED,
    STORE_RETRIES,
    TASK_RETRIES,
    _bytes,
    _duration,
    _is_number,
    projection_lines,
)
from pipeline.engine.storage import RunStore
from pipeline.engine.work_disk import WORK_DISK
from pipeline.formats.layout import Layout, file_in
from pipeline.util.numbers import counted
from pipeline.util.printable import printable


def print_summary(manifest: dict, out: str | Path, stream=None) -> None:
    """The end-of-run lines: the balance per source and stage, bad input, warnings, and
    from cost.json the store's retries and, for a sampled run, what it projects."""
    balance = manifest["balance"]
    w = (stream or sys.stderr).write
    w(
        f"\ndone: {counted(balance['input'], 'document')} in, {balance['output']:,} kept, "
        f"{balance['rejected']:,} rejected -> {out}\n"
    )
    # Names longer than 12 characters (paragraph_dedup, column_filter) widen their column.
    width, stage_width = (max([12, *map(len, manifest[key])]) for key in ("sources", "stages"))
    for name, source in manifest["sources"].items():
        w(
            f"  {name:<{width}} in {source['input']:>10,}  kept {source['output']:>10,}  "
            f"rejected {source['rejected']:>10,}\n"
        )
    for label, stage in manifest["stages"].items():
        rejected = sum(stage["rejected"].values())
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(stage["rejected"].items(), key=lambda kv: -kv[1])[:4])
        w(
            f"  stage {label:<{stage_width}} {stage['input']:>10,} in  {rejected:>10,} rejected  "
            f"{stage['changed']:>8,} changed  {reasons}\n"
        )
    if manifest["bad_input"]:
        total = sum(manifest["bad_input"].values())
        kinds = ", ".join(f"{k.removeprefix('bad-input:')} {n:,}" for k, n in manifest["bad_input"].items())
        w(f"  bad input quarantined: {total:,} ({kinds}); see {out}/rejects (stage 'read') for files and lines\n")
    if manifest.get("skipped"):
        total = sum(manifest["skipped"].values())
        kinds = ", ".join(f"{k} {n:,}" for k, n in manifest["skipped"].items())
        w(f"  input records that are no documents, skipped: {total:,} ({kinds})\n")
    for warning in manifest["warnings"]:
        w(f"  warning: {printable(warning)}\n")
    cost = _read_cost(out)
    counts = resumed_lines(cost) + output_lines(manifest, cost, out)
    counts += work_disk_lines(cost) + task_retry_lines(cost) + store_retry_lines(cost)
    for line in counts + projection_lines(manifest, cost):
        w(f"{line}\n")


def print_summary_json(manifest: dict, out: str | Path, stream=None) -> None:
    """``--progress json``'s last line: the summary as one JSON object, so that every line
    on the stream is one (a log reader takes the last for the run's outcome)."""
    cost = _read_cost(out) or {}
    stages = {
        label: {key: stage[key] for key in ("input", "rejected", "changed")}
        for label, stage in manifest["stages"].items()
    }
    record = {
        "phase": "done",
        "out": str(out),
        "outputs": {
            name: file_in(str(out), name) for name in (*Layout.OUTPUT_FOLDERS, Layout.MANIFEST, Layout.COST_SUMMARY)
        },
        "balance": manifest["balance"],
        "sources": manifest["sources"],
        "stages": stages,
        "bad_input": manifest["bad_input"],
        "skipped": manifest.get("skipped", {}),
        "warnings": manifest["warnings"],
        "output_tokens": sum(stage.get("counters", {}).get("tokens", 0) for stage in manifest["stages"].values()),
        **{key: cost.get(key) for key in ("wall_seconds", RESUMED, WORK_DISK, TASK_RETRIES, STORE_RETRIES)},
    }
    if manifest.get("sample", 1.0) < 1:
        record["projection"] = cost.get("projection")
    w = (stream or sys.stderr).write
    w(json.dumps(record) + "\n")


def resumed_lines(cost: dict | None) -> list[str]:
    """What earlier runs into the folder had done (cost.json's ``resumed``): "already
    complete" when this run had nothing left to do; nothing for a run that started fresh."""
    figures = cost.get(RESUMED) if isinstance(cost, dict) else None
    if not isinstance(figures, dict) or not all(isinstance(figures.get(k), int) for k in ("units", "done_before")):
        return []
    if figures.get("complete_before") is True:
        return ["  already complete: an earlier run did every unit; nothing was run again"]
    if figures["done_before"] > 0:
        units, done = figures["units"], figures["done_before"]
        were = "was" if done == 1 else "were"
        why = "a unit counts once per phase it runs in"
        return [f"  resumed: {done:,} of {counted(units, 'unit')} {were} already done ({why})"]
    return []


def output_lines(manifest: dict, cost: dict | None, out: str | Path) -> list[str]:
    """The wall time (cost.json's), the tokens written, and where each output is."""
    tokenized = any("tokens" in stage.get("counters", {}) for stage in manifest["stages"].values())
    tokens = sum(stage.get("counters", {}).get("tokens", 0) for stage in manifest["stages"].values())
    wall = cost.get("wall_seconds") if isinstance(cost, dict) else None
    took = f"wall time {_duration(wall)}" if _is_number(wall) else "wall time unknown (no cost.json)"
    written = (
        f"{counted(tokens, 'token')} written to {out}/{Layout.TOKENS}"
        if tokenized
        else "no tokenize stage, so no shards"
    )
    return [
        f"  {took}; {written}",
        f"  output: documents in {out}/{Layout.DOCS}, the rejects ledger in {out}/{Layout.REJECTS}, "
        f"counts in {out}/{Layout.MANIFEST}, timings in {out}/{Layout.COST_SUMMARY}",
    ]


def task_retry_lines(cost: dict | None) -> list[str]:
    """What this run ran again because a worker or a node was lost (cost.json's
    ``task_retries``, by phase); nothing when nothing was, or cost.json has no count."""
    return _count_line(cost, TASK_RETRIES, "retried", "tasks lost with their worker or node, run again")


def store_retry_lines(cost: dict | None) -> list[str]:
    """The object-store requests this run tried again, by kind (cost.json's
    ``store_retries``); nothing when none were, or cost.json has no count."""
    why = "object-store requests tried again after throttling or a failure"
    return _count_line(cost, STORE_RETRIES, "store retries", why)


def _count_line(cost: dict | None, key: str, label: str, why: str) -> list[str]:
    """One summary line of cost.json's counts under ``key`` (a name to a count), or none."""
    counts = cost.get(key) if isinstance(cost, dict) else None
    if not isinstance(counts, dict):
        return []
    named = ", ".join(f"{printable(str(name))} {n:,}" for name, n in counts.items() if isinstance(n, int) and n > 0)
    return [f"  {label}: {named} ({why})"] if named else []


# --keep-work on a run that had completed without it: nothing is left to keep.
NONE_KEPT = "  work files: none; the run had completed and removed them (--keep-work into another --out keeps them)"


def work_disk_lines(cost: dict | None) -> list[str]:
    """The most disk the run's work files took and what is left of them (cost.json's
    ``work_disk``; ``kept``: whether ``--keep-work`` was given): nothing unless kept,
    for a later run's ``index_from``. Nothing when cost.json has no such figures.

    A run that had completed before (``completed_before``) and redid some units (an
    output cut or removed since) had removed its work files when it first completed:
    what it took now is the redone units', and no stage's files were left for a later
    run to import, whatever ``--keep-work`` says now."""
    figures = cost.get(WORK_DISK) if isinstance(cost, dict) else None
    if not isinstance(figures, dict) or not all(_is_number(figures.get(k)) for k in ("peak_bytes", "left_bytes")):
        return []
    if figures["peak_bytes"] == 0:  # a rerun of a finished run that removed its work files
        return [NONE_KEPT] if figures.get("kept") else []
    peak, left = _bytes(figures["peak_bytes"]), _bytes(figures["left_bytes"])
    if figures["left_bytes"]:
        return [f"  work files: {peak} at most, {left} kept in work/ (what a later run's index_from reads)"]
    if figures.get("completed_before") is True:
        return [
            f"  work files: {peak} at most for the units redone, none left: the run had completed before and "
            "removed them (--keep-work into another --out keeps them)"
        ]
    if figures.get("kept"):
        return [f"  work files: {peak} at most, none kept: no stage left what a later run imports"]
    return [f"  work files: {peak} at most, removed as the run completed (--keep-work keeps them for index_from)"]


def _read_cost(out: str | Path) -> dict | None:
    """cost.json of the run in ``out`` (local or on an object store), or None when it
    cannot be read: the summary goes on without it."""
    try:
        text = RunStore(str(out)).read_text(Layout.COST_SUMMARY)
        return json.loads(text) if text is not None else None
    except (OSError, ValueError):
        return None
