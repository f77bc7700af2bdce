"""What a run does with hostile surroundings: names that try to leave --out, options that
must take effect, two runs on one folder, globs over symlink loops, inputs changed
behind its back, Ctrl-C, a full disk, temporaries of killed runs, duplicate ids.

Every refusal is one line on stderr, without a traceback, and exits non-zero."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import LIGHT_SAMPLE_CONFIG, REPO, write_config, write_jsonl
from test_run import tree_digest

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.progress import ProgressBar
from pipeline.engine.run import run_pipeline
from pipeline.engine.runlock import locked_output
from pipeline.engine.storage import RunStore
from pipeline.util.atomic import FILE_MODE, is_temporary, temp_path

LENGTH = '[[stages]]\nname = "length"\nmin_chars = 5\n'


def prep(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, **kwargs)


def assert_one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def small_run(tmp_path: Path, records=None, extra: str = "") -> Path:
    write_jsonl(
        tmp_path / "in" / "a.jsonl", records or [{"id": f"d{i}", "text": f"document number {i}"} for i in range(20)]
    )
    return write_config(tmp_path / "run.toml", f'{extra}[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')


# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../escaped", "..", "a/b", "/abs", "x" * 65, ".hidden", "a\\u001bb", ""])
def test_a_source_name_that_could_leave_out_is_refused(tmp_path, name):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "hello world"}])
    config = write_config(tmp_path / "run.toml", f'[sources."{name}"]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    with pytest.raises(ConfigError, match="source name"):
        load_config(config)
    result = prep("run", str(config), "--out", str(tmp_path / "deep" / "er" / "out"))
    assert_one_line_refusal(result, "source name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "run.toml"]  # nothing written anywhere


def test_safe_source_names_are_kept(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "hello world"}])
    config = write_config(tmp_path / "run.toml", f'[sources."web-2.en_x"]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert (tmp_path / "out" / "docs" / "web-2.en_x").is_dir()


# -- [run] options take effect ------------------------------------------------------------


def test_max_doc_bytes_lowered_quarantines_longer_documents(tmp_path):
    records = [{"id": "long", "text": "x " * 16_500}, {"id": "short", "text": "a short document"}]
    config = small_run(tmp_path, records, extra="[run]\nmax_doc_bytes = 1000\n")
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert manifest["bad_input"] == {"bad-input:oversized": 1}
    assert pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist() == ["short"]


def test_max_doc_bytes_raised_keeps_a_document_over_the_default(tmp_path):
    text = "word " * ((33 << 20) // 5)  # 33 MiB: over the 32 MiB default
    default = small_run(tmp_path / "default", [{"id": "big", "text": text}])
    assert run_pipeline(default, tmp_path / "default" / "out", workers=1, quiet=True)["bad_input"] == {
        "bad-input:oversized": 1
    }
    raised = small_run(tmp_path / "raised", [{"id": "big", "text": text}], extra=f"[run]\nmax_doc_bytes = {64 << 20}\n")
    manifest = run_pipeline(raised, tmp_path / "raised" / "out", workers=1, quiet=True)
    assert manifest["bad_input"] == {} and manifest["balance"]["output"] == 1


def test_block_bytes_sets_how_much_is_parsed_at_a_time(tmp_path):
    records = [{"id": f"d{i}", "text": f"document number {i} " * 5} for i in range(200)]  # ~24 KB
    default = small_run(tmp_path / "default", records)
    small = small_run(tmp_path / "small", records, extra="[run]\nblock_bytes = 1000\n")
    groups = []
    for config in (default, small):
        run_pipeline(config, config.parent / "out", workers=1, quiet=True)
        (docs,) = (config.parent / "out" / "docs" / "web").glob("*.parquet")
        groups.append(pq.ParquetFile(docs).metadata.num_row_groups)
        assert pq.read_table(docs).num_rows == 200
    assert groups[0] == 1 and groups[1] >= 10  # each block of parsed lines is a batch


@pytest.mark.parametrize(
    "body, message",
    [
        ("[run]\nmax_doc_bytes = 0\n", "max_doc_bytes must be a positive integer"),
        ('[run]\nblock_bytes = "big"\n', "block_bytes must be a positive integer"),
        ("[run]\nworkers = true\n", "workers must be a positive integer"),
        ("[run]\nmax_doc_bytes = 99999999999999999999\n", "run.max_doc_bytes is beyond the 64-bit integers"),
    ],
)
def test_bad_run_settings_are_one_line(tmp_path, body, message):
    config = small_run(tmp_path, extra=body)
    assert_one_line_refusal(prep("run", str(config), "--out", str(tmp_path / "out")), message)


@pytest.mark.parametrize("stage", ["dedup", "paragraph_dedup"])
@pytest.mark.parametrize(
    "value, message",
    [
        ("-1", "partitions must be 1 to 65,536"),
        ("100000000000", "partitions must be 1 to 65,536"),  # once, a header of 800 GB per file
        ('"many"', "is not a valid int"),
    ],
)
def test_bad_partition_counts_are_one_line(tmp_path, stage, value, message):
    config = small_run(tmp_path)
    config.write_text(config.read_text() + f'[[stages]]\nname = "{stage}"\npartitions = {value}\n')
    assert_one_line_refusal(prep("run", str(config), "--out", str(tmp_path / "out")), message)


@pytest.mark.parametrize(
    "options, message",
    [
        ("seed = -1", "dedup: seed must be at least 0"),  # numpy's 'expected non-negative integer'
        ("bands = 100000\nrows = 100000", "dedup: bands x rows must be at most 65,536"),  # a 74.5 GiB MemoryError
    ],
)
def test_dedup_options_numpy_cannot_take_are_one_line_naming_them(tmp_path, options, message):
    config = small_run(tmp_path)
    config.write_text(config.read_text() + f'[[stages]]\nname = "dedup"\n{options}\n')
    assert_one_line_refusal(prep("run", str(config), "--out", str(tmp_path / "out")), message)


# -- one folder, one run ------------------------------------------------------------------


def test_a_second_run_on_a_held_folder_is_refused_naming_the_holder(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    with locked_output(RunStore(str(out))):
        result = prep("run", str(config), "--out", str(out))
    assert_one_line_refusal(result, "in use by another prep run", f"pid {os.getpid()}")
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0  # released


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pipeline.engine.runlock import locked_output; "
                "from pipeline.engine.storage import RunStore\n"
                f"with locked_output(RunStore({str(out)!r})):\n    print('held', flush=True); time.sleep(600)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert holder.stdout.readline().strip() == "held"
    assert prep("run", str(config), "--out", str(out)).returncode != 0
    holder.kill()
    holder.wait()
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0


def test_two_runs_started_together_never_clash(tmp_path):
    clean = tmp_path / "clean"
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(clean), "-q").returncode == 0
    out = tmp_path / "out"
    command = [sys.executable, "-m", "pipeline", "run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q"]
    runs = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(run.wait(), run.stderr.read()) for run in runs]
    assert any(code == 0 for code, _ in results)
    for code, stderr in results:
        assert "Traceback" not in stderr
        assert code == 0 or "in use by another prep run" in stderr
    assert tree_digest(clean) == tree_digest(out)


# -- globs --------------------------------------------------------------------------------


def test_globs_over_symlink_loops_terminate_and_list_each_file_once(tmp_path):
    data = tmp_path / "data"
    write_jsonl(data / "a" / "one.jsonl", [{"text": "hello world"}])
    write_jsonl(data / "b" / "two.jsonl", [{"text": "hello again"}])
    os.symlink(data, data / "a" / "up")  # into an ancestor
    os.symlink(data / "b", data / "a" / "to_b")  # a second way to the same folder
    os.symlink(data / "a", data / "b" / "to_a")  # with the line above, a loop
    os.symlink(data / "b" / "loop2", data / "b" / "loop1")  # two links that point at each other
    os.symlink(data / "b" / "loop1", data / "b" / "loop2")
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["data/**/*.jsonl"]\n{LENGTH}')
    files = [load_config(config).sources["web"].files for _ in range(2)]
    assert files[0] == files[1]
    assert sorted(p.name for p in files[0]) == ["one.jsonl", "two.jsonl"]


# -- inputs changed behind the run's back -------------------------------------------------


def test_an_input_rewritten_with_the_same_size_and_time_is_noticed(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    data = tmp_path / "in" / "a.jsonl"
    stat = data.stat()
    data.write_bytes(data.read_bytes().replace(b"number 1", b"NUMBER 1"))
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # touch -r
    assert data.stat().st_size == stat.st_size
    assert_one_line_refusal(prep("run", str(config), "--out", str(out)), "changed after this run read it", "--force")
    assert prep("run", str(config), "--out", str(out), "-q", "--force").returncode == 0
    assert "NUMBER 1" in "".join(pq.read_table(out / "docs").column("text").to_pylist())


def test_an_input_only_touched_is_accepted(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    before = tree_digest(out)
    os.utime(tmp_path / "in" / "a.jsonl")  # new times, same bytes: hashed again, not refused
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    after = tree_digest(out)
    assert {k: v for k, v in before.items() if k != ".prep/run.json"} == {
        k: v for k, v in after.items() if k != ".prep/run.json"
    }


# -- interrupts, full disks, temporaries ---------------------------------------------------


def test_ctrl_c_ends_quietly_and_the_run_resumes_byte_identical(tmp_path):
    clean = tmp_path / "clean"
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(clean), "-q", "-w", "2").returncode == 0
    out = tmp_path / "out"
    # Timed from what the run has done, not from its start, which a loaded machine
    # stretches: as its processes start, a little and a while after, once units have
    # finished. (tests/test_interrupts.py sends signals at exact points, imports and
    # teardown included; a Ctrl-C in Python's own start-up is Python's to report.)
    for moment, delay in (("processes", 0.0), ("processes", 0.5), ("processes", 1.5), ("units", 0.0), ("units", 3.0)):
        finished = set((out / "stats").rglob("*.json"))  # by the runs before this one
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-w", "2"],
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        if moment == "processes":
            _wait_until(proc, lambda run: _descendants(run.pid))
        else:
            _wait_until(proc, lambda run, before=finished: set((out / "stats").rglob("*.json")) - before)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        _, stderr = proc.communicate(timeout=120)  # no hang
        assert proc.returncode in (0, 130), stderr
        assert "Traceback" not in stderr and "Error" not in stderr, stderr
        if proc.returncode == 130:
            last = stderr.strip().splitlines()[-1]
            assert last == "interrupted: finished units are kept; run the same command again to resume", stderr
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q").returncode == 0
    assert tree_digest(clean) == tree_digest(out)


def _descendants(pid: int) -> set[int]:
    """The live processes under ``pid`` (its fork server, the workers forked from that)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _wait_until(proc: subprocess.Popen, condition, timeout: float = 60.0) -> None:
    """Until ``condition(proc)`` holds or ``proc`` has ended (or ``timeout`` has passed)."""
    deadline = time.monotonic() + timeout
    while not condition(proc) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def test_sigterm_stops_the_run_and_its_workers_and_the_run_resumes(tmp_path):
    """SIGTERM is how schedulers, `timeout` and `kill` stop a job. Its default action ended
    the command at once and left the fork server and its workers running, idle, for good."""
    clean = tmp_path / "clean"
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(clean), "-q", "-w", "2").returncode == 0
    out = tmp_path / "out"
    # Stopped while the fork server and workers start, then once units have finished: by
    # what the run has done, not after a fixed delay, which a loaded machine stretches.
    for moment in ("workers start", "units finished"):
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-w", "2"],
            stderr=subprocess.PIPE,
            text=True,
        )
        if moment == "workers start":
            _wait_until(proc, lambda run: _descendants(run.pid))
        else:
            _wait_until(proc, lambda run: any((out / "stats").rglob("*.json")))
        started = _descendants(proc.pid)
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode in (0, 143) and "Traceback" not in stderr, stderr
        if proc.returncode == 143:
            assert stderr.strip().splitlines()[-1] == (
                "terminated: finished units are kept; run the same command again to resume"
            )
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in started if _alive(pid)]
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q").returncode == 0
    assert tree_digest(clean) == tree_digest(out)


