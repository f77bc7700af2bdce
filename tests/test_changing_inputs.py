"""Inputs that change while a run reads them: truncated, appended to, cut and appended
to, replaced by a rename, rewritten in place with the same size and time, deleted; in
a whole-file unit, in the pieces of a file cut by ``split_bytes``, between its pieces,
while the run plans, and on an object store.

A unit that read a changed file fails, keeps nothing (no marker, no documents, no
temporaries), and the run fails with one line naming the file; running again once the
file is stable reads it whole, or refuses to mix its versions unless ``--force``.

No timing: the change is made by a hook in the read itself (``install``), after the
first chunk a unit took of the file, or after a unit committed; the same hook runs in a
``prep`` process through a ``sitecustomize`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REPO, write_config, write_jsonl
from test_run import tree_digest

import pipeline.engine.run as run_module
import pipeline.engine.storage as storage
import pipeline.engine.unit as unit_module
import pipeline.engine.unit_inputs as inputs_module
from pipeline.engine.config import ConfigError
from pipeline.engine.run import run_pipeline
from pipeline.engine.versions import InputChanged
from pipeline.formats.layout import Layout

CHANGING = "changing.jsonl"
RECORDS = [{"id": f"d{i}", "text": f"document number {i} " + "and some words " * 8} for i in range(400)]
APPENDED = {"id": "appended", "text": "a line appended while the run read the file"}


# -- the changes ----------------------------------------------------------------------------


def truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 3)


def appended(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(json.dumps(APPENDED).encode() + b"\n")


def cut_and_appended(path: Path) -> None:
    """The issue's case: a file cut to 30% of its size (at a line's end), then appended to."""
    os.truncate(path, path.read_bytes().rfind(b"\n", 0, path.stat().st_size * 3 // 10) + 1)
    appended(path)


def replaced_by_rename(path: Path) -> None:
    """Another file of the same size renamed over it (a new inode), as editors and
    ``rsync`` write."""
    other = path.with_name(".new")
    other.write_bytes(path.read_bytes().replace(b"number 1 ", b"NUMBER 1 "))
    os.replace(other, path)


def rewritten_in_place(path: Path) -> None:
    """The same bytes' length rewritten in place, its modification time put back
    (``touch -r``): only the change time tells. It is set from the kernel's coarse clock,
    so the time is put back until that clock has moved on (a loop that ends, not a race)."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.write(b'{"id": "X0"')
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    while path.stat().st_ctime_ns == before.st_ctime_ns:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def deleted(path: Path) -> None:
    path.unlink()


# Each change, with what the refusal says of it.
CHANGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated": (truncated, "size "),
    "appended": (appended, "size "),
    "cut-and-appended": (cut_and_appended, "size "),
    "replaced-by-rename": (replaced_by_rename, "replaced by another file of the same size"),
    "rewritten-in-place": (rewritten_in_place, "rewritten with the same size (change time changed)"),
    "deleted": (deleted, "it is gone or unreadable"),
}


# -- the hook --------------------------------------------------------------------------------


def install(change: str, after: str = "first-chunk", path: Path | None = None) -> None:
    """Make ``change`` to ``changing.jsonl`` once in this process: after the first chunk
    the file's first unit (the whole file, or its piece 0) read (``first-chunk``), or
    once that unit committed (``commit``, which needs the file's ``path``)."""
    make = CHANGES[change][0]
    done: list[Path] = []

    def once(read_path: Path) -> None:
        if not done:
            done.append(read_path)
            make(read_path)

    def first_unit(spec) -> bool:
        return spec.file_key.endswith(CHANGING) and spec.reports_file

    if after == "first-chunk":
        read = inputs_module.read_input

        def reading(path, spec, fmt):
            for chunk in read(path, spec, fmt):
                yield chunk
                if first_unit(spec):
                    once(path)

        inputs_module.read_input = reading
        scan = inputs_module.scanned_file  # a pack's files are read whole, then parsed

        def scanning(path, spec):
            scanned = scan(path, spec)
            if first_unit(spec):
                once(path)
            return scanned

        inputs_module.scanned_file = scanning
        whole = inputs_module.whole_file  # a pack's small plain files are read in one pass

        def reading_whole(path, size, limit):
            data = whole(path, size, limit)
            if data is not None and path.endswith(CHANGING):
                once(Path(path))
            return data

        inputs_module.whole_file = reading_whole
    else:
        commit = unit_module.commit

        def committing(ctx, marker, stats, store=None):
            commit(ctx, marker, stats, store)
            if stats["file"].endswith(CHANGING) and "input_files" in stats and stats["segment"] == 0:
                once(path)

        unit_module.commit = committing


