"""`prep run` end to end: the bundled sample, determinism across worker counts, resume
after SIGKILL, refusing to mix runs, and configs that fail loudly."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import EVERY_PHASE_STAGES, LIGHT_SAMPLE_CONFIG, REPO, SAMPLE_CONFIG, write_config, write_jsonl

from pipeline import phases as stage_phases
from pipeline.commands.main import main
from pipeline.engine import unit as unit_module
from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.progress import ProgressBar
from pipeline.engine.run import run_pipeline
from pipeline.engine.summary import print_summary
from pipeline.formats.documents import LEDGER_SCHEMA
from pipeline.formats.layout import Layout
from pipeline.loader import ShardCorpus


def tree_digest(folder: Path) -> dict[str, str]:
    """Every output file under ``folder`` (relative path -> sha256), except the timings
    (cost.json and stats/cost/), the only files that differ from run to run."""
    digests = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and relative.parts[:2] != ("stats", "cost") and relative != Path("cost.json"):
            digests[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def prep(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "out"
    manifest = run_pipeline(SAMPLE_CONFIG, out, workers=1, quiet=True)
    return out, manifest


def test_sample_run_balances_and_writes_every_output(sample_run):
    out, manifest = sample_run
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"] > 1000
    for name, source in manifest["sources"].items():
        assert source["input"] == source["output"] + source["rejected"], name
    kept = pq.read_table(out / "docs")
    rejected = pq.read_table(out / "rejects")
    assert kept.num_rows == balance["output"] and rejected.num_rows == balance["rejected"]
    assert rejected.schema.equals(LEDGER_SCHEMA)
    # Every document id appears exactly once, in the output or in the ledger.
    ids = kept.column("id").to_pylist() + rejected.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == balance["input"]
    meta = pq.ParquetFile(next((out / "docs" / "web").glob("*.parquet"))).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    written = json.loads((out / "manifest.json").read_text())
    assert [i["source"] for i in written["inputs"]].count("code") == 2
    assert all(len(i["sha256"]) == 64 and i["bytes"] > 0 for i in written["inputs"])
    assert "pyarrow" in manifest["versions"]
    # run_pipeline returns the manifest but for its list of inputs, which only the file holds
    assert {k: v for k, v in written.items() if k != "inputs"} == manifest


def test_per_source_options_apply(sample_run):
    out, manifest = sample_run
    math = pq.read_table(out / "docs" / "math").column("n_chars").to_pylist()
    web = pq.read_table(out / "docs" / "web").column("n_chars").to_pylist()
    assert min(math) < 200 <= min(web)  # math keeps documents of 50+ chars, web needs 200
    assert (
        manifest["stages"]["length"]["by_source"]["math"]["rejected"]
        < manifest["stages"]["length"]["by_source"]["web"]["rejected"]
    )


def test_byte_identical_across_worker_counts(sample_run, tmp_path):
    out1, _ = sample_run
    out2 = tmp_path / "w2"
    run_pipeline(SAMPLE_CONFIG, out2, workers=2, quiet=True)
    assert tree_digest(out1) == tree_digest(out2)


def _big_config(tmp_path: Path, shared: Path) -> Path:
    """Real web, code and math through every kind of phase: per-document stages, the
    global dedup (map, reduce, finalize, filter) and the terminal tokenize."""
    web_paths = (
        f'"{shared}/web/dolma_ccmain_20190717_00140.jsonl.gz", "{shared}/web/nltk_webtext.jsonl.gz", '
        f'"{REPO}/data/sample/web/*.gz"'
    )
    return write_config(
        tmp_path / "big.toml",
        f"""
