"""Every hostile input of the readers' table, through a whole ``prep run`` at once.

The stages that used to abort on what readers let through (normalize and tokenize on
invalid UTF-8) are in the chain. One run reads every case's file; then each row of the
table must hold for its file: the expected bad-input reasons in the ledger, the expected
documents kept, the balance. The run exits 0 (never by a signal), every Parquet file it
wrote validates in full (valid UTF-8 in every string column), and the token shards open
through the loader's checks. ``--strict`` on the same inputs stops with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest
from conftest import write_config
from test_hostile_readers import CASES, build

from pipeline.loader import TokenDataset

# Cases about a file that is missing or is a folder belong to the reader: a glob never
# matches them, so a run never reads them.
RUN_CASES = [case for case in CASES if case.readable]
FORMATS = {"jsonl": "*.json*", "parquet": "*.parquet", "arrow": "*.arrow"}

CHAIN = """
[[stages]]
name = "normalize"
[[stages]]
name = "length"
min_chars = 1
[[stages]]
name = "tokenize"
tokenizer = "gpt2"
"""


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    inputs = folder / "in"
    inputs.mkdir()
    cases = {}
    for case in RUN_CASES:
        if case.needs_real_data:
            try:
                build(case, inputs)
            except pytest.skip.Exception:
                continue
        else:
            build(case, inputs)
        cases[case.file_name] = case
    sources = "".join(f'[sources.{name}]\npaths = ["in/{pattern}"]\n' for name, pattern in FORMATS.items())
    single = "[run]\ngroup_bytes = 0\n"  # a unit per file, so each file's marker says what it kept
    config = write_config(folder / "run.toml", single + sources + CHAIN)
    out = folder / "out"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(out), "-w", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return folder, config, out, result, cases


def test_the_run_ends_well(hostile_run):
    _, _, out, result, cases = hostile_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"]
    assert balance["input"] == sum(case.records for case in cases.values())


def test_each_file_comes_out_as_its_row_says(hostile_run):
    _, _, out, _, cases = hostile_run
    ledger = pq.read_table(out / "rejects").to_pylist()
    reasons: dict[str, Counter] = {}
    for row in ledger:
        reasons.setdefault(row["file"], Counter())[row["reason"].removeprefix("bad-input:")] += 1
    markers = [json.loads(p.read_text()) for p in (out / "stats" / "segment-0").rglob("*.json")]
    kept = {m["file"]: m["output"] for m in markers}
    assert set(kept) == set(cases)
    for name, case in cases.items():
        assert reasons.get(name, Counter()) == case.reasons, name
        assert kept[name] == case.kept, name


def test_every_written_parquet_validates_in_full(hostile_run):
    _, _, out, _, _ = hostile_run
    files = sorted(out.rglob("*.parquet"))
    assert len(files) > 20
    for path in files:
        pq.read_table(path).validate(full=True)  # raises on invalid UTF-8 in a string column


def test_the_token_shards_open_through_the_loaders_checks(hostile_run):
    _, _, out, _, _ = hostile_run
    dataset = TokenDataset(out, seq_len=16, seed=0, verify=True)
    assert len(dataset) > 0
    assert dataset[0]["input_ids"].shape[0] == 16


def test_strict_stops_at_the_first_bad_input_in_one_line(hostile_run):
    folder, config, _, _, _ = hostile_run
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(folder / "strict"), "--strict", "-w", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: --strict: ") and "bad input (" in lines[0], lines
