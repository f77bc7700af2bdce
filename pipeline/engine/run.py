"""``prep run``: plan the units, run each phase (skipping what a previous run finished),
then add everything up into the manifest.

Phases, in order: the finalize of each stage whose phases read no documents (an index
of side files); segment 0 over every unit; then, for each global stage, its map over
every unit, its reduce over partitions, its finalize, and the next segment over every
unit. Each unit of each phase leaves a marker under ``stats/``; killing the run at any
moment and running the same command again redoes only the units without one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path, PurePosixPath

from pipeline.engine.config import Config, ConfigError, load_config
from pipeline.engine.cost import DISK_PARTS, RESUMED, STORE_RETRIES, TASK_RETRIES, CommandWall, summarize_cost
from pipeline.engine.duplicate_ids import find_duplicates
from pipeline.engine.executor import LocalExecutor, start_fork_server
from pipeline.engine.global_run import prepare_all, run_global
from pipeline.engine.input_files import input_stat
from pipeline.engine.inputs_read import files_read, without_files
from pipeline.engine.manifest import build_manifest, write_manifest
from pipeline.engine.plan import Segment, Unit, plan_segments, plan_units, stage_labels
from pipeline.engine.progress import ProgressBar
from pipeline.engine.retry import start_counting, take_retries
from pipeline.engine.run_options import RunOptions
from pipeline.engine.run_record import entries, previous_run, refuse_foreign, refuse_links
from pipeline.engine.run_state import check_inputs, same_inputs, write_state
from pipeline.engine.runlock import locked_output
from pipeline.engine.stage_registry import registry
from pipeline.engine.storage import RunStore, is_remote
from pipeline.engine.unit import segment_task
from pipeline.engine.unit_outputs import checked_markers
from pipeline.engine.warmup import warm_up
from pipeline.engine.work_disk import WORK_DISK, WorkDisk, drop_finished, finish_work, keeps_work
from pipeline.formats.layout import Layout, is_unit_file, unit_files
from pipeline.kernels.hashing import file_sha256
from pipeline.phases import check_import
from pipeline.phases import sized as sized_by_phases
from pipeline.readers.splits import parsed_bytes
from pipeline.stage import GlobalStage
from pipeline.util.atomic import is_temporary, write_json_atomic
from pipeline.util.numbers import counted


def run_pipeline(config_path: str | Path, out: str | Path, **flags) -> dict:
    """Run (or resume) a config into ``out``; returns the manifest. ``flags`` are
    ``prep run``'s, by name (``RunOptions``).

    ``sample`` < 1 keeps a hash-sampled fraction of every source (by document id, so the
    same documents whatever the worker count; another ``sample_seed`` draws another sample)
    and projects the full run in cost.json.
    ``progress`` is "bar", "json" (one JSON line a second, for logs) or "none".
    """
    wall_start = time.monotonic()
    start_counting()
    _check_out(out)
    config = load_config(config_path, out)
    options = RunOptions.from_flags(config, **flags)
    if options.executor == "local" and options.workers > 1:
        start_fork_server()  # the workers' imports overlap the planning below
    units = _planned_units(config)
    config = config.without_files()  # the units name them; tasks carry the config
    sizes = _input_sizes(units)
    fingerprint = _fingerprint(config, units, options)
    store = RunStore(str(out), fingerprint["fingerprint"])
    with contextlib.ExitStack() as held:
        try:
            refuse_foreign(store, options.force)  # before the lock, which would leave .prep/ in a folder not prep's
            held.enter_context(locked_output(store))
            sized = _sized(config, sizes, options.sample)
            sized = _claim_output(store, units, fingerprint, options.force, sized, config)
        except OSError as error:  # a read-only folder, a missing bucket, no credentials
            raise ConfigError(f"cannot write to --out {out}: {error}") from None
        for index, values in sized.items():
            config.stages[int(index)].options.update(values)
        if options.asked_workers and options.executor == "local":
            for line in worker_notes(options.asked_workers, len(units), os.cpu_count() or 1):
                _say(options, line)
        return _run_claimed(config, options, store, units, sizes, wall_start)


def _say(options: RunOptions, line: str) -> None:
    """A note to the user on stderr (a JSON line with ``--progress json``), unless --quiet."""
    if not options.quiet:
        print(json.dumps({"note": line}) if options.progress == "json" else line, file=sys.stderr)


def _check_out(out: str | Path) -> None:
    """Refuse an --out that can hold no run, before the config's inputs are listed: an
    input file or the config given as --out was refused as "matches only a prep run's
    output", an empty --out ran into the current folder, and a dangling link was "File
    exists"."""
    if not str(out).strip():
        raise ConfigError("--out is empty: name the folder the run writes")
    if is_remote(str(out)):
        return
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out} exists and is not a folder")
    if Path(out).is_symlink() and not Path(out).exists():  # mkdir says only "File exists"
        raise ConfigError(f"--out {out} is a link to {os.readlink(out)}, which does not exist")