[sources.web]
paths = [{web_paths}]
[sources.code]
paths = ["{shared}/code/python_stdlib.jsonl.gz", "{shared}/code/js_usr_lib_node_modules.jsonl.gz"]
[sources.math]
paths = ["{shared}/math/gsm8k.jsonl.gz"]
{EVERY_PHASE_STAGES}""",
    )


def test_sigkill_then_rerun_is_byte_identical(shared_data, tmp_path):
    config = _big_config(tmp_path, shared_data)
    clean = tmp_path / "clean"
    assert prep("run", str(config), "--out", str(clean), "-w", "2", "-q").returncode == 0
    killed = tmp_path / "killed"
    for kill_after_units in (1, 5, 12):  # kill early, then in later phases of the resumed runs
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(killed), "-w", "2", "-q"],
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            markers = list((killed / "stats").rglob("*.json")) if (killed / "stats").exists() else []
            if len(markers) >= kill_after_units:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not (killed / "manifest.json").exists() or proc.returncode == 0
    result = prep("run", str(config), "--out", str(killed), "-w", "1", "-q")
    assert result.returncode == 0, result.stderr
    assert not list(killed.rglob(".*.tmp"))
    assert tree_digest(clean) == tree_digest(killed)
    manifest = json.loads((clean / "manifest.json").read_text())
    # The sample's web files are slices of the shared ones: exact duplicates, with survivors.
    assert manifest["stages"]["dedup"]["rejected"].get("exact-duplicate", 0) >= 300
    ledger = pq.read_table(clean / "rejects").to_pylist()
    duplicate = next(r for r in ledger if r["reason"] == "exact-duplicate")
    assert json.loads(duplicate["detail"])["survivor"]
    assert manifest["stages"]["tokenize"]["counters"]["tokens"] > 1_000_000


def test_different_config_into_same_folder_is_refused_unless_force(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "hello world, a document"}])
    first = write_config(tmp_path / "a.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    second = write_config(
        tmp_path / "b.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 5\n'
    )
    out = tmp_path / "out"
    run_pipeline(first, out, workers=1, quiet=True)
    run_pipeline(first, out, workers=1, quiet=True)  # the same run again is a resume
    with pytest.raises(ConfigError, match="different config"):
        run_pipeline(second, out, workers=1, quiet=True)
    manifest = run_pipeline(second, out, workers=1, quiet=True, force=True)
    assert "length" in manifest["stages"]


def test_non_empty_foreign_folder_is_refused(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "hello world"}])
    config = write_config(tmp_path / "a.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not made by prep"):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True, force=True)
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"  # --force removes only prep's own files


@pytest.mark.parametrize(
    "body, message",
    [
        ('[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "lenght"\n', "did you mean 'length'"),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_char = 3\n',
            "did you mean 'min_chars'",
        ),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nsources = ["wbe"]\n',
            "did you mean 'web'",
        ),
        ('[sources.web]\npath = ["in/*.jsonl"]\n', "did you mean 'paths'"),
        ('[sourcs.web]\npaths = ["in/*.jsonl"]\n', "did you mean 'sources'"),
        ('[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = "ten"\n', "not a valid int"),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 10\nmax_chars = 5\n',
            "max_chars must be >= min_chars",
        ),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\n'
            "[stages.per_source.cod]\nmin_chars = 1\n",
            "unknown source",
        ),
        ("[sources.web\n", "not valid TOML"),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[sources.code]\npaths = ["in/*.jsonl"]\n'
            '[[stages]]\nname = "quality"\ncode_sources = ["cod"]\n',
            "unknown source in stages[0] (quality).code_sources 'cod'; did you mean 'code'?",
        ),
        (
            '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "langid"\n'
            '[stages.per_source.web]\nskip_sources = ["wbe"]\n',
            "unknown source in stages[0] (langid).per_source.web.skip_sources 'wbe'; did you mean 'web'?",
        ),
    ],
)
def test_config_mistakes_name_the_nearest_valid_word(tmp_path, body, message):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "x"}])
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write_config(tmp_path / "c.toml", body))


def test_a_stage_that_did_nothing_is_flagged(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "plain ascii text"}] * 3)
    config = write_config(
        tmp_path / "c.toml",
        '[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "length"\nmin_chars = 1\n'
        '[[stages]]\nname = "normalize"\nsources = ["web"]\n',
    )
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "-w", "1"])
    assert result.exit_code == 0, result.output
    assert "warning: stage 'length' kept every document and changed none of 3" in result.output
    assert "warning: stage 'normalize' kept every document" in result.output


def test_help_explains_resume():
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0 and "resumes" in result.output


def test_sample_picks_the_same_documents_whatever_the_workers(tmp_path):
    first = run_pipeline(LIGHT_SAMPLE_CONFIG, tmp_path / "a", workers=1, quiet=True, sample=0.2)
    second = run_pipeline(LIGHT_SAMPLE_CONFIG, tmp_path / "b", workers=2, quiet=True, sample=0.2)
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")
    full = run_pipeline(LIGHT_SAMPLE_CONFIG, tmp_path / "full", workers=1, quiet=True)
    share = first["balance"]["input"] / full["balance"]["input"]
    assert 0.15 < share < 0.25
    kept = set(pq.read_table(tmp_path / "a" / "docs").column("id").to_pylist())
    full_kept = set(pq.read_table(tmp_path / "full" / "docs").column("id").to_pylist())
    # A page kept by the sample is kept by the full run, unless dedup found its copy there
    # (among the pages the sample left out).
    rejects = pq.read_table(tmp_path / "full" / "rejects").to_pylist()
    dropped_as_copies = {r["id"] for r in rejects if r["stage"] == "dedup"}
    assert kept - full_kept <= dropped_as_copies
    cost = json.loads((tmp_path / "a" / "cost.json").read_text())
    projected = cost["projection"]
    assert projected["input_documents"] == pytest.approx(full["balance"]["input"], rel=0.2)
    assert projected["output_documents"] == pytest.approx(full["balance"]["output"], rel=0.2)
    assert cost["cpu_seconds"]["total"] > 0 and "normalize" in cost["cpu_seconds"]
    assert second["sample"] == 0.2


def test_json_progress_lines(tmp_path):
    result = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(tmp_path / "o"), "-w", "1", "--progress", "json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert records[-1]["phase"] == "done"  # the summary (tests/test_progress_json.py)
    last = records[-2]
    assert last["fraction"] == 1.0 and last["units_done"] == last["units_total"]


def test_a_phase_without_input_bytes_counts_progress_in_units():
    stream = io.StringIO()
    bar = ProgressBar("stages after dedup", 0, 4, mode="json", stream=stream)
    for _ in range(4):
        bar.unit_done()
    bar.close()
    last = json.loads(stream.getvalue().splitlines()[-1])
    assert last["fraction"] == 1.0 and last["units_done"] == 4


def test_an_instant_phase_can_stay_silent():
    stream = io.StringIO()
    bar = ProgressBar("compile kernels", 0, 2, mode="json", stream=stream, quiet_for=60)
    bar.unit_done()
    bar.close()
    assert stream.getvalue() == ""


FIGURE = r"\d[\d.,]*[kMBT]?(?: [a-zA-Z]+)?|\?"  # 1,440  2.80M  4.70 s  20.5 MB  ? (unknown)
PROJECTION_ROW = re.compile(rf"^  (?P<label>[A-Za-z -]+?)\s{{2,}}(?P<full>{FIGURE})\s+(?P<sample>{FIGURE})")
SCALES = {"k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}  # after a count, without a space: 2.80M, 18.2B
UNITS = {"s": 1, "min": 60, "h": 3600, "days": 86400, "B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def printed_number(text: str) -> float | None:
    """A figure as the summary prints it ("4.70 s", "2.80M", "20.5 MB", "1,440"; "?" when
    unknown) as a number."""
    if text == "?":
        return None
    number, _, unit = text.partition(" ")
    scale = UNITS[unit] if unit else 1
    if number[-1] in SCALES:
        number, scale = number[:-1], SCALES[number[-1]]
    return float(number.replace(",", "")) * scale


def projection(output: str) -> dict[str, tuple[float, float]]:
    """The projection block of a run's summary: label -> (full input, sample)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("projected for the full input"))
    rows = {}
    for line in lines[start + 2 :]:
        match = PROJECTION_ROW.match(line)
        if match:
            rows[match["label"]] = (printed_number(match["full"]), printed_number(match["sample"]))
    return rows


