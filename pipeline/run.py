"""``prep run``: plan the units, run each phase (skipping what a previous run finished),
then add everything up into the manifest.

Phases, in order: segment 0 over every unit; then, for each global stage, its map over
every unit, its reduce over partitions, its finalize, and the next segment over every
unit. Each unit of each phase leaves a marker under ``stats/``; killing the run at any
moment and running the same command again redoes only the units without one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.config import Config, ConfigError, load_config
from pipeline.cost import summarize_cost, write_cost
from pipeline.executor import LocalExecutor
from pipeline.manifest import build_manifest
from pipeline.plan import Layout, Segment, Unit, plan_segments, plan_units, stage_labels
from pipeline.progress import ProgressBar
from pipeline.stage import UnitContext
from pipeline.atomic import write_json_atomic
from pipeline.unit import built_stage, commit, run_unit, segment_parts


def run_pipeline(
    config_path: str | Path,
    out: str | Path,
    workers: int | None = None,
    strict: bool = False,
    force: bool = False,
    quiet: bool = False,
    executor: str = "local",
    address: str | None = None,
    sample: float = 1.0,
    progress: str = "bar",
) -> dict:
    """Run (or resume) a config into ``out``; returns the manifest.

    ``sample`` < 1 keeps a hash-sampled fraction of every source (by document id, so the
    same documents whatever the worker count) and projects the full run in cost.json.
    ``progress`` is "bar", "json" (one JSON line a second, for logs) or "none".
    """
    if not 0 < sample <= 1:
        raise ConfigError(f"--sample must be in (0, 1], not {sample}")
    wall_start = time.monotonic()
    config = load_config(config_path)
    layout = Layout(Path(out))
    units = plan_units(config)
    segments = plan_segments(config)
    labels = stage_labels(config)
    _claim_output(layout, _fingerprint(config, units, sample), force)
    _remove_temporaries(layout.out)
    workers = workers or config.run.workers or os.cpu_count() or 1
    runner = _executor(executor, address, workers)
    mode = "none" if quiet else progress
    unit_stats: list[dict] = []
    global_stats: dict[str, dict] = {}
    for segment in segments:
        if segment.entry is not None:
            label = labels[config.stages.index(segment.entry)]
            global_stats[label] = _run_global(config, layout, segment, units, runner, mode)
        unit_stats += _run_segment(config, layout, segment, units, labels, runner, strict, mode, sample)
    manifest = build_manifest(config, labels, unit_stats, global_stats)
    manifest["sample"] = sample
    write_json_atomic(layout.manifest, manifest)
    write_json_atomic(layout.cost_summary, summarize_cost(layout, manifest, time.monotonic() - wall_start, workers))
    return manifest


def _executor(name: str, address: str | None, workers: int | None):
    if name == "local":
        return LocalExecutor(workers or os.cpu_count() or 1)
    if name == "ray":
        from pipeline.ray_executor import RayExecutor  # ray is an optional extra

        return RayExecutor(address, workers)
    raise ConfigError(f"unknown executor {name!r} (local or ray)")


def _fingerprint(config: Config, units: list[Unit], sample: float) -> dict:
    inputs = []
    for unit in units:
        stat = unit.path.stat()
        inputs.append([unit.source, unit.file_key, stat.st_size, stat.st_mtime_ns])
    digest = hashlib.sha256(json.dumps([config.canonical(), inputs, sample]).encode()).hexdigest()
    return {"config": config.raw, "config_file": str(config.path), "sample": sample, "fingerprint": digest}


def _claim_output(layout: Layout, fingerprint: dict, force: bool) -> None:
    """Refuse to mix two different runs in one folder unless --force (which starts over)."""
    out = layout.out
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    previous = json.loads(layout.state.read_text()) if layout.state.exists() else None
    others = [p.name for p in out.iterdir() if p.name not in Layout.OWNED] if out.exists() else []
    if previous is not None and previous["fingerprint"] == fingerprint["fingerprint"] and not force:
        return  # the same run again: resume
    if not force:
        if previous is not None:
            raise ConfigError(
                f"{out} holds a run of a different config or different inputs "
                f"(from {previous['config_file']}); use another --out, or --force to delete it and start over"
            )
        if others or any((out / name).exists() for name in Layout.OWNED):
            raise ConfigError(f"{out} is not empty and was not made by prep run; use another --out, or --force")
    for name in Layout.OWNED:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    write_json_atomic(layout.state, fingerprint)


def _remove_temporaries(out: Path) -> None:
    """Half-written files of a killed run (their final names were never taken)."""
    for path in out.rglob(".*.tmp"):
        path.unlink()


def _run_segment(config, layout: Layout, segment: Segment, units, labels, executor, strict, mode, sample) -> list[dict]:
    phase = f"segment-{segment.index}"
    todo, done = [], []
    for unit in units:
        marker = layout.marker(phase, unit.source, unit.name)
        if marker.exists():
            done.append(json.loads(marker.read_text()))
        else:
            todo.append(unit)
    total = sum(u.path.stat().st_size for u in units) if segment.index == 0 else 0
    name = "read + stages" if segment.index == 0 else f"stages after {segment.entry.name}"
    bar = ProgressBar(name, total, len(units), mode=mode)
    for stats in done:
        bar.unit_done(stats.get("input_file", {}).get("bytes") or 0)
    tasks = [(segment_task, (config, layout.out, segment.index, unit, labels, strict, sample)) for unit in todo]
    results = executor.run(tasks, bar)
    bar.close()
    by_name = {(s["source"], s["unit"]): s for s in done + results}
    return [by_name[(u.source, u.name)] for u in units]


def segment_task(config: Config, out: Path, segment_index: int, unit: Unit, labels, strict, sample, progress=None) -> dict:
    segment = plan_segments(config)[segment_index]
    return run_unit(config, Layout(out), segment, unit, labels, strict=strict, progress=progress, sample=sample)


def _run_global(config: Config, layout: Layout, segment: Segment, units, executor, mode) -> dict:
    """Map over the previous segment's output, reduce each partition, finalize."""
    stage_config = segment.entry
    index = config.stages.index(stage_config)
    phase = f"global-{segment.index}-map"
    todo = [
        u for u in units
        if stage_config.applies_to(u.source) and not layout.marker(phase, u.source, u.name).exists()
    ]
    bar = ProgressBar(f"{stage_config.name}: map", 0, len(todo), mode=mode)
    executor.run([(map_task, (config, layout.out, segment.index, unit)) for unit in todo], bar)
    bar.close()
    stage = built_stage(index, stage_config, "")
    partitions = [p for p in range(stage.partitions()) if not layout.global_marker(segment.index, f"reduce-{p}").exists()]
    bar = ProgressBar(f"{stage_config.name}: reduce", 0, len(partitions), mode=mode)
    executor.run([(reduce_task, (config, layout.out, segment.index, p)) for p in partitions], bar)
    bar.close()
    marker = layout.global_marker(segment.index, "finalize")
    if not marker.exists():
        started = time.process_time()
        counters = stage.finalize(layout.global_work(segment.index))
        write_cost(layout.cost(f"global-{segment.index}", "", "finalize"), f"{stage_config.name}:finalize", started)
        write_json_atomic(marker, {"counters": counters})
    return json.loads(marker.read_text())["counters"]


