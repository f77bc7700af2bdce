"""Inputs and outputs on an object store: a run over ``s3://`` gives the same bytes as a
local run, resumes after SIGKILL, and leaves no scratch behind. The S3 server is moto's,
started on loopback by the fixture; prep reaches it through pyarrow's S3 file system."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from conftest import EVERY_PHASE_STAGES, LIGHT_SAMPLE_CONFIG, REPO, write_config
from test_run import tree_digest

import pipeline.engine.run as run_module
from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline
from pipeline.engine.storage import RunStore, glob_remote
from pipeline.formats.layout import Layout

pytest.importorskip("moto.server")

SAMPLE = REPO / "data" / "sample"
# Fields of the manifest that name the config file and its input globs, which differ
# between a local and a remote run of the same data; everything else must be equal.
CONFIG_FIELDS = ("config", "config_file")


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "scratch"
    monkeypatch.setenv("PREP_SCRATCH", str(folder))
    return folder


def upload_sample(fs: pafs.S3FileSystem, bucket: str) -> None:
    fs.create_dir(bucket)
    pafs.copy_files(str(SAMPLE), f"{bucket}/in", destination_filesystem=fs)


def download(fs: pafs.S3FileSystem, prefix: str, local: Path) -> Path:
    pafs.copy_files(prefix, str(local), source_filesystem=fs)
    return local


def dedup_config(path: Path, root: str) -> Path:
    """Every kind of phase over the bundled sample: per-document stages, the global dedup
    (map, reduce, finalize, filter) and the terminal tokenize."""
    return write_config(
        path,
        f"""
[sources.web]
paths = ["{root}/web/*.gz"]
[sources.code]
paths = ["{root}/code/*.jsonl.gz"]
[sources.math]
paths = ["{root}/math/**/*.jsonl.gz"]
{EVERY_PHASE_STAGES}""",
    )


def without_config(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k not in CONFIG_FIELDS}


def same_run(local: Path, remote: Path) -> None:
    """Byte-identical outputs, and manifests equal but for the config's paths."""
    # .prep is the run's own state: the lock of a local folder, the input versions.
    skip = {"manifest.json", str(Path(".prep") / "run.json"), str(Path(".prep") / "lock")}
    local_files = {k: v for k, v in tree_digest(local).items() if k not in skip}
    assert local_files and local_files == {k: v for k, v in tree_digest(remote).items() if k not in skip}
    manifests = [json.loads((folder / "manifest.json").read_text()) for folder in (local, remote)]
    assert without_config(manifests[0]) == without_config(manifests[1])


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("local")
    out = folder / "out"
    run_pipeline(dedup_config(folder / "local.toml", str(SAMPLE)), out, workers=2, quiet=True)
    return out


def test_remote_inputs_and_output_give_the_local_bytes(s3, local_run, tmp_path, scratch):
    upload_sample(s3, "same")
    config = dedup_config(tmp_path / "remote.toml", "s3://same/in")
    manifest = run_pipeline(config, "s3://same/run", workers=2, quiet=True)
    assert manifest["stages"]["dedup"]["rejected"]  # the sample has duplicates: the global phases ran
    same_run(local_run, download(s3, "same/run", tmp_path / "downloaded"))
    assert not any(p.is_file() for p in scratch.rglob("*")), "a finished run leaves nothing in scratch"
    # The same command again finds the run complete and redoes nothing.
    before = {i.path: i.mtime_ns for i in s3.get_file_info(pafs.FileSelector("same/run", recursive=True))}
    assert not [key for key in before if key.startswith("same/run/work/")], "work/ is removed from the store too"
    run_pipeline(config, "s3://same/run", workers=2, quiet=True)
    after = {i.path: i.mtime_ns for i in s3.get_file_info(pafs.FileSelector("same/run", recursive=True))}
    assert {k: v for k, v in after.items() if not k.endswith(("manifest.json", "cost.json"))} == {
        k: v for k, v in before.items() if not k.endswith(("manifest.json", "cost.json"))
    }


