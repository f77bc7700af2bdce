"""A global stage's phases before its filter, as the stage declares them
(``pipeline.phases``): map over every unit, reduce each partition, finalize in rounds;
each task leaves a marker so a killed run redoes only what has none. The files a task
fetches (``engine/fetch.py``), the folders removed between rounds, all come from the
declarations.

A stage whose phases declare no map (decontaminate) is prepared before the first
segment (``prepare_all``): only its finalize, once for each set of files its sources'
filters read, in the stage's own work folder (``Layout.stage_work``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

import pyarrow.parquet as pq

from pipeline.engine.config import Config
from pipeline.engine.cost import write_cost
from pipeline.engine.fetch import damaged_work, matching, pull_work, unit_documents
from pipeline.engine.plan import Segment, Unit, plan_segments, stage_labels
from pipeline.engine.progress import ProgressBar
from pipeline.engine.slices import pull_slices
from pipeline.engine.storage import RunStore
from pipeline.engine.unit import built_stage, commit
from pipeline.engine.work_disk import WorkDisk
from pipeline.formats.layout import Layout, file_in
from pipeline.phases import Round, globs
from pipeline.stage import UnitContext
from pipeline.util.atomic import is_temporary, write_json_atomic


@dataclass(frozen=True)
class Place:
    """Where a global stage's reduce and finalize keep their files and markers, and which
    stage a worker builds to run one of their tasks: the stage opening a segment
    (``_segment_place``), or one prepared before the first (``prepare_all``)."""

    stage: int  # its index in ``config.stages``
    source: str  # whose options build it ("": the shared ones)
    work: str  # its work folder, as ``Layout.key`` names it
    phase: str  # its markers' and timings' phase (``stats/<phase>/``)

    def built(self, config: Config):
        return built_stage(self.stage, config.stages[self.stage], self.source)


def _segment_place(config: Config, segment_index: int) -> Place:
    entry = plan_segments(config)[segment_index].entry
    work = Layout().key(Layout().global_work(segment_index))
    return Place(config.stages.index(entry), "", work, Layout.global_phase(segment_index))


def run_global(
    config: Config, store: RunStore, segment: Segment, units, executor, mode, disk: WorkDisk, tally: Counter
) -> dict:
    """Map over the previous segment's output, reduce each partition, finalize in rounds.
    ``tally`` counts the map's units, those an earlier run did, and the reduce and
    finalize tasks this run has left (``cost.RESUMED``)."""
    layout = Layout(store.root)
    stage_config = segment.entry
    place = _segment_place(config, segment.index)
    phase = Layout.map_phase(segment.index)
    store.sync(layout.key(layout.markers(phase)))
    store.sync(layout.key(layout.markers(place.phase)))
    applies = [u for u in units if stage_config.applies_to(u.source)]
    todo = [u for u in applies if not layout.marker(phase, u.source, u.name).exists()]
    tally.update(units=len(applies), done_before=len(applies) - len(todo))
    check = not _segment_done(store, segment.index, units)  # once it is, ``drop_finished`` removes the files
    if check:
        _check_map_outputs(store, layout, segment.index, [u for u in applies if u not in todo])
    bar = ProgressBar(f"{stage_config.name}: map", 0, len(todo), mode=mode)
    executor.run([(map_task, (config, store, segment.index, unit)) for unit in todo], bar)
    bar.close()
    phases = place.built(config).phases()
    declared = range(phases.reduce.partitions if phases.reduce else 0)
    partitions = [p for p in declared if not layout.step_marker(place.phase, f"reduce-{p}").exists()]
    bar = ProgressBar(f"{stage_config.name}: reduce", 0, len(partitions), mode=mode)
    executor.run([(reduce_task, (config, store, segment.index, p)) for p in partitions], bar)
    bar.close()
    tally.update(global_tasks_run=len(partitions))
    return _finalized(config, store, place, executor, mode, disk, tally, check)


def prepare_all(config: Config, store: RunStore, units, executor, mode, disk: WorkDisk, tally: Counter) -> dict:
    """Every stage whose phases read no documents, prepared before the first segment: its
    finalize, once for each set of files its sources' filters read (per-source options may
    ask for another index), by label; a source without units needs none."""
    layout = Layout(store.root)
    labels = stage_labels(config)
    counters: dict[str, Counter] = {}
    for index, entry in enumerate(config.stages):
        if not entry.is_prepared:
            continue
        reads: dict[tuple, str] = {}  # the files a filter reads -> the first source reading them
        for source in dict.fromkeys(u.source for u in units if entry.applies_to(u.source)):
            reads.setdefault(built_stage(index, entry, source).phases().filter.reads, source)
        work = layout.key(layout.stage_work(entry.name))
        reader = next(segment for segment in plan_segments(config) if entry in segment.stages)
        check = not _segment_done(store, reader.index, units)
        for variant, source in enumerate(reads.values()):
            place = Place(index, source, work, Layout.prepare_phase(index, variant))
            store.sync(layout.key(layout.markers(place.phase)))
            counters.setdefault(labels[index], Counter()).update(
                _finalized(config, store, place, executor, mode, disk, tally, check)
            )
    return {label: dict(c) for label, c in counters.items()}


def _finalized(
    config: Config, store: RunStore, place: Place, executor, mode, disk: WorkDisk, tally: Counter, check: bool
) -> dict:
    """The stage's finalize counters: from its marker, or from running its rounds now.
    The marker also records the size of each file the rounds left in the work folder
    (but the map's, which its own markers record): ``check``, a resume whose later phases
    still read them finds them whole first (``_check_sizes``)."""
    marker = Layout(store.root).step_marker(place.phase, "finalize")
    tally.update(global_tasks_run=not marker.exists())
    if marker.exists():
        recorded = json.loads(marker.read_text())
        if check:
            _check_sizes(store, place.work, recorded.get("sizes", {}))
        return recorded["counters"]
    counters = _finalize(config, store, place, executor, mode, disk)
    mapped = place.built(config).phases().map
    is_mapped = matching(place.work, globs(mapped.writes) if mapped else ())
    sizes = store.sizes(place.work, lambda rel: not is_mapped(rel) and not is_temporary(PurePosixPath(rel).name))
    write_json_atomic(marker, {"counters": counters, "sizes": sizes})
    store.push([], marker=marker)
    return counters


def _segment_done(store: RunStore, segment_index: int, units: list[Unit]) -> bool:
    """Whether every unit has its marker of the segment: then no phase reads the work files
    of the stages filtering in it any more (``drop_finished`` removes them)."""
    layout, phase = Layout(store.root), Layout.segment_phase(segment_index)
    store.sync(layout.key(layout.markers(phase)))
    return all(layout.marker(phase, u.source, u.name).exists() for u in units)


def _finalize(config: Config, store: RunStore, place: Place, executor, mode, disk: WorkDisk) -> dict:
    """Run the stage's finalize rounds on the executor; the driver only plans between them.

    A task's result also lives in its marker, so a resumed run replays the plan from the
    markers and runs just the tasks without one."""
    layout = Layout(store.root)
    stage = place.built(config)
    finalize = stage.phases().finalize
    done: list[list[dict]] = []
    dropped: tuple = ()
    while isinstance(step := finalize.plan(done), Round):
        k = len(done)
        disk.note()  # before the round removes the inputs no later round needs
        for files in step.drops:
            store.remove(file_in(place.work, files.folder))
        # Each task is told every path dropped so far, which its machine's mirror forgets
        # (``_work_task``): a machine that ran no task of the round that dropped a path
        # still holds it, and would upload it again with its next task's files.
        dropped += tuple(files for files in step.drops if files not in dropped)
        step = replace(step, drops=dropped)
        markers = [layout.step_marker(place.phase, f"finalize-{k}-{t}") for t in range(step.tasks)]
        todo = [t for t in range(step.tasks) if not markers[t].exists()]
        bar = ProgressBar(f"{stage.name}: {step.name}", 0, len(todo), mode=mode, step=True)
        tasks = [(finalize_task, (config, store, place, step.for_task(t), k, t)) for t in todo]
        results = executor.run(tasks, bar)
        bar.close()
        # This run's tasks answer here (their markers may sit in another machine's mirror);
        # earlier runs' came with the markers synced before the map.
        fresh = dict(zip(todo, results))
        earlier = {t: json.loads(markers[t].read_text())["counters"] for t in range(step.tasks) if t not in fresh}
        done.append([fresh.get(t, earlier.get(t)) for t in range(step.tasks)])
    return step


def map_task(config: Config, store: RunStore, segment_index: int, unit: Unit, progress=None) -> dict:
    layout = Layout(store.root)
    segment = plan_segments(config)[segment_index]
    stage = built_stage(config.stages.index(segment.entry), segment.entry, unit.source)
    ctx = UnitContext(out_dir=layout.out, source=unit.source, unit=unit.name)
    parts = unit_documents(store, layout, segment_index - 1, unit)

    def batches():
        for path in parts:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
                if progress:
                    progress(batch.num_rows, 0, 0)
                yield batch

    work = layout.global_work(segment_index)
    work.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    declared = stage.phases().map
    counters = declared.run(batches(), ctx, work)
    _check_declared(
        stage.name, set(ctx.pending.values()), {f.path(work, unit.source, unit.name) for f in declared.writes}
    )
    sizes = {layout.key(final): tmp.stat().st_size for tmp, final in ctx.pending.items()}  # ``_check_map_outputs``
    phase = Layout.map_phase(segment_index)
    write_cost(ctx.atomic(layout.cost(phase, unit.source, unit.name)), f"{segment.entry.name}:map", started)
    commit(ctx, layout.marker(phase, unit.source, unit.name), {"counters": counters, "sizes": sizes}, store)
    return counters


def _check_map_outputs(store: RunStore, layout: Layout, segment_index: int, units: list[Unit]) -> None:
    """The files an earlier run's map wrote for ``units`` are still there, at the sizes its
    markers recorded (``map_task``); the later phases read them until the segment the stage
    opens is done. Why: in ``work/`` while the run is stopped, a user may delete or cut one
    short; deleted, the finalize failed as a bug ("dedup has no map output for unit ...");
    cut at a record's end, the run completed on fewer signatures, other decisions, no word."""
    phase = Layout.map_phase(segment_index)
    recorded = {}
    for unit in units:
        recorded.update(json.loads(layout.marker(phase, unit.source, unit.name).read_text()).get("sizes", {}))
    _check_sizes(store, layout.key(layout.global_work(segment_index)), recorded)


def _check_sizes(store: RunStore, folder: str, recorded: dict[str, int]) -> None:
    """Each file of ``recorded`` (path relative to the run's root -> size), under ``folder``,
    is there at its size; else the resume is refused, naming the file."""
    stored = store.sizes(folder, lambda rel: rel in recorded)
    for key, size in recorded.items():
        if stored.get(key) != size:
            found = "not there" if key not in stored else f"{stored[key]:,} bytes where {size:,} were written"
            raise damaged_work(store, key, found)


def reduce_task(config: Config, store: RunStore, segment_index: int, partition: int, progress=None) -> dict:
    place = _segment_place(config, segment_index)
    stage = place.built(config)
    reduce = stage.phases().reduce
    return _work_task(
        store,
        place,
        (globs(reduce.reads), globs(reduce.slices), range(partition, partition + 1)),
        lambda work: reduce.run(partition, work),
        f"reduce-{partition}",
        (Layout.reduce_phase(segment_index), str(partition), f"{stage.name}:reduce"),
    )


def finalize_task(config: Config, store: RunStore, place: Place, step: Round, k: int, task: int, progress=None) -> dict:
    stage = place.built(config)
    return _work_task(
        store,
        place,
        (step.whole_globs(), globs(step.slices), step.sliced(task)),
        lambda work: stage.phases().finalize.run(step, task, work),
        f"finalize-{k}-{task}",
        (place.phase, f"finalize-{k}-{task}", f"{stage.name}:finalize"),
        forget=step.drops,
    )


def _check_declared(name: str, written: set, declared: set) -> None:
    """A map writes only the files its declaration names (a unit it skips may write
    none): an undeclared one would never reach the tasks that read it on another machine."""
    if not written <= declared:
        odd = ", ".join(sorted(str(p) for p in written - declared))
        raise RuntimeError(f"{name}: its map wrote files its phases do not declare ({odd})")


def _work_task(
    store: RunStore, place: Place, reads, work_on, step: str, cost_at: tuple[str, str, str], forget=()
) -> dict:
    """One task over the work folder (a reduce partition, a finalize task): forget what the
    store dropped (``forget``, declared families), fetch what it reads (``reads``:
    whole files, and files of which it reads a range of partitions), run it, upload what it
    wrote, then its marker with its result."""
    layout = Layout(store.root)
    for files in forget:
        store.forget(file_in(place.work, files.folder))
    whole, sliced, partitions = reads
    pull_work(store, place.work, whole)
    if sliced:
        pull_slices(store, place.work, matching(place.work, sliced), partitions)
    started = time.process_time()
    work = layout.at(place.work)
    work.mkdir(parents=True, exist_ok=True)
    counters = work_on(work)
    phase, name, label = cost_at
    cost = layout.cost(phase, "", name)
    write_cost(cost, label, started)
    store.push_tree(place.work)
    marker = layout.step_marker(place.phase, step)
    write_json_atomic(marker, {"counters": counters})
    store.push([cost], marker=marker)
    return counters
