"""What a run takes as input, how many workers it starts, and what it may delete.

Inputs that are no files (a FIFO, a device, a socket, a dangling link, a folder named like
a data file, a folder that cannot be listed) are each one ledger row that says what they
are, and are never opened; a run never reads its own --out or another run's folder that
its wildcards reach; workers start one per task at most; --force removes only what a
prep run wrote, and a damaged run record is one line naming it. Every run here is a
subprocess with a timeout: opening a FIFO would hang it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from conftest import write_config, write_jsonl
from test_hostile_run import _square, assert_one_line_refusal

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.executor import LocalExecutor
from pipeline.engine.input_files import not_a_file
from pipeline.engine.progress import ProgressBar
from pipeline.engine.run import run_pipeline, worker_notes
from pipeline.util import globbing

TIMEOUT = 120  # seconds: a run that opened a FIFO would wait forever
LENGTH = '[[stages]]\nname = "length"\nmin_chars = 1\n'


def prep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=TIMEOUT)


def ledger(out: Path) -> dict[str, str]:
    """The unreadable-file rows of a run: file key -> detail."""
    rows = [r for f in sorted((out / "rejects").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return {r["file"]: r["detail"] for r in rows if r["reason"] == "bad-input:unreadable-file"}


# -- item 6: what is no file is reported, never read ------------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays


def _link_to_a_folder(path: Path) -> None:
    (path.parent.parent / "elsewhere").mkdir()
    path.symlink_to(path.parent.parent / "elsewhere")


SPECIAL = {
    "fifo.jsonl": (_fifo, "a FIFO (named pipe), not a regular file"),
    "zero.jsonl": (lambda p: p.symlink_to("/dev/zero"), "a link to /dev/zero, which is a character device"),
    "urandom.jsonl": (lambda p: p.symlink_to("/dev/urandom"), "a link to /dev/urandom, which is a character device"),
    "dangling.jsonl": (lambda p: p.symlink_to(p.parent / "nowhere"), "which does not exist"),
    "loop.jsonl": (lambda p: p.symlink_to(p.name), "a link to loop.jsonl, which is part of a loop of links"),
    "folder.jsonl": (lambda p: p.mkdir(), "a folder, not a regular file"),
    "linked-folder.jsonl": (_link_to_a_folder, "which is a folder, not a regular file"),
    "socket.jsonl": (_socket, "a socket, not a regular file"),
}


def _special_inputs(folder: Path, names) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        SPECIAL[name][0](folder / name)


def test_every_kind_of_special_file_is_one_ledger_row_saying_what_it_is(tmp_path):
    write_jsonl(tmp_path / "in" / "good.jsonl", [{"id": "a", "text": "a good document"}])
    _special_inputs(tmp_path / "in", SPECIAL)
    (tmp_path / "in" / "plain-folder").mkdir()  # a folder the walk passes through: no input
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/**"]\nformat = "jsonl"\n{LENGTH}')
    out = tmp_path / "out"
    result = prep("run", str(config), "--out", str(out), "-q", "-w", "2")
    assert result.returncode == 0, result.stderr
    rows = ledger(out)
    assert sorted(rows) == sorted(SPECIAL)
    for name, (_, why) in SPECIAL.items():
        assert why in rows[name], (name, rows[name])
    web = json.loads((out / "manifest.json").read_text())["sources"]["web"]
    assert (web["input"], web["output"], web["rejected"]) == (1 + len(SPECIAL), 1, len(SPECIAL))
    again = prep("run", str(config), "--out", str(out), "-q")  # a resume: nothing there is hashed or opened
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_a_special_file_that_is_a_sources_only_match_is_its_ledger_row(tmp_path, name):
    _special_inputs(tmp_path / "in", [name])
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    result = prep("run", str(config), "--out", str(tmp_path / "out"), "-q", "-w", "1")
    assert result.returncode == 0, result.stderr
    assert list(ledger(tmp_path / "out")) == [name]


def test_globs_that_reach_only_folders_are_one_line(tmp_path):
    (tmp_path / "in" / "a").mkdir(parents=True)
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*"]\nformat = "jsonl"\n{LENGTH}')
    assert_one_line_refusal(prep("run", str(config), "--out", str(tmp_path / "out")), "in/*", "matches no file")


def test_a_folder_the_walk_may_not_list_is_reported(tmp_path, monkeypatch):
    """(Tests run as root here, for whom chmod 000 still lists: the refusal is simulated.)"""
    write_jsonl(tmp_path / "in" / "good.jsonl", [{"id": "a", "text": "a good document"}])
    locked = tmp_path / "in" / "locked"
    write_jsonl(locked / "hidden.jsonl", [{"id": "b", "text": "never listed"}])
    real_scandir, real_access = os.scandir, os.access

    def scandir(path):  # os's own: shutil.rmtree (the run's end removes work/) passes file descriptors
        if not isinstance(path, int) and Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(globbing.os, "scandir", scandir)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked and real_access(path, mode))
    assert globbing.glob_reporting(str(tmp_path / "in" / "**" / "*.jsonl"))[1] == [locked]
    assert globbing.glob_reporting(str(locked / "*.jsonl"))[1] == [locked]
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/**/*.jsonl"]\n{LENGTH}')
    assert load_config(config).sources["web"].files == [tmp_path / "in" / "good.jsonl", locked]
    assert "may not list (permission denied)" in not_a_file(locked)
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert "permission denied" in ledger(tmp_path / "out")["locked"]


# -- item 8: workers --------------------------------------------------------------------------


def test_a_phase_starts_a_worker_per_task_at_most_and_a_larger_one_adds_to_the_pool():
    executor = LocalExecutor(64)
    bar = ProgressBar("t", 0, 5, mode="none")
    try:
        assert executor.run([(_square, (i,)) for i in range(2)], bar) == [0, 1]
        assert len(executor._processes) == 2
        assert executor.run([(_square, (i,)) for i in range(3)], bar) == [0, 1, 4]
        assert len(executor._processes) == 3
    finally:
        executor.close()


def test_workers_past_the_units_are_said_and_past_the_cores_warned(tmp_path):
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", [{"id": name, "text": "a small document"}])
    config = write_config(
        tmp_path / "run.toml", f'[run]\ngroup_bytes = 0\n[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}'
    )
    result = prep("run", str(config), "--out", str(tmp_path / "out"), "-w", "64")
    assert result.returncode == 0, result.stderr
    assert "workers: 64 asked, 2 units: 2 started" in result.stderr
    assert worker_notes(64, 2, 16) == ["workers: 64 asked, 2 units: 2 started (one per task at most)"]
    warning = worker_notes(64, 100, 16)
    assert len(warning) == 1 and "64 workers on 16 cores" in warning[0]
    assert worker_notes(4, 100, 16) == []


@pytest.mark.parametrize("value", ["0", "-3"])
def test_no_workers_is_one_line(tmp_path, value):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    result = prep("run", str(config), "--out", str(tmp_path / "out"), "-w", value)
    assert result.returncode == 2 and value in result.stderr and "Traceback" not in result.stderr
    in_config = write_config(tmp_path / "w.toml", f'[run]\nworkers = {value}\n[sources.web]\npaths = ["in/*.jsonl"]\n')
    refused = prep("run", str(in_config), "--out", str(tmp_path / "out"))
    assert_one_line_refusal(refused, "workers must be a positive integer")


# -- item 11: a run's output is never its input -----------------------------------------------


def test_an_out_inside_the_input_glob_is_left_out_so_the_run_resumes(tmp_path):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["data/**/*.jsonl", "data/**/*.parquet"]\n')
    out = tmp_path / "data" / "out"
    pq.write_table(pa.table({"id": ["p"], "text": ["a parquet document"]}), tmp_path / "data" / "p.parquet")
    for extra in ([], [], ["--force"]):  # the run, its rerun (a resume), and a fresh start
        result = prep("run", str(config), "--out", str(out), "-q", *extra)
        assert result.returncode == 0, result.stderr
        inputs = json.loads((out / "manifest.json").read_text())["inputs"]
        assert [i["path"] for i in inputs] == ["a.jsonl", "p.parquet"]


def test_another_runs_folder_is_left_out_where_wildcards_reach_it_and_read_where_named(tmp_path):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    first = write_config(tmp_path / "first.toml", '[sources.web]\npaths = ["data/*.jsonl"]\n')
    assert prep("run", str(first), "--out", str(tmp_path / "data" / "runs" / "one"), "-q").returncode == 0
    walking = write_config(tmp_path / "walk.toml", '[sources.web]\npaths = ["data/**/*.parquet"]\n')
    refused = prep("run", str(walking), "--out", str(tmp_path / "two"))
    assert_one_line_refusal(refused, "matches only a prep run's output")
    named = write_config(tmp_path / "named.toml", '[sources.web]\npaths = ["data/runs/one/docs/**/*.parquet"]\n')
    result = prep("run", str(named), "--out", str(tmp_path / "three"), "-q")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "three" / "manifest.json").read_text())["sources"]["web"]["output"] == 1


def test_a_source_naming_only_its_own_out_is_one_line(tmp_path):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    first = write_config(tmp_path / "first.toml", '[sources.web]\npaths = ["data/*.jsonl"]\n')
    assert prep("run", str(first), "--out", str(tmp_path / "out"), "-q").returncode == 0
    own = write_config(tmp_path / "own.toml", '[sources.web]\npaths = ["out/docs/web/*.parquet"]\n')
    with pytest.raises(ConfigError, match="matches only a prep run's output"):
        load_config(own, tmp_path / "out")


# -- item 14: --force removes only what a run wrote -------------------------------------------


def _foreign_folder(tmp_path: Path) -> tuple[Path, Path]:
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("notes")
    return config, out


def test_force_never_removes_a_users_file_and_a_refusal_leaves_nothing(tmp_path):
    config, out = _foreign_folder(tmp_path)
    (out / "docs").write_text("my own docs")
    assert_one_line_refusal(prep("run", str(config), "--out", str(out)), "not made by prep run")
    assert_one_line_refusal(prep("run", str(config), "--out", str(out), "--force"), "its docs would be written over")
    assert sorted(p.name for p in out.iterdir()) == ["docs", "notes.txt", "sub"]  # no .prep/lock either
    assert (out / "docs").read_text() == "my own docs"


def test_force_adds_a_run_beside_a_users_files_and_starts_over_only_its_own(tmp_path):
    config, out = _foreign_folder(tmp_path)
    assert prep("run", str(config), "--out", str(out), "-q", "--force").returncode == 0
    assert prep("run", str(config), "--out", str(out), "-q", "--force").returncode == 0  # now a run's folder
    assert (out / "notes.txt").read_text() == "notes" and (out / "sub").is_dir()
    assert (out / "docs" / "web").is_dir()


def test_force_refuses_a_link_in_a_runs_folder_before_removing_anything(tmp_path):
    """rmtree refused the link half-way, after the run's other folders were gone."""
    config, out = _foreign_folder(tmp_path)
    assert prep("run", str(config), "--out", str(out), "-q", "--force").returncode == 0
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "kept.txt").write_text("the user's")
    (out / "work").symlink_to(tmp_path / "scratch")
    before = sorted(p.name for p in out.iterdir())
    assert_one_line_refusal(prep("run", str(config), "--out", str(out), "--force"), "work is a link")
    assert sorted(p.name for p in out.iterdir()) == before
    assert (tmp_path / "scratch" / "kept.txt").read_text() == "the user's"