def test_a_sigterm_while_workers_start_is_delivered_once_they_have():
    """Raised in the middle of a start, it left a process the pool could neither join nor kill."""
    from pipeline.util.processes import start_uninterrupted

    events = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: events.append("SIGTERM"))
    try:
        start_uninterrupted(lambda: (os.kill(os.getpid(), signal.SIGTERM), events.append("started")))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert events == ["started", "SIGTERM"]


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


def test_a_failed_write_is_one_line_and_the_run_resumes(tmp_path):
    """A write that fails in a worker (here: a file-size limit, as a full disk does)."""
    clean = tmp_path / "clean"
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(clean), "-q").returncode == 0
    out = tmp_path / "out"
    result = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q", "-w", "2", preexec_fn=_limit_file_size)
    assert_one_line_refusal(result, "largest size this process may write", "raise `ulimit -f`", "again to resume")
    assert prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q").returncode == 0
    assert tree_digest(clean) == tree_digest(out)


def test_a_full_disk_is_one_line(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        result = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(disk / "out"), "-q", "-w", "2")
        assert_one_line_refusal(result, "no space left", "run the same command again to resume")
    finally:
        subprocess.run(["umount", str(disk)])


def test_temporaries_of_every_writer_are_removed_at_start(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    run_pipeline(config, out, workers=1, quiet=True)
    strays = [
        temp_path(out / "work" / "global" / "1" / "p00007.index.npy"),
        out / "stats" / ".x.json.tmp",
        temp_path(out / "docs" / "web" / "00000-a.jsonl.parquet"),
    ]
    for stray in strays:
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_text("half-written")
    run_pipeline(config, out, workers=1, quiet=True)
    assert not any(p.exists() for p in strays)
    assert not [p for p in out.rglob(".*") if p.is_file() and is_temporary(p.name)]


# -- smaller ones ---------------------------------------------------------------------------


def test_duplicate_ids_are_counted_and_named(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "x1", "text": "hello world"}, {"id": "x2", "text": "a doc"}])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"id": "x1", "text": "hello there"}, {"id": "x3", "text": "another"}])
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert manifest["duplicate_ids"] == {
        "ids": 1,
        "extra_copies": 1,
        # the two files are one unit (a pack of small files): the example names the pack
        "examples": [{"id": "x1", "copies": 2, "files": ["a.jsonl .. b.jsonl (2 files)"]}],
    }
    assert any("1 ids occur more than once" in w and "'x1'" in w for w in manifest["warnings"])
    # The id hashes went with work/ as the run completed; a rerun reads the recorded count.
    out = tmp_path / "out"
    written = (out / "manifest.json").read_bytes()
    assert not (out / "work").exists()
    assert run_pipeline(config, out, workers=1, quiet=True) == manifest
    assert (out / "manifest.json").read_bytes() == written


