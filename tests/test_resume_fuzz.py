"""What a resume finds when the run was stopped at a named point and its folder was then
touched: each case a fuzz driver (kills at random file-system commits, resume, compare)
found, made deterministic. The run stops by a task raising in this process (one worker
runs the tasks in the driver), as ``tests/test_run.py`` stops one."""

from __future__ import annotations

import pytest
from conftest import LIGHT_SAMPLE_CONFIG, REPO, write_config, write_jsonl
from test_run import tree_digest

import pipeline.engine.global_run as global_run_module
import pipeline.engine.run as run_module
from pipeline.engine.config import ConfigError
from pipeline.engine.run import run_pipeline
from pipeline.engine.storage import RunStore
from pipeline.formats.layout import Layout, part_files

WEB_UNIT = "00000-c4_guardian.json.gz.to-00002"  # the sample's web files, one unit (a pack)


def _stopped_before(task: str, tmp_path, monkeypatch):
    """A run of the sample's web pages through dedup, stopped as the first of dedup's
    ``task`` (``map_task``, ``reduce_task``) starts. Returns the config and --out."""
    config = write_config(
        tmp_path / "dedup.toml",
        f'[sources.web]\npaths = ["{REPO}/data/sample/web/*.gz"]\n[[stages]]\nname = "dedup"\n',
    )
    out = tmp_path / "out"

    def stopped(*args, **kwargs):
        raise RuntimeError(f"stopped before {task}")

    monkeypatch.setattr(global_run_module, task, stopped)
    with pytest.raises(RuntimeError, match=f"stopped before {task}"):
        run_pipeline(config, out, workers=1, quiet=True)
    monkeypatch.undo()
    return config, out


def _refused_naming(config, out, key: str) -> None:
    """The resume stops before it writes an output, in one line naming ``key``."""
    with pytest.raises(ConfigError) as refused:
        run_pipeline(config, out, workers=1, quiet=True)
    assert str(refused.value).startswith(f"{out}/{key}: a work file of this run is missing or damaged (")
    assert str(refused.value).endswith("so the run cannot resume: run with --force to start over")
    assert not (out / "docs").exists() and not (out / "manifest.json").exists()


@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_a_work_file_of_documents_deleted_or_cut_before_the_resume_is_refused_by_name(tmp_path, monkeypatch, damage):
    """A deleted part lost its documents silently until the balance failed, once every
    output was written, as "a bug in prep"; a cut one failed on a Parquet error that named
    no file. Either way the resume now stops before writing anything, naming the file."""
    config, out = _stopped_before("map_task", tmp_path, monkeypatch)
    parts = part_files(Layout(out).segment_docs(0, "web"), WEB_UNIT)
    assert len(parts) > 1
    if damage == "delete":
        parts[1].unlink()
        _refused_naming(config, out, f"work/segments/0/web/{WEB_UNIT}*.parquet")
    else:
        parts[0].write_bytes(parts[0].read_bytes()[:1000])
        _refused_naming(config, out, f"work/segments/0/web/{WEB_UNIT}.parquet")