@pytest.fixture
def hooked(monkeypatch):
    """``install`` for this test only."""
    monkeypatch.setattr(inputs_module, "read_input", inputs_module.read_input)
    monkeypatch.setattr(inputs_module, "scanned_file", inputs_module.scanned_file)
    monkeypatch.setattr(inputs_module, "whole_file", inputs_module.whole_file)
    monkeypatch.setattr(unit_module, "commit", unit_module.commit)
    return install


# -- helpers ---------------------------------------------------------------------------------


def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    # The stable file is the larger, so that its unit runs (and is kept) first.
    write_jsonl(folder / "a.jsonl", [{**r, "id": f"a{i}"} for i, r in enumerate(RECORDS + RECORDS[:100])])
    write_jsonl(folder / CHANGING, RECORDS)
    return folder


def config_for(tmp_path: Path, split_bytes: int = 0, block_bytes: int = 4096) -> Path:
    """Both files in one unit (a pack); each read block by block, or (``block_bytes`` over
    their sizes) each read whole in one pass."""
    folder = inputs(tmp_path)
    return write_config(
        tmp_path / "run.toml",
        f"[run]\nblock_bytes = {block_bytes}\nsplit_bytes = {split_bytes}\n"
        f'[sources.web]\npaths = ["{folder}/*.jsonl"]\n'
        '[[stages]]\nname = "length"\nmin_chars = 5\n',
    )


def files_of(out: Path, name: str) -> list[Path]:
    """Every file in ``out`` named after the unit ``name`` (temporaries too)."""
    return [p for p in out.rglob("*") if p.is_file() and name in p.name]


def assert_written_balance(out: Path) -> None:
    """Every unit with a marker has exactly its documents and ledger rows on disk."""
    layout = Layout(out)
    for marker in layout.markers(Layout.segment_phase(0)).rglob("*.json"):
        stats = json.loads(marker.read_text())
        kept = sum(pq.read_metadata(p).num_rows for p in layout.docs("web").glob(f"{stats['unit']}.*parquet"))
        rejected = sum(pq.read_metadata(p).num_rows for p in layout.rejects("web").glob(f"{stats['unit']}.*parquet"))
        assert (kept, kept + rejected) == (stats["output"], stats["input"]), stats["unit"]


def clean_run(tmp_path: Path, config: Path) -> Path:
    """The run of the inputs as they are now, into a fresh folder."""
    out = tmp_path / "clean"
    run_pipeline(config, out, workers=1, quiet=True)
    return out


# -- a whole file -----------------------------------------------------------------------------


@pytest.mark.parametrize("block_bytes", [4096, 1 << 20])
@pytest.mark.parametrize("change", CHANGES)
def test_a_file_changed_while_its_unit_reads_it_fails_the_unit_and_keeps_nothing(hooked, tmp_path, change, block_bytes):
    config = config_for(tmp_path, block_bytes=block_bytes)
    out = tmp_path / "out"
    hooked(change)
    with pytest.raises(InputChanged) as failure:
        run_pipeline(config, out, workers=1, quiet=True)
    message = str(failure.value)
    assert f"{CHANGING} (web) changed while the run read it" in message and "\n" not in message
    assert CHANGES[change][1] in message and "run the same command again once it is stable" in message
    assert files_of(out, CHANGING) == [] and not (out / "manifest.json").exists()
    assert_written_balance(out)


