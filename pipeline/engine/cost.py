"""What a run cost: CPU seconds per stage, per billion output tokens, and for a sampled
run (``--sample``) a projection of the full run.

Timings live in ``stats/cost/`` and ``cost.json``, apart from the manifest and markers:
they differ from run to run, while every other output file is byte-identical.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from pipeline.formats.layout import Layout
from pipeline.util.atomic import write_json_atomic

# Not scaled in a projection: reading (a sampled run still reads and parses every input
# document before it picks the sample), and a global stage's reduce and finalize, whose
# cost at sample sizes is mostly per partition, not per document. Everything else is
# scaled by 1/fraction, which still over-counts per-process start-up (numba caches,
# models) when the sample is small: the projection leans high.
UNSCALED_SUFFIXES = ("read+write", ":reduce", ":finalize")


def write_cost(path: Path, label: str, started: float) -> None:
    """Record the CPU seconds since ``started`` (time.process_time) under ``label``."""
    write_json_atomic(path, {"cpu_seconds": {label: time.process_time() - started}})


def summarize_cost(layout: Layout, manifest: dict, wall_seconds: float, workers: int, output_bytes: int) -> dict:
    cpu: Counter[str] = Counter()
    folder = layout.cost_folder
    for path in sorted(folder.rglob("*.json")) if folder.exists() else []:
        cpu.update(json.loads(path.read_text())["cpu_seconds"])
    total = sum(cpu.values())
    tokens = sum(stage["counters"].get("tokens", 0) for stage in manifest["stages"].values())
    summary = {
        "wall_seconds": round(wall_seconds, 3),
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
            "reduce and finalize are not (a sample reads every input; reduce and finalize work per partition)",
            "cpu_seconds": round(scaled, 1),
            "core_hours": round(scaled / 3600, 4),
            "wall_seconds_on_this_machine": round(scaled / max(workers, 1), 1),
            "input_documents": round(manifest["balance"]["input"] / fraction),
            "output_documents": round(manifest["balance"]["output"] / fraction),
            "output_tokens": round(tokens / fraction),
            "output_bytes": round(summary["output_bytes"] / fraction),
        }
    return summary