def _planned_units(config: Config) -> list[Unit]:
    """The units, each with its file's version (``input_stat``, one request per remote
    file) taken before the file is cut in pieces: a unit reads only that version
    (``planned_input``), so pieces cut from one version never read another, even when
    the file changes while the run plans."""
    try:
        return plan_units(config, lambda path: tuple(input_stat(path)))
    except OSError as error:
        raise ConfigError(f"cannot read an input: {error}") from None


def _run_claimed(
    config: Config,
    options: RunOptions,
    store: RunStore,
    units: list[Unit],
    sizes: dict[tuple[str, str], float],
    wall_start: float,
) -> dict:
    """The run itself, once this process holds --out."""
    layout = Layout(store.root)
    segments = plan_segments(config)
    labels = stage_labels(config)
    _remove_temporaries(layout.out)
    keep_work = keeps_work(store, options.keep_work)
    runner = _executor(options)
    unit_stats: list[dict] = []
    global_stats: dict[str, dict] = {}
    disk = WorkDisk(store)
    tally: Counter[str] = Counter()  # what earlier runs had done (``RESUMED``)
    command = CommandWall(layout, store, wall_start)
    try:
        warm_up(config, units, runner, options.mode, sizes)
        global_stats.update(prepare_all(config, store, units, runner, options.mode, disk, tally))
        for segment in segments:
            if segment.entry is not None:
                label = labels[config.stages.index(segment.entry)]
                global_stats[label] = run_global(config, store, segment, units, runner, options.mode, disk, tally)
            unit_stats += _run_segment(config, options, store, segment, units, runner, sizes, tally)
            sizes = {(s["source"], s["unit"]): s.get("output", 0) for s in unit_stats[-len(units) :]}  # next input
            disk.note()
            command.note(tally)
            drop_finished(config, store, segment)
    finally:
        runner.close()
    manifest = build_manifest(config, labels, unit_stats, global_stats, sampled=options.sampled)
    manifest["sample"] = options.sample
    if options.sample_seed:
        manifest["sample_seed"] = options.sample_seed
    _note_duplicate_ids(manifest, store, layout, units)
    finish_work(store, keep_work)
    wall = time.monotonic() - wall_start
    command.note(tally, wall)
    store.sync(layout.key(layout.cost_folder))
    # only a projection needs the fixed bytes, which read the end of every file
    output = {part: (store.size(f), store.fixed_size(f) if options.sampled else 0) for part, f in DISK_PARTS.items()}
    cost = summarize_cost(layout, manifest, wall, options.workers, output)
    cost[WORK_DISK] = {**disk.figures(), "kept": options.keep_work}
    cost[STORE_RETRIES] = dict(sorted((runner.store_retries + Counter(take_retries())).items()))  # workers' + ours
    cost[TASK_RETRIES] = dict(runner.retried)  # by phase, in run order; beside the timings: both differ run to run
    done_before = tally["done_before"]
    complete = 0 < done_before == tally["units"] and not tally["global_tasks_run"]  # a fresh run is no rerun
    cost[RESUMED] = {"units": tally["units"], "done_before": done_before, "complete_before": complete}
    write_manifest(layout.manifest, manifest, files_read(store, units))
    write_json_atomic(layout.cost_summary, cost)
    store.push([layout.cost_summary], marker=layout.manifest)
    store.drop_mirror()
    return manifest


def _note_duplicate_ids(manifest: dict, store: RunStore, layout: Layout, units: list[Unit]) -> None:
    """Count ids that occur more than once in the run; warn with a few examples.

    Counted once, from the id hashes in ``work/ids``, and recorded under ``stats/``
    (``Layout.duplicate_ids``) before ``work/`` is removed: a rerun of the finished run
    reads the record, so its manifest is the same bytes without the hashes."""
    record = layout.key(layout.duplicate_ids)
    if (text := store.read_text(record)) is not None:
        found = json.loads(text)["found"]
    else:
        found = _count_duplicate_ids(store, layout, units)
        store.write_text(record, json.dumps({"found": found}, indent=1))
    if found is None:
        return
    manifest["duplicate_ids"] = found
    examples = "; ".join(f"{e['id']!r} x{e['copies']} in {', '.join(e['files'])}" for e in found["examples"])
    manifest["warnings"].append(
        f"{found['ids']:,} ids occur more than once ({found['extra_copies']:,} extra copies), so they name "
        f"documents ambiguously (prep show lists every copy); e.g. {examples}"
    )