def map_task(config: Config, out: Path, segment_index: int, unit: Unit, progress=None) -> dict:
    layout = Layout(out)
    segment = plan_segments(config)[segment_index]
    stage = built_stage(config.stages.index(segment.entry), segment.entry, unit.source)
    ctx = UnitContext(out_dir=layout.out, source=unit.source, unit=unit.name)
    parts = segment_parts(layout.segment_docs(segment_index - 1, unit.source), unit.name)

    def batches():
        for path in parts:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
                if progress:
                    progress(batch.num_rows, 0, 0)
                yield batch

    work = layout.global_work(segment_index)
    work.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    counters = stage.map_unit(batches(), ctx, work)
    write_cost(layout.cost(f"global-{segment_index}-map", unit.source, unit.name), f"{segment.entry.name}:map", started)
    commit(ctx, layout.marker(f"global-{segment_index}-map", unit.source, unit.name), {"counters": counters})
    return counters


def reduce_task(config: Config, out: Path, segment_index: int, partition: int, progress=None) -> dict:
    layout = Layout(out)
    segment = plan_segments(config)[segment_index]
    stage = built_stage(config.stages.index(segment.entry), segment.entry, "")
    started = time.process_time()
    counters = stage.reduce_partition(partition, layout.global_work(segment_index))
    write_cost(layout.cost(f"global-{segment_index}-reduce", "", str(partition)), f"{segment.entry.name}:reduce", started)
    write_json_atomic(layout.global_marker(segment_index, f"reduce-{partition}"), {"counters": counters})
    return counters


def print_summary(manifest: dict, out: Path, stream=None) -> None:
    balance = manifest["balance"]
    w = (stream or sys.stderr).write
    w(f"\ndone: {balance['input']:,} documents in, {balance['output']:,} kept, {balance['rejected']:,} rejected -> {out}\n")
    for name, source in manifest["sources"].items():
        w(f"  {name:<12} in {source['input']:>10,}  kept {source['output']:>10,}  rejected {source['rejected']:>10,}\n")
    for label, stage in manifest["stages"].items():
        rejected = sum(stage["rejected"].values())
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(stage["rejected"].items(), key=lambda kv: -kv[1])[:4])
        w(f"  stage {label:<12} {stage['input']:>10,} in  {rejected:>10,} rejected  {stage['changed']:>8,} changed  {reasons}\n")
    if manifest["bad_input"]:
        total = sum(manifest["bad_input"].values())
        kinds = ", ".join(f"{k.removeprefix('bad-input:')} {n:,}" for k, n in manifest["bad_input"].items())
        w(f"  bad input quarantined: {total:,} ({kinds}); see {out / 'rejects'} (stage 'read') for files and lines\n")
    for warning in manifest["warnings"]:
        w(f"  warning: {warning}\n")