@pytest.mark.parametrize("block_bytes", [4096, 1 << 20])
@pytest.mark.parametrize("change", [c for c in CHANGES if c != "deleted"])
def test_the_same_command_once_the_file_is_stable_reads_it_as_it_is(hooked, tmp_path, change, block_bytes):
    config = config_for(tmp_path, block_bytes=block_bytes)
    out = tmp_path / "out"
    hooked(change)
    with pytest.raises(InputChanged):
        run_pipeline(config, out, workers=1, quiet=True)
    manifest = run_pipeline(config, out, workers=1, quiet=True)
    assert tree_digest(out) == tree_digest(clean_run(tmp_path, config))
    now = (tmp_path / "in" / CHANGING).read_bytes()
    assert manifest["balance"]["input"]
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    recorded = next(i for i in inputs if i["path"].endswith(CHANGING))
    assert recorded["sha256"] == hashlib.sha256(now).hexdigest()


def test_the_issues_case_keeps_the_appended_line_once_rerun(hooked, tmp_path):
    config = config_for(tmp_path)
    out = tmp_path / "out"
    hooked("cut-and-appended")
    with pytest.raises(InputChanged, match=r"size [\d,]+ -> [\d,]+ bytes"):
        run_pipeline(config, out, workers=1, quiet=True)
    run_pipeline(config, out, workers=1, quiet=True)
    ids = pq.read_table(out / "docs" / "web").column("id").to_pylist()
    assert "appended" in ids


# -- a file in pieces -------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["cut-and-appended", "rewritten-in-place", "replaced-by-rename"])
def test_piece_0_reads_the_whole_file_for_its_sha256_so_a_change_during_it_fails_it(hooked, tmp_path, change):
    config = config_for(tmp_path, split_bytes=16384)
    out = tmp_path / "out"
    hooked(change)
    with pytest.raises(InputChanged, match=f"{CHANGING} \\(web\\) changed while the run read it"):
        run_pipeline(config, out, workers=1, quiet=True)
    assert files_of(out, f"{CHANGING}.part-00000") == []
    assert_written_balance(out)


@pytest.mark.parametrize("change", CHANGES)
def test_the_pieces_of_a_file_read_one_version_or_the_run_fails(hooked, tmp_path, change):
    """Piece 0 read and kept before the change, piece 1 after it: piece 1 refuses, and the
    next run refuses to mix the versions unless --force, which starts over."""
    config = config_for(tmp_path, split_bytes=16384)
    out = tmp_path / "out"
    hooked(change, after="commit", path=tmp_path / "in" / CHANGING)
    with pytest.raises(InputChanged, match=f"{CHANGING} \\(web\\) changed before the run read it"):
        run_pipeline(config, out, workers=1, quiet=True)
    pieces = {p.name for p in (out / "stats" / "segment-0" / "web").glob(f"*{CHANGING}*")}
    assert pieces == {f"00001-{CHANGING}.part-00000.json"}
    assert not [p for p in files_of(out, CHANGING) if ".part-00000" not in p.name]
    assert_written_balance(out)
    # Refused as a changed input, or as other inputs where the file is gone or now cut
    # in another number of pieces; either way --force starts over.
    with pytest.raises(ConfigError, match="(changed after this run read it|different inputs).*--force"):
        run_pipeline(config, out, workers=1, quiet=True)
    run_pipeline(config, out, workers=1, quiet=True, force=True)
    assert tree_digest(out) == tree_digest(clean_run(tmp_path, config))


def test_a_file_changed_while_the_run_plans_its_pieces_is_never_read_in_them(tmp_path, monkeypatch):
    """The version a unit reads is the one taken before its file was cut: pieces cut at
    one version's line starts never read another."""
    config = config_for(tmp_path, split_bytes=16384)
    plan = run_module.plan_units

    def planning(config, versions):
        units = plan(config, versions)
        cut_and_appended(tmp_path / "in" / CHANGING)
        return units

    monkeypatch.setattr(run_module, "plan_units", planning)
    with pytest.raises(InputChanged, match=f"{CHANGING} \\(web\\) changed before the run read it"):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert files_of(tmp_path / "out", CHANGING) == []