def _count_duplicate_ids(store: RunStore, layout: Layout, units: list[Unit]) -> dict | None:
    """``find_duplicates`` over the run's id hashes, with what it reads fetched first."""
    store.pull(layout.key(layout.id_work))

    def output_files(unit: Unit) -> list[Path]:
        files = []
        for folder in (layout.docs(unit.source), layout.rejects(unit.source)):
            store.pull(layout.key(folder), keep=lambda rel: is_unit_file(PurePosixPath(rel).name, unit.name))
            files += unit_files(folder, unit.name)
        return files

    return find_duplicates(layout, units, output_files)


def worker_notes(asked: int, units: int, cores: int) -> list[str]:
    """What a user who asked for ``asked`` workers should know: a phase starts at most a
    worker per task (``LocalExecutor``), so past the unit count the rest never start; and
    past the cores, workers only take turns on them, each holding its own memory."""
    notes = []
    if asked > units:
        notes.append(f"workers: {asked} asked, {counted(units, 'unit')}: {units} started (one per task at most)")
    if min(asked, units) > cores:
        notes.append(
            f"warning: {min(asked, units)} workers on {counted(cores, 'core')}: they take turns and each holds its "
            f"own memory (--workers {cores} is as fast)"
        )
    return notes


def _executor(options: RunOptions):
    if options.executor == "local":
        return LocalExecutor(options.workers)
    if options.executor == "ray":
        from pipeline.engine.ray_executor import RayExecutor  # ray is an optional extra

        return RayExecutor(options.address, options.workers)
    raise ConfigError(f"unknown executor {options.executor!r} (local or ray)")


def _fingerprint(config: Config, units: list[Unit], options: RunOptions) -> dict:
    """What makes a run this run: the config, the list of inputs, the sample, and the
    contents of the files stages read besides the documents (models, by sha256), and the
    ``version`` of each stage past its first (so a run's earlier fingerprints stay theirs).

    The inputs' versions (``input_stat``) are kept in the state file by unit and checked
    by ``run_state.check_inputs``, so touching a file does not make it another run.
    The input list is hashed as its JSON text, streamed: the text was 235 bytes a file
    at the driver's peak."""
    stage_files = {path: file_sha256(path) for stage in config.stages for path in stage.files()}
    digest = hashlib.sha256(f"[{json.dumps(config.canonical())}, [".encode())
    for k, (source, key) in enumerate((unit.source, file.key) for unit in units for file in unit.files):
        digest.update(f"{', ' if k else ''}{json.dumps([source, key])}".encode())  # the list's json, streamed
    seed = f", {options.sample_seed}" if options.sample_seed else ""  # seedless runs keep their print
    versions = {stage.name: version for stage in config.stages if (version := registry()[stage.name].version) > 1}
    versioned = f", {json.dumps(versions)}" if versions else ""
    digest.update(f"], {json.dumps(options.sample)}{seed}, {json.dumps(stage_files)}{versioned}]".encode())
    return {
        "config": config.raw,
        "config_file": str(config.path),
        "sample": options.sample,
        "sample_seed": options.sample_seed,
        "stage_files": stage_files,
        "fingerprint": digest.hexdigest(),
    }


def _sized(config: Config, sizes: dict[tuple[str, str], float], sample: float) -> dict:
    """What the run's size decides of each global stage's options (``phases.sized``),
    by the stage's index in the config; the text a stage sees is its sources' share
    (``sizes``: ``_input_sizes``)."""
    sized = {}
    for index, stage in enumerate(config.stages):
        cls = registry()[stage.name]
        if issubclass(cls, GlobalStage):
            text = sample * sum(size for (source, _), size in sizes.items() if stage.applies_to(source))
            values = sized_by_phases(cls(cls.Options(**stage.options)), text)
            if values:
                sized[str(index)] = values
    return sized