def test_a_run_without_duplicate_ids_says_nothing(tmp_path):
    manifest = run_pipeline(small_run(tmp_path), tmp_path / "out", workers=1, quiet=True)
    assert "duplicate_ids" not in manifest and not any("more than once" in w for w in manifest["warnings"])


def test_progress_of_a_resumed_run_counts_only_this_process(tmp_path):
    bar = ProgressBar("read", total_bytes=10 << 30, total_units=2, mode="json", stream=open(os.devnull, "w"))
    bar.unit_done(resumed_bytes=5 << 30)  # done by an earlier run
    bar.update(documents=10, nbytes=1000)
    assert bar.bytes == 1000 and bar.resumed_bytes == 5 << 30

    config = small_run(tmp_path)
    out = tmp_path / "out"
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    (out / "manifest.json").unlink()
    result = prep("run", str(config), "--out", str(out), "--progress", "json")
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    read = [r for r in records if r["phase"] == "read + stages"]
    assert read and all(r["bytes"] == 0 and r["mb_per_s"] == 0 for r in read)
    assert read[-1]["resumed_bytes"] == (tmp_path / "in" / "a.jsonl").stat().st_size


def test_rerunning_into_an_unwritable_folder_is_one_line(tmp_path):
    config = small_run(tmp_path)
    out = tmp_path / "out"
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0
    if subprocess.run(["mount", "--bind", "-o", "ro", str(out), str(out)], capture_output=True).returncode:
        pytest.skip("cannot make a read-only bind mount here (needs root)")
    try:
        assert_one_line_refusal(prep("run", str(config), "--out", str(out)), "cannot write to --out", "Read-only")
    finally:
        subprocess.run(["umount", str(out)])