def test_a_sampled_run_prints_what_it_projects(tmp_path):
    out = tmp_path / "trial"
    result = prep(
        "run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-w", "1", "--sample", "0.2", "--progress", "none"
    )
    assert result.returncode == 0, result.stderr
    assert "projected for the full input from a 20% sample (cost.json has the details):" in result.stderr
    cost = json.loads((out / "cost.json").read_text())
    balance = json.loads((out / "manifest.json").read_text())["balance"]
    full = cost["projection"]
    expected = {
        "CPU time": (full["cpu_seconds"], cost["cpu_seconds"]["total"]),
        "core-hours": (full["core_hours"], cost["core_hours"]),
        "documents read": (full["input_documents"], balance["input"]),
        "documents kept": (full["output_documents"], balance["output"]),
        "tokens": (full["output_tokens"], cost["output_tokens"]),
        "on disk": (full["output_bytes"], cost["output_bytes"]),
    }
    printed = projection(result.stderr)
    assert printed.keys() == expected.keys()
    for label, (projected, measured) in expected.items():  # three significant figures, or exact counts
        assert printed[label] == (pytest.approx(projected, rel=0.006), pytest.approx(measured, rel=0.006)), label
    assert printed["documents read"] == (full["input_documents"], balance["input"])
    low, high = full["output_tokens_interval"]  # per byte of input, not 1/0.2 (tests/test_sample_projection.py)
    assert low < full["output_tokens"] < high
    assert any(line.startswith("  tokens ") and "95% interval" in line for line in result.stderr.splitlines())

    # Run again: a resume that finds every unit done projects the same from the same files.
    again = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(out), "-w", "1", "--sample", "0.2", "--progress", "none")
    assert again.returncode == 0, again.stderr
    assert projection(again.stderr) == printed


