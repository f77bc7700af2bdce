"""What a resume finds when the run was stopped at a named point and its folder was then
touched: each case a fuzz driver (kills at random file-system commits, resume, compare)
found, made deterministic. The run stops by a task raising in this process (one worker
runs the tasks in the driver), as ``tests/test_run.py`` stops one."""

from __future__ import annotations

import shutil

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
DEDUP = '[[stages]]\nname = "dedup"\n'


def _web_config(tmp_path, stages: str):
    """The sample's web pages (one unit) through ``stages``."""
    return write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["{REPO}/data/sample/web/*.gz"]\n{stages}')


def _stopped_at(config, out, monkeypatch, module, name: str, when=lambda *args: True, **flags) -> None:
    """Run ``config`` into ``out`` (with ``prep run``'s ``flags``) until ``module.name`` is
    called with arguments ``when`` takes: it raises there, and the run stops as a kill would."""
    real = getattr(module, name)

    def stopped(*args, **kwargs):
        if when(*args):
            raise RuntimeError(f"stopped at {name}")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, stopped)
    with pytest.raises(RuntimeError, match=f"stopped at {name}"):
        run_pipeline(config, out, workers=1, quiet=True, **flags)
    monkeypatch.undo()


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
    # Blocks of 64 KB: the pack's files are parsed one by one, not together, so their
    # fields drift from file to file and the unit's work file has several parts.
    config, out = _web_config(tmp_path, "[run]\nblock_bytes = 65536\n" + DEDUP), tmp_path / "out"
    _stopped_at(config, out, monkeypatch, global_run_module, "map_task")
    parts = part_files(Layout(out).segment_docs(0, "web"), WEB_UNIT)
    assert len(parts) > 1
    if damage == "delete":
        parts[1].unlink()
        _refused_naming(config, out, f"work/segments/0/web/{WEB_UNIT}.parquet")  # the first of its parts
    else:
        parts[0].write_bytes(parts[0].read_bytes()[:1000])
        _refused_naming(config, out, f"work/segments/0/web/{WEB_UNIT}.parquet")


@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_a_map_output_deleted_or_cut_before_the_resume_is_refused_by_name(tmp_path, monkeypatch, damage):
    """dedup's signatures of a unit wait in ``work/`` from its map to its filter. Deleted,
    the finalize failed as a bug ("dedup has no map output for unit ..."); cut at a
    record's end, the run completed on fewer signatures (other decisions) without a word."""
    config, out = _web_config(tmp_path, DEDUP), tmp_path / "out"
    _stopped_at(config, out, monkeypatch, global_run_module, "reduce_task")
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
        (DEDUP, 1, "work/global/1/decisions/r00000.arrow"),  # its finalize's
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
    config, out = _web_config(tmp_path, stage), tmp_path / "out"

    def at_segment(config, store, index, *rest):
        return index == segment

    _stopped_at(config, out, monkeypatch, run_module, "segment_task", at_segment)
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
    _stopped_at(config, out, monkeypatch, run_module, "find_duplicates")
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

    def after_docs(store, rel):  # rejects/ goes after docs/ in the old order and in the new
        return rel == Layout.REJECTS

    _stopped_at(LIGHT_SAMPLE_CONFIG, out, monkeypatch, RunStore, "remove", after_docs, force=True)
    assert not (out / "docs").exists()
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    assert tree_digest(out) == clean


def test_a_tokenizer_file_replaced_before_the_resume_makes_it_another_run(tmp_path, monkeypatch):
    """The run's fingerprint holds the contents of the files its stages read: a tokenizer
    file was not among them, so a resume tokenized the units left with the new file (each
    source's shards check only against their own folder's) and completed, two vocabularies
    in one run. It is refused now as models replaced before a resume are."""
    vocab = REPO / "pipeline" / "text" / "vocab"
    tokenizer = tmp_path / "ours.tiktoken.gz"
    shutil.copy(vocab / "r50k_base.tiktoken.gz", tokenizer)
    for source in ("web", "math"):
        write_jsonl(tmp_path / source / "a.jsonl", [{"id": f"{source}{i}", "text": f"page {i}"} for i in range(3)])
    sources = "".join(f'[sources.{s}]\npaths = ["{s}/*.jsonl"]\n' for s in ("web", "math"))
    config = write_config(tmp_path / "run.toml", f'{sources}[[stages]]\nname = "tokenize"\ntokenizer = "{tokenizer}"\n')
    out, calls = tmp_path / "out", []

    def second_unit(*args):
        calls.append(args)
        return len(calls) == 2

    _stopped_at(config, out, monkeypatch, run_module, "segment_task", second_unit)
    shutil.copy(vocab / "cl100k_base.tiktoken.gz", tokenizer)
    with pytest.raises(ConfigError, match="holds a run of a different config, different inputs or different models"):
        run_pipeline(config, out, workers=1, quiet=True)


def test_a_run_resumes_with_another_run_workers_in_its_config(tmp_path, monkeypatch):
    """``[run] workers`` changes no output, as ``-w`` does not, yet a run stopped and
    resumed with another count in the config was refused as "a different config"."""
    stages = '[[stages]]\nname = "length"\nmin_chars = 200\n'
    config = _web_config(tmp_path, stages)
    clean = run_pipeline(config, tmp_path / "clean", workers=1, quiet=True)
    out = tmp_path / "out"
    _stopped_at(config, out, monkeypatch, run_module, "find_duplicates")
    write_config(config, f"[run]\nworkers = 2\n{config.read_text()}")
    resumed = run_pipeline(config, out, quiet=True)
    assert resumed.pop("config")["run"] == {"workers": 2}  # the manifest records the config as given
    clean.pop("config")
    assert resumed == clean