def _claim_output(
    store: RunStore,
    units: list[Unit],
    fingerprint: dict,
    force: bool,
    sized: dict,
    config: Config,
) -> dict:
    """Refuse to mix two different runs in one folder unless --force (which starts over),
    and a new run whose imports cannot be read (``_check_imports``).
    Returns the sized options the run uses: ``sized`` for a new run, what a resumed run's
    start recorded (none for a run of an older prep, which had fixed defaults)."""
    out = store.uri
    previous = previous_run(store, force)
    head = {**fingerprint, "sized": sized}
    if previous is not None and previous.get("fingerprint") == fingerprint["fingerprint"] and not force:
        head["sized"] = previous.get("sized", {})
        recorded = previous.pop("units", {})  # none from an older prep, which recorded files
        if not same_inputs(recorded, units):  # the same run again, but some input looks touched
            check_inputs(store, units, recorded)
            write_state(store, head, units)
        return head["sized"]  # resume
    if previous is not None and not force:
        raise ConfigError(
            f"{out} holds a run of a different config, different inputs or different models "
            f"(from {previous['config_file']}); use another --out, or --force to delete it and start over"
        )
    _check_imports(config)
    if previous is not None:  # a run's folder: what Layout.OWNED names there, a run wrote (refuse_foreign)
        refuse_links(store)
        # The manifest, then the markers, then the rest: a --force killed part-way leaves
        # the record of the run it was deleting, which the same command without --force
        # then resumes. Without markers it redoes every unit; removed after docs/ (in name
        # order), they made it "already complete" with its documents gone.
        owned = [name for name in entries(store) if name in Layout.OWNED]
        for name in sorted(owned, key=lambda name: (name != Layout.MANIFEST, name != Layout.STATS)):
            store.remove(name)
        store.remove(Layout().key(Layout().state))
    write_state(store, head, units)
    return sized


def _check_imports(config: Config) -> None:
    """Each global stage's import (``index_from``) can be read, checked when a run starts
    and not when it resumes: a finished run that imported an index removed since runs
    nothing that reads it."""
    for stage in config.stages:
        cls = registry()[stage.name]
        if issubclass(cls, GlobalStage):
            try:
                check_import(cls(cls.Options(**stage.options)))
            except OSError as error:  # not the output's: the caller's OSError says "cannot write to --out"
                raise ConfigError(f"{stage.name}: cannot read what it imports: {error}") from None


def _remove_temporaries(out: Path) -> None:
    """Half-written files of a killed run (their final names were never taken); the
    run holds the folder's lock, so no live writer owns any of them."""
    for path in out.rglob(".*"):
        if is_temporary(path.name) and path.is_file():
            path.unlink()


def _file_bytes(unit: Unit) -> int:
    """The size on disk of the files a unit reads (all of each, for a piece of one)."""
    return sum(file.size for file in unit.files)


def _input_sizes(units: list[Unit]) -> dict[tuple[str, str], float]:
    """Bytes each unit parses, about: its file's (uncompressed, where the file says; a pack's
    files are not opened), a file's shared evenly by its pieces (``splits`` cuts them even).
    What is no file (a FIFO) was planned with size 0, which ``parsed_bytes`` never opens."""
    pieces = Counter((unit.source, unit.first_index) for unit in units)
    one = {(u.source, u.name): parsed_bytes(u.files[0].path, u.files[0].size) for u in units if len(u.files) == 1}
    return {
        (u.source, u.name): one.get((u.source, u.name), _file_bytes(u)) / pieces[u.source, u.first_index] for u in units
    }


def _largest_first(units: list[Unit], sizes: dict[tuple[str, str], float]) -> list[Unit]:
    """The units in the order workers take them: largest first, so that the last ones
    running are small and no worker waits long for the others at a phase's end (the
    e2e corpus's shards differ 2.5x in time: a worker idled a second). Equal sizes keep
    the planned order; nothing a unit writes depends on when it ran."""
    return sorted(units, key=lambda unit: -sizes.get((unit.source, unit.name), 0))


def _run_segment(
    config: Config,
    options: RunOptions,
    store: RunStore,
    segment: Segment,
    units: list[Unit],
    executor,
    sizes: dict[tuple[str, str], float],
    tally: Counter,
) -> list[dict]:
    """Run the units of a segment that have no marker, largest first; their stats in
    ``units`` order, ``without_files``; ``tally`` counts the units and those done before."""
    phase = Layout.segment_phase(segment.index)
    layout = Layout(store.root)
    store.sync(layout.key(layout.markers(phase)))
    name = "read + stages" if segment.index == 0 else f"stages after {segment.entry.name}"
    input_bytes = sum(_file_bytes(u) for u in units if u.reports_file) if segment.index == 0 else 0
    bar = ProgressBar(name, input_bytes, len(units), mode=options.mode)
    done, todo, redone = checked_markers(store, segment.index, units)
    for stats in done:
        bar.unit_done(sum(file.get("bytes") or 0 for file in stats.get("input_files", [])))
        without_files(stats)
    if redone:
        _say(options, redone)
    tally.update(units=len(units), done_before=len(done))
    todo = _largest_first(todo, sizes)
    results = executor.run([(segment_task, (config, store, segment.index, unit, options)) for unit in todo], bar)
    bar.close()
    by_name = {(s["source"], s["unit"]): s for s in done + results}
    return [by_name[(u.source, u.name)] for u in units]