def test_a_sampled_run_projects_the_same_disk_into_the_store_as_locally(s3, tmp_path):
    """The projection's fixed bytes (each Parquet footer, each sidecar) are read from the
    store's files as from a local folder's."""
    upload_sample(s3, "sampled")
    config = dedup_config(tmp_path / "remote.toml", "s3://sampled/in")
    run_pipeline(config, tmp_path / "local", workers=2, quiet=True, sample=0.2)
    run_pipeline(config, "s3://sampled/run", workers=2, quiet=True, sample=0.2)
    fixed = [RunStore(out).fixed_size(Layout.OUTPUT_FOLDERS) for out in (str(tmp_path / "local"), "s3://sampled/run")]
    assert fixed[0] == fixed[1] > 0
    remote_cost = download(s3, "sampled/run/cost.json", tmp_path / "cost.json")
    local, remote = (json.loads(p.read_text())["projection"] for p in (tmp_path / "local" / "cost.json", remote_cost))
    assert (local["output_bytes"], local["output_bytes_interval"]) == (
        remote["output_bytes"],
        remote["output_bytes_interval"],
    )


def test_keep_work_keeps_dedups_index_in_the_store(s3, tmp_path):
    upload_sample(s3, "kept")
    config = dedup_config(tmp_path / "remote.toml", "s3://kept/in")
    run_pipeline(config, "s3://kept/run", workers=2, quiet=True, keep_work=True)
    stored = [i.path for i in s3.get_file_info(pafs.FileSelector("kept/run/work", recursive=True))]
    assert any(key.endswith(".index.npy") for key in stored) and "kept/run/work/global/1/units.json" in stored
    assert not [key for key in stored if key.startswith("kept/run/work/ids/")]  # counted: nothing imports them


def test_a_stage_prepared_before_the_units_gives_the_local_bytes_remotely(s3, tmp_path, monkeypatch):
    """decontaminate's index is its finalize (no map): one task builds it into the store,
    and each unit's task fetches it as a declared work file. The remote run here forgets
    the index from its machine's mirror once it is built, as a machine that ran no
    finalize task would not have it: the units fetch it from the store."""
    upload_sample(s3, "prepared")
    benchmark = SAMPLE / "math" / "gsm8k.jsonl.gz"
    stages = (
        f'[[stages]]\nname = "decontaminate"\n[[stages.benchmarks]]\nname = "gsm8k"\npath = "{benchmark}"\n'
        'fields = ["question", "answer"]\nfilter = { split = "test" }\n'
    )
    prepared = run_module.prepare_all

    def prepared_elsewhere(config, store, *args):
        counters = prepared(config, store, *args)
        shutil.rmtree(Layout(store.root).stage_work("decontaminate"))
        return counters

    outs = {}
    for where, root, out in (("local", str(SAMPLE), tmp_path / "local"), ("remote", "s3://prepared/in", None)):
        config = dedup_config(tmp_path / f"{where}.toml", root)
        config.write_text(
            config.read_text().replace('[[stages]]\nname = "dedup"', stages + '[[stages]]\nname = "dedup"')
        )
        if out is None:
            monkeypatch.setattr(run_module, "prepare_all", prepared_elsewhere)
        manifest = run_pipeline(config, out or "s3://prepared/run", workers=1, quiet=True, keep_work=True)
        assert manifest["stages"]["decontaminate"]["rejected"]  # the sample holds gsm8k's test problems
        outs[where] = out or download(s3, "prepared/run", tmp_path / "downloaded")
    same_run(outs["local"], outs["remote"])
    assert len(list((outs["remote"] / "work" / "decontaminate").glob("*/hashes.npy"))) == 1