# -- prep itself -------------------------------------------------------------------------------


def prep_changing(change: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``prep`` with ``install(change)`` in each of its processes (workers too)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    hook = f"import test_changing_inputs\ntest_changing_inputs.install({change!r})\n"
    (site / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(REPO / 'tests')!r})\n{hook}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, env=env)


# On two workers the file is one unit: a later piece read whole before the change on
# the other worker would be kept, and the rerun would then (rightly) refuse the mix.
@pytest.mark.parametrize("workers, split_bytes", [("1", 16384), ("2", 0)])
def test_prep_run_over_a_file_changed_under_it_is_one_line_and_exits_non_zero(tmp_path, workers, split_bytes):
    config = config_for(tmp_path, split_bytes=split_bytes)
    out = tmp_path / "out"
    args = ["run", str(config), "--out", str(out), "-q", "-w", workers]
    result = prep_changing("cut-and-appended", *args, tmp_path=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{CHANGING} (web) changed while the run read it (size " in lines[0], lines
    assert not (out / "manifest.json").exists() and files_of(out, f"00001-{CHANGING}") == []
    assert_written_balance(out)
    rerun = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True)
    if split_bytes:  # the file is now cut in fewer pieces: other units, so another run
        assert rerun.returncode == 1 and "different inputs" in rerun.stderr and "--force" in rerun.stderr
        rerun = subprocess.run([sys.executable, "-m", "pipeline", *args, "--force"], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert "appended" in pq.read_table(out / "docs" / "web").column("id").to_pylist()


# -- an object store ---------------------------------------------------------------------------


@pytest.fixture
def remote_config(s3, tmp_path, monkeypatch):
    """A run over ``changing.jsonl`` on S3, with scratch space of its own; yields the
    file system and the config."""
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "scratch"))
    bucket = f"changing-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"
    s3.create_dir(bucket)
    with s3.open_output_stream(f"{bucket}/in/{CHANGING}") as sink:
        sink.write((inputs(tmp_path) / CHANGING).read_bytes())
    config = write_config(
        tmp_path / "remote.toml",
        f'[sources.web]\npaths = ["s3://{bucket}/in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 5\n',
    )
    return s3, f"{bucket}/in/{CHANGING}", config


def rewrite_object(fs, key: str) -> None:
    with fs.open_input_stream(key) as source:
        data = source.read()
    with fs.open_output_stream(key) as sink:
        sink.write(data[: len(data) // 2])


def test_an_object_rewritten_while_the_run_copies_it_fails_its_unit(remote_config, tmp_path, monkeypatch):
    fs, key, config = remote_config
    download = storage.download

    def copying(fs, remote_key, local):
        download(fs, remote_key, local)
        rewrite_object(fs, key)

    monkeypatch.setattr(storage, "download", copying)
    with pytest.raises(InputChanged, match=f"{CHANGING} \\(web\\) changed while the run copied it \\(size "):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert files_of(tmp_path / "out", CHANGING) == []
    assert not list((tmp_path / "scratch" / "inputs").iterdir())


def test_a_short_copy_of_an_object_fails_its_unit(remote_config, tmp_path, monkeypatch):
    _, _, config = remote_config
    download = storage.download

    def short(fs, remote_key, local):
        download(fs, remote_key, local)
        os.truncate(local, 100)

    monkeypatch.setattr(storage, "download", short)
    with pytest.raises(InputChanged, match=r"changed while the run copied it \(copied 100 of [\d,]+ bytes\)"):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)


def test_an_object_rewritten_after_the_run_planned_fails_its_unit(remote_config, tmp_path, monkeypatch):
    fs, key, config = remote_config
    plan = run_module.plan_units

    def planning(config, versions):
        units = plan(config, versions)
        rewrite_object(fs, key)
        return units

    monkeypatch.setattr(run_module, "plan_units", planning)
    with pytest.raises(InputChanged, match=f"{CHANGING} \\(web\\) changed before the run read it \\(size "):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