def test_the_loaders_index_cache_is_not_the_runs_output_on_disk(tmp_path):
    # a DataLoader reading the run writes tokens/.loader_cache; a rerun found the run
    # complete yet wrote cost.json's output_bytes 0.2% larger (redpajama.toml's run)
    out = tmp_path / "out"
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    before = json.loads((out / "cost.json").read_text())["output_bytes"]
    assert ShardCorpus(out / "tokens").cache_dir == out / "tokens" / ".loader_cache"
    assert any((out / "tokens" / ".loader_cache").iterdir())
    run_pipeline(LIGHT_SAMPLE_CONFIG, out, workers=1, quiet=True)
    assert json.loads((out / "cost.json").read_text())["output_bytes"] == before


def test_quiet_and_unsampled_runs_print_no_projection(tmp_path):
    quiet = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(tmp_path / "q"), "-w", "1", "--sample", "0.2", "-q")
    assert quiet.returncode == 0 and quiet.stdout == quiet.stderr == "", quiet.stderr
    assert "projection" in json.loads((tmp_path / "q" / "cost.json").read_text())
    full = prep("run", str(LIGHT_SAMPLE_CONFIG), "--out", str(tmp_path / "f"), "-w", "1", "--progress", "none")
    assert full.returncode == 0 and "done:" in full.stderr, full.stderr
    assert "projected" not in full.stderr + full.stdout


def test_projection_summary_survives_a_missing_or_partial_cost_json(tmp_path):
    manifest = {
        "balance": {"input": 4000, "output": 3000, "rejected": 1000},
        "sources": {},
        "stages": {"length": {"input": 4000, "rejected": {}, "changed": 0, "counters": {}}},
        "bad_input": {},
        "warnings": [],
        "sample": 0.01,
    }

    def summary(cost_text: str | None) -> str:
        (tmp_path / "cost.json").unlink(missing_ok=True)
        if cost_text is not None:
            (tmp_path / "cost.json").write_text(cost_text)
        stream = io.StringIO()
        print_summary(manifest, tmp_path, stream)
        return stream.getvalue()

    for text in (None, "{not json", "[]", '{"cpu_seconds": {"total": 1.0}}', '{"projection": "n/a"}'):
        assert "projected for the full input from a 1% sample: not available" in summary(text), text
    partial = summary('{"projection": {"output_documents": 300000, "cpu_seconds": "?", "output_bytes": 2.5e9}}')
    assert projection(partial) == {"documents kept": (300000, 3000), "on disk": (2.5e9, None)}
    assert "CPU time" not in partial and "tokens" not in partial and "documents were sampled" not in partial
    manifest["sample"] = 1.0
    assert "projected" not in summary('{"projection": {"output_documents": 1}}')


