"""The work folder after a run: what nothing reads again is removed, what a rerun or a
later run's ``index_from`` reads is kept, and its disk is reported.

A run over the bundled sample with two global stages (dedup, then paragraph_dedup), so
that there are documents between segments and two global stages' files."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import REPO, write_config
from test_run import tree_digest

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


# What a rerun (the id hashes, for the duplicate-id count) and ``index_from`` read.
KEPT = (
    r"global/1/units\.json",
    r"global/1/reduce/p\d+\.index\.npy",
    r"global/1/map/web/.*\.docs\.arrow",
    r"ids/web/.*\.npy",
)


def _kept_only(files: list[str]) -> bool:
    return all(any(re.fullmatch(pattern, f) for pattern in KEPT) for f in files)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("work_disk")
    config = _config(root)
    run_pipeline(config, root / "out", workers=1, quiet=True)
    return config, root / "out"


def test_a_finished_run_leaves_only_what_is_read_again(finished):
    _, out = finished
    files = _work_files(out)
    assert _kept_only(files), files
    assert any(f.endswith(".index.npy") for f in files) and any(f.endswith(".docs.arrow") for f in files)
    assert any(f.startswith("ids/") and f.endswith(".npy") for f in files)
    figures = json.loads((out / Layout.COST_SUMMARY).read_text())["work_disk"]
    left = RunStore(str(out)).size([Layout.WORK])
    assert figures["left_bytes"] == left > 0
    assert figures["peak_bytes"] > 2 * left  # the documents between segments, bands, forests, decisions
    lines = io.StringIO()
    print_summary(json.loads((out / Layout.MANIFEST).read_text()), out, lines)
    assert "  work files: " in lines.getvalue() and " at most, " in lines.getvalue()


def test_a_rerun_of_a_finished_run_is_a_no_op(finished):
    config, out = finished
    before = tree_digest(out)
    run_pipeline(config, out, workers=1, quiet=True)
    assert tree_digest(out) == before


def test_a_later_run_imports_the_finished_runs_index(finished, tmp_path):
    _, out = finished
    first = json.loads((out / Layout.MANIFEST).read_text())["stages"]["dedup"]
    index = Layout(out).global_work(1)
    config = _config(tmp_path, f'index_from = "{index}"\n')
    manifest = run_pipeline(config, tmp_path / "again", workers=1, quiet=True)
    dedup = manifest["stages"]["dedup"]
    # the same documents again: every one a copy of one the first run indexed
    assert dedup["input"] == first["input"] > 0
    assert sum(dedup["rejected"].values()) == dedup["input"]
    assert dedup["rejected"]["exact-duplicate"] > 0.9 * dedup["input"]


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