def test_odd_file_names_are_read_and_named_printably(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    names = [b"bad\xff.jsonl", b"new\nline.jsonl", b"esc\x1b[2J.jsonl", "ünï cödé.jsonl".encode()]
    for name in names:
        (os.fsencode(folder) + b"/" + name)
        with open(os.fsencode(folder) + b"/" + name, "wb") as f:
            f.write(b'{"text": "hello world"}\n')
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert manifest["balance"]["output"] == 4
    ids = pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist()
    assert sorted(ids) == ["bad\\xff.jsonl:1", "esc\\x1b[2J.jsonl:1", "new\\x0aline.jsonl:1", "ünï cödé.jsonl:1"]


def test_a_worker_killed_mid_run_is_one_line_naming_its_task(tmp_path):
    # Three units a worker: the kill lands in a unit even when the poll below sees a
    # temporary late (a loaded machine), since a worker done with one takes the next.
    records = [{"text": f"document number {i} " * 20} for i in range(10_000)]
    for name in "abcdef":
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", records)
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n{LENGTH}')
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-w", "2", "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )
    busy = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and busy is None:  # a unit's temporary names the worker writing it
        temporaries = list((out / "docs").rglob(".*.tmp")) if (out / "docs").exists() else []
        busy = int(temporaries[0].name.split(".")[-2].split("@")[0]) if temporaries else None
        time.sleep(0.02)
    assert busy, "no unit started"
    os.kill(busy, signal.SIGKILL)  # as the OOM killer would
    _, stderr = proc.communicate(timeout=60)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "worker process died with signal SIGKILL" in lines[0] and "web/" in lines[0]
    assert prep("run", str(config), "--out", str(out), "-q").returncode == 0


