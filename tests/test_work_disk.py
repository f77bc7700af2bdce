"""The work folder after a run: removed as the run completes (a rerun needs none of it),
kept with ``--keep-work`` for a later run's ``index_from``, and its disk is reported.

A run over the bundled sample with two global stages (dedup, then paragraph_dedup), so
that there are documents between segments and two global stages' files."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import REPO, write_config
from test_run import prep, tree_digest

from pipeline.engine.run import run_pipeline
from pipeline.engine.storage import RunStore
from pipeline.engine.summary import print_summary
from pipeline.formats.layout import Layout

SAMPLE_WEB = REPO / "data" / "sample" / "web"


def _config(tmp_path: Path, dedup: str = "") -> Path:
    return write_config(
        tmp_path / f"chain{len(dedup)}.toml",
        f'[sources.web]\npaths = ["{SAMPLE_WEB}/*.gz"]\n'
        f'[[stages]]\nname = "dedup"\npartitions = 3\n{dedup}'
        '[[stages]]\nname = "paragraph_dedup"\n',
    )


def _work_files(out: Path) -> list[str]:
    work = out / Layout.WORK
    return sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())


# What --keep-work leaves: what a later run's ``index_from`` reads.
KEPT = (
    r"global/1/units\.json",
    r"global/1/reduce/p\d+\.index\.npy",
    r"global/1/map/web/.*\.docs\.arrow",
)


def _kept_only(files: list[str]) -> bool:
    return all(any(re.fullmatch(pattern, f) for pattern in KEPT) for f in files)


def _summary(out: Path) -> str:
    lines = io.StringIO()
    print_summary(json.loads((out / Layout.MANIFEST).read_text()), out, lines)
    return lines.getvalue()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("work_disk")
    config = _config(root)
    run_pipeline(config, root / "out", workers=1, quiet=True)
    return config, root / "out"


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("work_kept")
    run_pipeline(_config(root), root / "out", workers=1, quiet=True, keep_work=True)
    return root / "out"


def test_a_finished_run_removes_its_work_folder(finished):
    _, out = finished
    assert not (out / Layout.WORK).exists()
    assert json.loads(Layout(out).duplicate_ids.read_text()) == {"found": None}  # what a rerun reads instead
    figures = json.loads((out / Layout.COST_SUMMARY).read_text())["work_disk"]
    assert figures["left_bytes"] == 0 < figures["peak_bytes"] and figures["kept"] is False
    assert " at most, removed as the run completed (--keep-work keeps them for index_from)" in _summary(out)


def test_keep_work_leaves_only_what_a_later_run_imports(kept):
    files = _work_files(kept)
    assert _kept_only(files), files
    assert any(f.endswith(".index.npy") for f in files) and any(f.endswith(".docs.arrow") for f in files)
    figures = json.loads((kept / Layout.COST_SUMMARY).read_text())["work_disk"]
    left = RunStore(str(kept)).size([Layout.WORK])
    assert figures["left_bytes"] == left > 0 and figures["kept"] is True
    assert figures["peak_bytes"] > 2 * left  # the documents between segments, bands, forests, decisions
    assert " kept in work/ (what a later run's index_from reads)" in _summary(kept)


def test_the_same_command_without_the_flag_leaves_a_kept_index(kept):
    before = tree_digest(kept)
    run_pipeline(kept.parent / "chain0.toml", kept, workers=1, quiet=True)
    assert tree_digest(kept) == before  # work/ too: rm -r OUT/work removes it
    assert " kept in work/ (what a later run's index_from reads)" in _summary(kept)


def test_keep_work_changes_no_output(finished, kept):
    _, out = finished
    outputs = (Layout.DOCS, Layout.REJECTS)
    assert {k: v for k, v in tree_digest(out).items() if k.startswith(outputs)} == {
        k: v for k, v in tree_digest(kept).items() if k.startswith(outputs)
    }
    counts = [json.loads((o / Layout.MANIFEST).read_text())["stages"] for o in (out, kept)]
    assert counts[0] == counts[1]


def test_a_rerun_of_a_finished_run_is_a_no_op(finished):
    config, out = finished
    before = tree_digest(out)
    run_pipeline(config, out, workers=1, quiet=True)
    assert tree_digest(out) == before
    assert "already complete: an earlier run did every unit" in _summary(out)


def test_keep_work_on_a_run_that_removed_it_says_there_is_none(finished):
    config, out = finished
    run_pipeline(config, out, workers=1, quiet=True, keep_work=True)
    assert not (out / Layout.WORK).exists()
    assert "  work files: none; the run had completed and removed them (--keep-work into another --out" in _summary(out)


def test_a_later_run_imports_a_kept_index(kept, tmp_path):
    first = json.loads((kept / Layout.MANIFEST).read_text())["stages"]["dedup"]
    moved = shutil.copytree(kept, tmp_path / "first")  # a moved run still finds its files
    config = _config(tmp_path, f'index_from = "{Layout(moved).global_work(1)}"\n')
    manifest = run_pipeline(config, tmp_path / "again", workers=1, quiet=True)
    dedup = manifest["stages"]["dedup"]
    # the same documents again: every one a copy of one the first run indexed
    assert dedup["input"] == first["input"] > 0
    assert sum(dedup["rejected"].values()) == dedup["input"]
    assert dedup["rejected"]["exact-duplicate"] > 0.9 * dedup["input"]
    # The import is checked when a run starts, not when it resumes: a finished run whose
    # index went since is still complete.
    before = tree_digest(tmp_path / "again")
    shutil.rmtree(moved / Layout.WORK)
    run_pipeline(config, tmp_path / "again", workers=1, quiet=True)
    assert tree_digest(tmp_path / "again") == before


def test_index_from_a_run_that_removed_its_work_says_how_to_keep_it(finished, tmp_path):
    _, out = finished
    index = Layout(out).global_work(1)
    config = _config(tmp_path, f'index_from = "{index}"\n')
    result = prep("run", str(config), "--out", str(tmp_path / "again"), "-q", "-w", "1")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "again" / Layout.STATS).exists()  # refused before any work
    assert result.stderr.splitlines() == [
        f"Error: {index}: the run in {out} completed and removed its work/, dedup's index with it; "
        "to import it, run that config again with --keep-work (into another --out, or with --force)"
    ]


def test_a_kill_while_work_files_are_removed_resumes(finished, tmp_path, monkeypatch):
    config, clean = finished
    remove, calls = RunStore.remove, []

    def killed(store, rel):  # the third file of dedup's work folder: some gone, some not
        if rel.startswith(f"{Layout.WORK}/global/1/"):
            calls.append(rel)
            if len(calls) == 3:
                raise KeyboardInterrupt
        remove(store, rel)

    monkeypatch.setattr(RunStore, "remove", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    monkeypatch.setattr(RunStore, "remove", remove)
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert tree_digest(tmp_path / "out") == tree_digest(clean)


def test_a_kill_while_a_completed_runs_work_is_removed_resumes(finished, tmp_path, monkeypatch):
    """Killed with part of work/ gone and no manifest yet: the next run of the command
    finds every marker, runs nothing, removes the rest and writes the same manifest."""
    config, clean = finished
    remove = RunStore.remove

    def killed(store, rel):
        if rel == Layout.WORK:
            remove(store, f"{Layout.WORK}/global/1/reduce")  # some gone, some not
            raise KeyboardInterrupt
        remove(store, rel)

    monkeypatch.setattr(RunStore, "remove", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    out = tmp_path / "out"
    assert (out / Layout.WORK).exists() and not (out / Layout.MANIFEST).exists()
    monkeypatch.setattr(RunStore, "remove", remove)
    run_pipeline(config, out, workers=1, quiet=True)
    assert tree_digest(out) == tree_digest(clean)
    assert "already complete: an earlier run did every unit" in _summary(out)


@pytest.mark.parametrize("keep", [False, True])
def test_a_redo_on_a_completed_run_says_its_work_files_were_removed_before(finished, tmp_path, keep):
    """A unit redone on a completed run (its rejects file removed since) writes work files
    again, but the ones a later run imports went when the run first completed: "none kept:
    no stage left what a later run imports" (with --keep-work) and "--keep-work keeps them"
    (without) were both untrue of dedup's index."""
    config, clean = finished
    out = shutil.copytree(clean, tmp_path / "out")
    (cut,) = (out / Layout.REJECTS / "web").glob("00000-*.s0.parquet")
    cut.unlink()
    run_pipeline(config, out, workers=1, quiet=True, keep_work=keep)
    assert cut.exists() and not (out / Layout.WORK).exists()
    figures = json.loads((out / Layout.COST_SUMMARY).read_text())["work_disk"]
    assert figures["peak_bytes"] > 0 == figures["left_bytes"] and figures["completed_before"] is True
    (line,) = [line for line in _summary(out).splitlines() if "work files" in line]
    assert line.endswith(
        " at most for the units redone, none left: the run had completed before and removed them "
        "(--keep-work into another --out keeps them)"
    ), line