def test_remote_run_resumes_after_sigkill(s3, local_run, tmp_path):
    upload_sample(s3, "killed")
    config = dedup_config(tmp_path / "remote.toml", "s3://killed/in")
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--out", "s3://killed/run", "-w", "2", "-q"]
    # Kill during the first segment, then during dedup's phases, of the resumed runs.
    for kill_after_markers in (2, 12):
        proc = subprocess.Popen(command, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            stored = s3.get_file_info(pafs.FileSelector("killed/run/stats", recursive=True, allow_not_found=True))
            if sum(1 for i in stored if i.path.endswith(".json") and "/cost/" not in i.path) >= kill_after_markers:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert s3.get_file_info("killed/run/manifest.json").type == pafs.FileType.NotFound, "killed too late"
    result = subprocess.run(command[:-3] + ["-w", "1", "-q"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    same_run(local_run, download(s3, "killed/run", tmp_path / "downloaded"))


def test_a_marker_the_store_lacks_does_not_count(s3, tmp_path):
    """A task killed between its local commit and its upload left a marker in the mirror
    only: syncing forgets it, so the unit runs again."""
    s3.create_dir("markers")
    store = RunStore("s3://markers/run", "key")
    pushed, lost = store.root / "stats" / "a.json", store.root / "stats" / "b.json"
    data = store.root / "docs" / "a.parquet"
    for path in (pushed, lost, data):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    store.push([data], marker=pushed)
    assert not data.exists() and pushed.exists()  # what a task wrote leaves the mirror
    store.sync("stats")
    assert pushed.exists() and not lost.exists()
    assert sorted(
        i.path
        for i in s3.get_file_info(pafs.FileSelector("markers/run", recursive=True))
        if i.type == pafs.FileType.File
    ) == ["markers/run/docs/a.parquet", "markers/run/stats/a.json"]


def test_remote_globs_and_their_errors(s3, tmp_path):
    upload_sample(s3, "globs")
    assert [p.rsplit("/", 1)[1] for p in glob_remote("s3://globs/in/**/*.jsonl.gz")] == [
        "js_npm.jsonl.gz",
        "python_stdlib.jsonl.gz",
        "arxiv.jsonl.gz",
        "gsm8k.jsonl.gz",
        "ccmain.jsonl.gz",
        "redpajama_pile.jsonl.gz",
    ]
    assert glob_remote("s3://globs/in/web/c4_guardian.json.gz") == ["s3://globs/in/web/c4_guardian.json.gz"]
    config = write_config(
        tmp_path / "c.toml", '[sources.web]\npaths = ["s3://globs/in/web/*.parquet"]\n[[stages]]\nname = "length"\n'
    )
    with pytest.raises(ConfigError, match=r"matches no file"):
        load_config(config)
    config = write_config(
        tmp_path / "d.toml", '[sources.web]\npaths = ["s3://no-such-bucket/*.gz"]\n[[stages]]\nname = "length"\n'
    )
    with pytest.raises(ConfigError, match=r"no-such-bucket"):
        load_config(config)


@pytest.mark.ray
def test_ray_executor_with_remote_storage(s3, local_run, tmp_path):
    pytest.importorskip("ray")
    upload_sample(s3, "ray")
    config = dedup_config(tmp_path / "remote.toml", "s3://ray/in")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "run",
            str(config),
            "--out",
            "s3://ray/run",
            "--executor",
            "ray",
            "-w",
            "2",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    same_run(local_run, download(s3, "ray/run", tmp_path / "downloaded"))


def test_a_different_run_into_the_same_remote_folder_needs_force(s3, tmp_path):
    upload_sample(s3, "force")
    body = (
        '[sources.math]\npaths = ["s3://force/in/math/gsm8k.jsonl.gz"]\n[[stages]]\nname = "length"\nmin_chars = {}\n'
    )
    first, second = (write_config(tmp_path / f"{n}.toml", body.format(n)) for n in (10, 20))
    run_pipeline(first, "s3://force/run", workers=1, quiet=True)
    with pytest.raises(ConfigError, match="different config"):
        run_pipeline(second, "s3://force/run", workers=1, quiet=True)
    manifest = run_pipeline(second, "s3://force/run", workers=1, quiet=True, force=True)
    stored = json.loads(s3.open_input_stream("force/run/manifest.json").read())
    assert stored["config"]["stages"][0]["min_chars"] == 20
    # The returned manifest leaves the (possibly million-long) inputs list to manifest.json.
    assert [entry["path"] for entry in stored.pop("inputs")] == ["gsm8k.jsonl.gz"]
    assert without_config(stored) == without_config(manifest)


def test_a_missing_bucket_for_out_is_a_clear_error(s3):
    with pytest.raises(ConfigError, match="cannot write to --out s3://no-such-bucket/run"):
        run_pipeline(LIGHT_SAMPLE_CONFIG, "s3://no-such-bucket/run", workers=1, quiet=True)


def test_a_live_lease_refuses_a_second_run_and_a_stale_one_is_taken_over(s3, tmp_path, monkeypatch):
    from pipeline.engine.runlock import OutputBusy

    upload_sample(s3, "lease")
    config = write_config(
        tmp_path / "run.toml",
        '[sources.math]\npaths = ["s3://lease/in/math/gsm8k.jsonl.gz"]\n[[stages]]\nname = "length"\nmin_chars = 10\n',
    )
    lease = {
        "host": "another-machine",
        "pid": 4242,
        "started": "then",
        "command": "prep run other.toml",
        "token": "theirs",
    }
    store = RunStore("s3://lease/run")
    store.write_text(".prep/lease.json", json.dumps({**lease, "renewed": time.time()}))
    with pytest.raises(OutputBusy, match="in use by another prep run .*pid 4242 on another-machine"):
        run_pipeline(config, "s3://lease/run", workers=1, quiet=True)
    monkeypatch.setenv("PREP_LEASE_SECONDS", "5")
    store.write_text(".prep/lease.json", json.dumps({**lease, "renewed": time.time() - 6}))  # its run stopped renewing
    assert run_pipeline(config, "s3://lease/run", workers=1, quiet=True)["balance"]["input"] > 0
    assert store.read_text(".prep/lease.json") is None  # released at the end


def test_a_run_whose_lease_was_taken_over_stops_and_leaves_the_new_holder_alone(s3, monkeypatch):
    """A run that went too long without renewing (paused, cut off from the store) finds at
    its next heartbeat that another run took the folder: it stops, without writing its own
    lease back over the new holder's."""
    from pipeline.engine.runlock import OutputBusy, locked_output

    s3.create_dir("lease-taken")
    monkeypatch.setenv("PREP_LEASE_SECONDS", "1.5")  # a heartbeat every 0.5 s
    store = RunStore("s3://lease-taken/run")
    theirs = {"host": "another-machine", "pid": 4242, "started": "now", "command": "prep run", "token": "theirs"}
    with pytest.raises(OutputBusy, match="taken over by another prep run .*pid 4242 on another-machine"):
        with locked_output(store):
            store.write_text(".prep/lease.json", json.dumps({**theirs, "renewed": time.time()}))
            time.sleep(10)  # the run's work; the heartbeat stops it
    assert json.loads(store.read_text(".prep/lease.json"))["token"] == "theirs"


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan"])
def test_a_bad_lease_time_is_refused_by_name(monkeypatch, value):
    from pipeline.engine.runlock import lease_seconds

    monkeypatch.setenv("PREP_LEASE_SECONDS", value)
    with pytest.raises(ValueError, match="PREP_LEASE_SECONDS must be a number of seconds above 0"):
        lease_seconds()


def test_an_output_cut_in_the_store_after_its_unit_was_done_is_redone(s3, tmp_path, capsys):
    """The store's listing gives each output's size, checked against the unit's marker."""
    s3.create_dir("cut")
    stages = '[[stages]]\nname = "length"\nmin_chars = 200\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n'
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["{SAMPLE}/web/*.gz"]\n{stages}')
    run_pipeline(config, "s3://cut/run", workers=1, quiet=True)
    key = min(i.path for i in s3.get_file_info(pafs.FileSelector("cut/run/docs", recursive=True)) if i.size)
    whole = s3.open_input_file(key).read()
    with s3.open_output_stream(key) as cut:
        cut.write(whole[: len(whole) // 2])
    capsys.readouterr()
    run_pipeline(config, "s3://cut/run", workers=1, progress="none")
    said = capsys.readouterr().err
    assert said.startswith("redoing 1 unit whose output changed after being done: docs/web/") and said.count("\n") == 1
    assert s3.open_input_file(key).read() == whole