def _square(x: int, progress=None) -> int:
    return x * x


def test_a_worker_that_died_idle_is_replaced_before_the_next_phase():
    from pipeline.engine.executor import LocalExecutor

    executor = LocalExecutor(2)
    bar = ProgressBar("t", 0, 4, mode="none")
    try:
        assert executor.run([(_square, (i,)) for i in range(4)], bar) == [0, 1, 4, 9]
        victim = executor._processes[0]
        os.kill(victim.pid, signal.SIGKILL)  # idle, perhaps holding the task queue's lock
        victim.join()
        assert executor.run([(_square, (i,)) for i in range(5)], bar) == [0, 1, 4, 9, 16]
    finally:
        executor.close()  # returns: no worker waits on a lock the dead one held


def test_a_closed_pool_leaves_no_queue_thread_to_be_frozen_at_exit():
    """A queue's feeder thread runs the clean-up of its semaphores as it ends; one still
    running when the interpreter exits is frozen half-way, and multiprocessing's resource
    tracker then prints "leaked semaphore" warnings under a killed run's one-line error.
    (A feeder often ends on its own before the check, so several pools are closed.)"""
    import threading

    from pipeline.engine.executor import LocalExecutor

    for terminate in (False, True, False, True):
        executor = LocalExecutor(2)
        assert executor.run([(_square, (i,)) for i in range(3)], ProgressBar("t", 0, 3, mode="none")) == [0, 1, 4]
        feeders = [t for t in threading.enumerate() if t.name == "QueueFeederThread" and t.is_alive()]
        assert feeders  # the task queue's, started by the first task sent
        executor.close(terminate=terminate)
        assert not any(t.is_alive() for t in feeders)


def test_written_files_get_the_umask_mode_not_a_private_temporary_one(tmp_path):
    """Atomic writes go through mkstemp (mode 0600); what they leave must be readable as a
    plain open would make it, or a team's shared run folder serves its writer alone."""
    out = tmp_path / "out"
    result = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    written = [p for p in out.rglob("*") if p.is_file() and ".prep" not in p.parts]
    assert written and {oct(p.stat().st_mode & 0o777) for p in written} == {oct(FILE_MODE)}