def test_workers_start_without_pandas_yet_can_use_it():
    """The fork server answers pyarrow's "is this a pandas object?" without importing
    pandas; conversions still work, and to_pandas still imports it when asked."""
    script = (
        "import sys\n"
        "import pipeline.engine.worker_imports\n"
        "import pyarrow as pa\n"
        "assert pa.array(['a', None]).null_count == 1 and pa.table({'n': [1, 2]}).num_rows == 2\n"
        "print('pandas' in sys.modules)\n"
        "frame = pa.table({'n': [1, 2]}).to_pandas()\n"
        "import pandas as pd\n"
        "print(type(frame).__name__, pa.types.is_dictionary(pa.array(pd.Series(['x'], dtype='category')).type))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split("\n")[:2] == ["False", "DataFrame True"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_imports_neither_pandas_nor_pyarrow_dataset(tmp_path, workers):
    """Both cost a run 0.25-0.4 s of imports for nothing it needs: the command running
    tasks itself (one worker) converted numpy arrays with pyarrow, which asks for pandas;
    naming repeated ids read Parquet with read_table, which imports pyarrow.dataset."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / f"{name}.jsonl", [{"id": "same", "text": f"text {name}"}, {"id": name, "text": "x"}])
    config = write_config(tmp_path / "run.toml", f'[sources.web]\npaths = ["{tmp_path}/*.jsonl"]\n')
    script = (
        "import sys\n"
        "from pipeline.engine.run import run_pipeline\n"
        "if __name__ == '__main__':\n"
        f"    manifest = run_pipeline({str(config)!r}, {str(tmp_path / 'out')!r}, workers={workers}, quiet=True)\n"
        "    example = manifest['duplicate_ids']['examples'][0]['id']\n"
        "    print(example, 'pandas' in sys.modules, 'pyarrow.dataset' in sys.modules)\n"
    )
    (tmp_path / "script.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "script.py")], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["same", "False", "False"]


def test_the_run_command_with_stages_imports_no_pandas(tmp_path):
    """Loading the stages makes Arrow scalars (column_filter's), which asked pyarrow
    whether pandas is there: 0.15-0.2 s of the command's start, before its warm-up."""
    write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": "A page of plain English text."}])
    config = write_config(
        tmp_path / "run.toml", f'[sources.web]\npaths = ["{tmp_path}/*.jsonl"]\n[[stages]]\nname = "length"\n'
    )
    script = (
        "import atexit, sys\n"
        "from pipeline.commands.main import program\n"
        "atexit.register(lambda: print('pandas' in sys.modules))\n"
        f"sys.argv = ['prep', 'run', {str(config)!r}, '--out', {str(tmp_path / 'out')!r}, '-q', '-w', '2']\n"
        "program()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_the_fork_server_imports_without_collecting_and_freezes_what_it_imported():
    """The server's imports ran 270 collections (a fifth of its start) for little garbage:
    none runs now, what they made is frozen, and the collector is on again after."""
    script = (
        "import gc\n"
        "import pipeline.engine\n"  # the packages around the module, imported first
        "starts = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and starts.append(info['generation']))\n"
        "import pipeline.engine.worker_imports\n"
        "print(len(starts), gc.isenabled(), gc.get_threshold(), gc.get_freeze_count() > 100_000)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split() == ["0", "True", "(10000,", "50,", "100)", "True"]


def test_the_program_ends_a_run_with_its_summary_written(tmp_path):
    """``prep`` skips the interpreter's teardown after a local run: the summary it printed
    into a pipe is all there, to its last stage line, and the exit code is 0."""
    command = [sys.executable, "-m", "pipeline", "run", str(LIGHT_SAMPLE_CONFIG), "--out", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    summary = done.stderr[done.stderr.index("\ndone: 1,440 documents in") :]
    assert "stage length" in summary and "stage tokenize" in summary
    assert (tmp_path / "out" / "manifest.json").exists()


def test_the_program_gives_blas_one_thread_unless_told(monkeypatch):
    """OpenBLAS's thread pool cost each of prep's processes CPU at start for nothing."""
    from pipeline.commands import main as program_module

    monkeypatch.setattr(program_module, "main", lambda: None)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    program_module.program()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    program_module.program()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_a_resumed_run_keeps_the_partitions_its_start_chose(tmp_path, monkeypatch):
    """The choice is recorded in the run's state: a resume whose inputs would now choose
    another count (an input grown before its unit was read) keeps the files it has."""
    config = write_config(
        tmp_path / "dedup.toml",
        f'[sources.web]\npaths = ["{REPO}/data/sample/web/*.gz"]\n[[stages]]\nname = "dedup"\n',
    )
    clean, out = tmp_path / "clean", tmp_path / "out"
    run_pipeline(config, clean, workers=1, quiet=True)
    run_unit = unit_module.run_unit

    def killed(config, store, options, segment, *args, **kwargs):  # workers=1 runs the units in this process
        if segment.index == 1:
            raise RuntimeError("killed in the filter phase")
        return run_unit(config, store, options, segment, *args, **kwargs)

    monkeypatch.setattr(unit_module, "run_unit", killed)
    with pytest.raises(RuntimeError, match="killed in the filter phase"):
        run_pipeline(config, out, workers=1, quiet=True)
    layout = Layout(out)
    assert json.loads(layout.state.read_text())["sized"] == {"0": {"partitions": 2}}
    assert len(list((layout.global_work(1) / "decisions").iterdir())) == 2
    monkeypatch.setattr(unit_module, "run_unit", run_unit)
    monkeypatch.setattr(stage_phases, "partitions_for", lambda size: 4)
    run_pipeline(config, out, workers=1, quiet=True)  # the filter phase reads the decisions per range
    assert json.loads(layout.state.read_text())["sized"] == {"0": {"partitions": 2}}
    assert tree_digest(out) == tree_digest(clean)