@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_a_map_output_deleted_or_cut_before_the_resume_is_refused_by_name(tmp_path, monkeypatch, damage):
    """dedup's signatures of a unit wait in ``work/`` from its map to its filter. Deleted,
    the finalize failed as a bug ("dedup has no map output for unit ..."); cut at a
    record's end, the run completed on fewer signatures (other decisions) without a word."""
    config, out = _stopped_before("reduce_task", tmp_path, monkeypatch)
    bands = Layout(out).global_work(1) / "map" / "web" / f"{WEB_UNIT}.bands"
    if damage == "delete":
        bands.unlink()
    else:
        bands.write_bytes(bands.read_bytes()[: bands.stat().st_size // 2])
    _refused_naming(config, out, f"work/global/1/map/web/{WEB_UNIT}.bands")


DECONTAMINATE = f"""[[stages]]
name = "decontaminate"
[[stages.benchmarks]]
name = "inaugural"
path = "{REPO}/data/eval/inaugural.jsonl.gz"
fields = ["text"]
"""


@pytest.mark.parametrize(
    "stage, segment, file",
    [
        ('[[stages]]\nname = "dedup"\n', 1, "work/global/1/decisions/r00000.arrow"),  # its finalize's
        (DECONTAMINATE, 0, "work/decontaminate/*/hashes.npy"),  # built before the first segment
    ],
)
@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_a_finalized_work_file_deleted_or_cut_before_the_resume_is_refused_by_name(
    tmp_path, monkeypatch, stage, segment, file, damage
):
    """What a global stage's finalize leaves (dedup's decisions, decontaminate's index)
    waits in ``work/`` for the segment that filters by it. Deleted or cut while the run
    was stopped, the filter failed on whatever the stage's reader said (a missing Arrow
    file, "the benchmark index has not been built" as a bug, numpy's short read)."""
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["{REPO}/data/sample/web/*.gz"]\n{stage}')
    out = tmp_path / "out"
    segment_task = run_module.segment_task

    def stopped(config, store, segment_index, *args, **kwargs):
        if segment_index == segment:
            raise RuntimeError(f"stopped before segment {segment}")
        return segment_task(config, store, segment_index, *args, **kwargs)

    monkeypatch.setattr(run_module, "segment_task", stopped)
    with pytest.raises(RuntimeError, match=f"stopped before segment {segment}"):
        run_pipeline(config, out, workers=1, quiet=True)
    monkeypatch.undo()
    (path,) = out.glob(file)
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _refused_naming(config, out, str(path.relative_to(out)))


@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_id_hashes_deleted_or_cut_before_the_resume_are_rebuilt_from_the_outputs(tmp_path, monkeypatch, damage):
    """A unit's id hashes wait in ``work/ids`` for the count at the run's end. Deleted, the
    unit was passed over (its repeated ids not counted, silently); cut short, every rerun
    ended on "mmap length is greater than file size". The unit's documents and ledger rows
    hold the same ids: the count is the uninterrupted run's."""
    records = [
        {"id": "x1", "text": "hello world"},
        {"id": "x1", "text": "hi"},  # too short: the ledger holds this copy
        {"id": "x2", "text": ""},  # bad input: the ledger again
        {"id": "x2", "text": "a second x2"},
        {"id": "x3", "text": "only once"},
    ]
    write_jsonl(tmp_path / "in" / "a.jsonl", records)
    config = write_config(
        tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 5\n'
    )
    clean = run_pipeline(config, tmp_path / "clean", workers=1, quiet=True)
    assert clean["duplicate_ids"]["ids"] == 2
    out = tmp_path / "out"

    def stopped(*args, **kwargs):
        raise RuntimeError("stopped before the count")

    monkeypatch.setattr(run_module, "find_duplicates", stopped)
    with pytest.raises(RuntimeError, match="stopped before the count"):
        run_pipeline(config, out, workers=1, quiet=True)
    monkeypatch.undo()
    (hashes,) = (out / "work" / "ids" / "web").iterdir()
    if damage == "delete":
        hashes.unlink()
    else:
        hashes.write_bytes(hashes.read_bytes()[:-8])
    assert run_pipeline(config, out, workers=1, quiet=True) == clean
    assert (out / "manifest.json").read_bytes() == (tmp_path / "clean" / "manifest.json").read_bytes()


def test_a_force_killed_while_it_deletes_the_old_run_leaves_one_the_plain_command_redoes(tmp_path, monkeypatch):
    """--force deletes the run it finds, entry by entry, then its record. Killed part-way,
    the record still names that run, so the same command without --force resumes it: the
    markers went after docs/ (in name order), so it was "already complete" with its
    documents gone. The manifest and the markers go first now, and the resume redoes it."""
    out = tmp_path / "out"
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    clean = tree_digest(out)
    remove = RunStore.remove

    def killed(store, rel):
        if rel == Layout.REJECTS:  # after docs/ in any order
            raise RuntimeError("killed while --force deletes")
        remove(store, rel)

    monkeypatch.setattr(RunStore, "remove", killed)
    with pytest.raises(RuntimeError, match="killed while --force deletes"):
        run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True, force=True)
    monkeypatch.undo()
    assert not (out / "docs").exists()
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    assert tree_digest(out) == clean