def test_a_remote_folder_follows_the_same_rule(tmp_path, monkeypatch, s3):
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "scratch"))
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    s3.create_dir("mine")
    with s3.open_output_stream("mine/out/docs") as sink:
        sink.write(b"my own docs")
    with pytest.raises(ConfigError, match="not made by prep run"):
        run_pipeline(config, "s3://mine/out", workers=1, quiet=True)
    with pytest.raises(ConfigError, match="its docs would be written over"):
        run_pipeline(config, "s3://mine/out", workers=1, quiet=True, force=True)
    left = s3.get_file_info(pafs.FileSelector("mine/out", recursive=True))
    assert [i.path for i in left] == ["mine/out/docs"]


# -- item 12 (part): a damaged run record -----------------------------------------------------


DAMAGES = [
    (b'{"fingerprint": "ab', "not a JSON text"),
    (b"not json at all", "not a JSON text"),
    (b"[1, 2]", "the file is an array, expected an object"),
    (b'{"config_file": "run.toml"}', "fingerprint is missing"),
    (b'{"fingerprint": 3, "config_file": "run.toml"}', "fingerprint is an integer, expected a string"),
    (b"\xff\xfe{}", "not a JSON text"),
]


def test_a_damaged_run_record_is_one_line_naming_it_and_force_starts_over(tmp_path):
    """Every damage over one finished run (a run per damage cost 4 processes each)."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "a", "text": "a small document"}])
    config = write_config(tmp_path / "run.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    out = tmp_path / "out"
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    for damage, why in DAMAGES:
        (out / ".prep" / "run.json").write_bytes(damage)
        refused = prep("run", str(config), "--out", str(out))
        assert_one_line_refusal(refused, ".prep/run.json is damaged", why, "--force")
    assert prep("run", str(config), "--out", str(out), "-q", "--force").returncode == 0
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0  # whole again: a resume
