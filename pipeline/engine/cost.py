"""What a run cost: CPU seconds per stage, per billion output tokens, and for a sampled
run (``--sample``) a projection of the full run.

Timings live in ``stats/cost/`` and ``cost.json``, apart from the manifest and markers:
they differ from run to run, while every other output file is byte-identical.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path

from pipeline.engine.sample_estimate import merge, project
from pipeline.formats.layout import Layout
from pipeline.util.atomic import write_json_atomic

# Not scaled in a projection: reading (a sampled run still reads and parses every input
# document before it picks the sample), and a global stage's reduce and finalize, whose
# cost at sample sizes is mostly per partition, not per document. Everything else is
# scaled by 1/fraction, which still over-counts per-process start-up (numba caches,
# models) when the sample is small: the projection leans high.
UNSCALED_SUFFIXES = ("read+write", ":reduce", ":finalize")

# cost.json's key for the object-store requests tried again (``retry``), by kind: like
# timings, they differ from run to run, so they are kept out of the manifest.
STORE_RETRIES = "store_retries"

# cost.json's key for the tasks an executor ran again because their worker or node was
# lost, by phase: like timings, they differ from run to run, so they are kept out of the
# manifest (which is byte-identical however the run went).
TASK_RETRIES = "task_retries"

# cost.json's key for what earlier runs into the folder had done: {"units": every unit of
# every per-unit phase, "done_before": those with a marker at their phase's start,
# "complete_before": nothing at all was left to run}. It differs run to run like the rest.
RESUMED = "resumed"

# The output folders in the parts a projection scales apart (``summarize_cost``'s
# ``disk``): the kept documents and their tokens, and the ledger of the dropped ones.
DISK_PARTS = {"kept": (Layout.DOCS, Layout.TOKENS), "rejected": (Layout.REJECTS,)}


class CommandWall:
    """This command's wall time on the run, recorded in the run's folder at each segment's
    end and at the run's (``Layout.command_wall``), so that cost.json's ``run_wall_seconds``
    sums every command's: its ``cpu_seconds`` count every unit, whichever command ran it,
    and a resumed run's wall time alone was a fraction of that. A command killed part-way
    counts to its last segment's end. A command that ran nothing (an "already complete"
    rerun) records nothing."""

    def __init__(self, layout: Layout, store, started: float):
        self.path = layout.command_wall(f"{time.time_ns()}-{os.getpid()}")
        self.store, self.started = store, started

    def note(self, tally: Counter, seconds: float | None = None) -> None:
        """Record the time so far (or ``seconds``), if this command has run a task
        (``tally``: ``RESUMED``'s)."""
        if tally["units"] > tally["done_before"] or tally["global_tasks_run"]:
            elapsed = time.monotonic() - self.started if seconds is None else seconds
            write_json_atomic(self.path, {"wall_seconds": round(elapsed, 3)})
            self.store.push([self.path])


def write_cost(path: Path, label: str, started: float) -> None:
    """Record the CPU seconds since ``started`` (time.process_time) under ``label``."""
    write_json_atomic(path, {"cpu_seconds": {label: time.process_time() - started}})


def summarize_cost(
    layout: Layout, manifest: dict, wall_seconds: float, workers: int, disk: dict[str, tuple[int, int]]
) -> dict:
    """cost.json's figures. ``wall_seconds``: this command's; ``run_wall_seconds``, beside
    the CPU of every unit: every command's that ran part of the run. ``disk``: per
    ``DISK_PARTS`` part, its bytes and the part of them that does not grow with the
    documents (``RunStore.fixed_size``; a sampled run's)."""
    cpu: Counter[str] = Counter()
    walls = 0.0  # every command's that ran a task (``CommandWall``)
    tallies: list[tuple[str, dict]] = []  # a sampled run's, by unit and phase (``sample_estimate``)
    folder = layout.cost_folder
    for path in sorted(folder.rglob("*.json")) if folder.exists() else []:
        record = json.loads(path.read_text())
        if "wall_seconds" in record:
            walls += record["wall_seconds"]
            continue
        cpu.update(record["cpu_seconds"])
        if "sample" in record:
            tallies.append((record["sample"]["source"], record["sample"]))
    total = sum(cpu.values())
    tokens = sum(stage["counters"].get("tokens", 0) for stage in manifest["stages"].values())
    output_bytes = sum(size for size, _ in disk.values())
    summary = {
        "wall_seconds": round(wall_seconds, 3),
        "run_wall_seconds": round(walls, 3),
        "workers": workers,
        "cpu_seconds": {**{k: round(v, 3) for k, v in sorted(cpu.items())}, "total": round(total, 3)},
        "core_hours": round(total / 3600, 6),
        "output_tokens": tokens,
        "output_bytes": output_bytes,
    }
    if tokens:
        summary["cpu_seconds_per_billion_output_tokens"] = {
            k: round(v * 1e9 / tokens, 1) for k, v in sorted(cpu.items())
        }
        summary["core_hours_per_billion_output_tokens"] = round(total * 1e9 / tokens / 3600, 3)
    fraction = manifest.get("sample", 1.0)
    if fraction < 1.0:
        scaled = sum(v if k.endswith(UNSCALED_SUFFIXES) else v / fraction for k, v in cpu.items())
        summary["projection"] = {
            "note": f"full run projected from a {fraction:g} sample: stage CPU scaled by 1/{fraction:g}; reading, "
            "reduce and finalize are not (a sample reads every input; reduce and finalize work per partition); "
            "documents kept per document of each source, tokens per byte of its input text, with 95% intervals "
            "from a jackknife over the sample's random groups",
            "cpu_seconds": round(scaled, 1),
            "core_hours": round(scaled / 3600, 6),
            "wall_seconds_on_this_machine": round(scaled / max(workers, 1), 1),
            **_projected_output(merge(tallies), fraction, manifest["balance"], tokens, disk),
        }
    return summary


def _projected_output(by_source: dict[str, dict], fraction: float, balance: dict, tokens: int, disk: dict) -> dict:
    """The documents read (counted in full: a sample reads every one); the documents kept
    projected per document read, the tokens per byte of input text, and the bytes on disk
    (``_projected_bytes``); each with its 95% interval as ``<key>_interval`` ([low, high]).
    Nothing without the units' tallies (an older prep's files)."""
    if not by_source:
        return {}
    figures = {"input_documents": sum(t["read_documents"] for t in by_source.values())}
    intervals = {}
    for key, figure in (("output_documents", "kept"), ("output_tokens", "tokens")):
        estimate = project(by_source, figure, fraction) if figure != "tokens" or tokens else None
        if estimate is not None:
            figures[key] = round(estimate["point"])
            intervals[key] = [round(estimate["low"]), round(estimate["high"])]
    on_disk = _projected_bytes(figures, intervals, balance, tokens, disk)
    if on_disk is not None:
        figures["output_bytes"], intervals["output_bytes"] = on_disk
    return {**figures, **{f"{key}_interval": value for key, value in intervals.items()}}


def _projected_bytes(figures: dict, intervals: dict, balance: dict, tokens: int, disk: dict) -> tuple | None:
    """The bytes on disk, and their interval: each part's fixed bytes as measured (the
    sample wrote the files the full run writes: Parquet footers, sidecars), the rest scaled
    as what it holds: docs/ and tokens/ as the tokens (the documents kept without
    tokenize), rejects/ as the documents dropped (those read less those kept). None
    without the projections it scales on."""
    kept_key, kept_measured = ("output_tokens", tokens) if tokens else ("output_documents", balance["output"])
    if "output_documents" not in figures or kept_key not in figures:
        return None
    read = figures["input_documents"]
    low_kept, high_kept = intervals["output_documents"]
    scales = {  # part -> (the sample's measure, the full run's projected: point, low, high)
        "kept": (kept_measured, figures[kept_key], *intervals[kept_key]),
        "rejected": (balance["rejected"], read - figures["output_documents"], read - high_kept, read - low_kept),
    }
    projected = [0.0, 0.0, 0.0]
    for part, (size, fixed) in disk.items():
        measured, *full = scales[part]
        per_unit = (size - fixed) / measured if measured else 0.0
        projected = [total + fixed + value * per_unit for total, value in zip(projected, full)]
    point, low, high = (round(value) for value in projected)
    return point, [low, high]


def projection_lines(manifest: dict, cost: dict | None) -> list[str]:
    """What a sampled run projects for the full input, for the end-of-run summary: each
    figure of ``cost.json``'s projection beside what the sample measured.

    Empty for an unsampled run. A ``cost.json`` that is missing or lacks pieces (an
    older prep's, a damaged one) gives a line saying so, or fewer rows: never an error.
    """
    fraction = manifest.get("sample", 1.0)
    if not _is_number(fraction) or not 0 < fraction < 1:
        return []
    title = f"projected for the full input from a {fraction * 100:g}% sample"
    projection = cost.get("projection") if isinstance(cost, dict) else None
    if not isinstance(projection, dict):
        return [f"{title}: not available ({'no' if cost is None else 'no projection in'} {Layout.COST_SUMMARY})"]
    balance = manifest.get("balance", {})
    cpu = cost.get("cpu_seconds")
    tokenized = any("tokens" in stage.get("counters", {}) for stage in manifest.get("stages", {}).values())
    rows = [
        ("CPU time", _duration, "cpu_seconds", cpu.get("total") if isinstance(cpu, dict) else None),
        ("core-hours", _figure, "core_hours", cost.get("core_hours")),
        ("documents read", _count, "input_documents", balance.get("input")),
        ("documents kept", _count, "output_documents", balance.get("output")),
        *([("tokens", _count, "output_tokens", cost.get("output_tokens"))] if tokenized else []),
        ("on disk", _bytes, "output_bytes", cost.get("output_bytes")),
    ]
    lines = [f"{title} ({Layout.COST_SUMMARY} has the details):", f"  {'':<16}{'full input':>12}{'sample':>12}"]
    for label, show, key, measured in rows:
        if _is_number(projection.get(key)):
            sample = show(measured) if _is_number(measured) else "?"
            lines.append(f"  {label:<16}{show(projection[key]):>12}{sample:>12}{_row_note(projection, key, show)}")
    sampled = balance.get("input")
    if _is_number(sampled) and sampled == 0:
        lines.append("  no document was sampled: raise --sample")
    return lines


def _row_note(projection: dict, key: str, show) -> str:
    """What follows a projected figure: why it is not scaled, or its 95% interval."""
    if key == "cpu_seconds":
        return "   stages scaled, reading not: a sample reads every input"
    if key == "input_documents":
        return "   counted: a sample reads every input"
    interval = projection.get(f"{key}_interval")
    if not (isinstance(interval, list) and len(interval) == 2 and all(_is_number(v) for v in interval)):
        return ""  # an older prep's cost.json, or a damaged one
    return f"   95% interval {show(interval[0])} to {show(interval[1])}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def _three_figures(value: float) -> str:
    """``value`` (under 1000) to three significant figures: 0.000358, 4.70, 12.3, 205."""
    if value >= 99.95 or value == 0:
        return f"{value:,.0f}"
    if value >= 9.995:
        return f"{value:.1f}"
    if value >= 0.9995:
        return f"{value:.2f}"
    # Fixed point, never "9.7e-05": a short sampled run's core-hours are that small.
    rounded = float(f"{value:.3g}")
    return f"{rounded:.{2 - math.floor(math.log10(abs(rounded)))}f}"


def _in_units(value: float, units: tuple[tuple[float, str], ...]) -> tuple[str, str]:
    """``value`` in the largest of ``units`` (ascending) it reaches once rounded."""
    size, unit = units[0]
    for s, u in units:
        if value >= s * 0.9995:
            size, unit = s, u
    return _three_figures(value / size), unit


def _count(value: float) -> str:
    if value < 9999.5:
        return f"{value:,.0f}"
    number, unit = _in_units(value, ((1e3, "k"), (1e6, "M"), (1e9, "B"), (1e12, "T")))
    return number + unit


def _bytes(value: float) -> str:
    if value < 999.5:
        return f"{value:.0f} B"
    return "{} {}".format(*_in_units(value, ((1e3, "kB"), (1e6, "MB"), (1e9, "GB"), (1e12, "TB"), (1e15, "PB"))))


def _duration(seconds: float) -> str:
    return "{} {}".format(*_in_units(seconds, ((1, "s"), (60, "min"), (3600, "h"), (86400, "days"))))


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 999.5 else _three_figures(value)
