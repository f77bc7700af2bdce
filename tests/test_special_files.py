"""A FIFO (or a folder) where a command expects a file is one line naming it, never a hang.

Opening a FIFO for reading blocks until something writes to it, and SIGTERM does not end
the wait, so a FIFO at a shard's ``.idx``, ``.bin`` or sidecar, at a run's ``manifest.json``,
or at one of its Parquet files once left ``prep shards inspect``, ``prep mix``, ``prep
report``, ``prep rejects`` and ``prep show`` blocked for good. Each command runs in a
subprocess with a timeout, so that a hang fails the test instead of stopping pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_shard_validation import make_shard

from pipeline.engine.config import ConfigError, load_config
from pipeline.formats.indexed_shard import IndexedShard
from pipeline.formats.token_shards import ShardError, list_shards


def prep(*args: str) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    return proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()


def to_fifo(path: Path) -> Path:
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("suffix", [".idx", ".bin", ".json"])
def test_a_fifo_in_a_shard_is_refused_naming_it(tmp_path, suffix):
    prefix = make_shard(tmp_path / "tokens" / "web")
    fifo = to_fifo(Path(f"{prefix}{suffix}"))
    with pytest.raises(ShardError, match="FIFO"):
        IndexedShard(prefix)
    for command in (["shards", "inspect", str(prefix)], ["mix", str(tmp_path), "--out", str(tmp_path / "mix")]):
        code, lines = prep(*command)
        assert code == 1 and len(lines) == 1, lines
        assert lines[0].startswith(f"Error: {fifo}") and "FIFO (named pipe), not a regular file" in lines[0]
    assert not (tmp_path / "mix").exists()


def test_a_folder_where_the_bin_belongs_is_refused_naming_it(tmp_path):
    prefix = make_shard(tmp_path)
    Path(f"{prefix}.bin").unlink()
    Path(f"{prefix}.bin").mkdir()
    with pytest.raises(ShardError, match=r"\.bin: cannot read it \(a folder, not a regular file\)"):
        IndexedShard(prefix)


def test_a_fifo_named_like_a_sidecar_is_passed_over_when_listing(tmp_path):
    prefix = make_shard(tmp_path)
    to_fifo(tmp_path / "manifest.json")
    assert list_shards(tmp_path) == [str(prefix)]
    code, lines = prep("shards", "inspect", str(tmp_path))
    assert code == 0 and lines[0] == str(prefix), lines


def test_a_fifo_in_a_run_folder_is_one_line(tmp_path):
    (tmp_path / "rejects" / "web").mkdir(parents=True)
    ledger = to_fifo(tmp_path / "rejects" / "web" / "00000-a.jsonl.to-00001.s0.parquet")
    for command in (["rejects", str(tmp_path)], ["show", str(tmp_path), "some-id"]):
        code, lines = prep(*command)
        assert code == 1 and lines == [f"Error: cannot read {ledger}: a FIFO (named pipe), not a regular file"]
    manifest = to_fifo(tmp_path / "manifest.json")
    code, lines = prep("report", str(tmp_path), "-o", str(tmp_path / "report.html"))
    assert code == 1 and lines == [f"Error: {manifest}: cannot read it (a FIFO (named pipe), not a regular file)"]
    assert not (tmp_path / "report.html").exists()


# A stage's side file, named in the config: the stage's table, and what the one line ends with.
SIDE_FILES = {
    "classifier model": (
        '[[stages.models]]\nname = "q"\npath = "{fifo}"\nlabel = "hq"\nmin_score = 0.5\n',
        "classify",
        "cannot read model {fifo}: a FIFO (named pipe), not a regular file",
    ),
    "benchmark": (
        '[[stages.benchmarks]]\nname = "b"\npath = "{fifo}"\nfields = ["question"]\n',
        "decontaminate",
        "benchmark file {fifo}: a FIFO (named pipe), not a regular file",
    ),
}


@pytest.mark.parametrize("side_file", list(SIDE_FILES))
def test_a_fifo_given_as_a_stages_side_file_is_one_line(tmp_path, side_file):
    table, stage, ending = SIDE_FILES[side_file]
    fifo = to_fifo(tmp_path / "side-file")
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "a document"}\n')
    config = tmp_path / "run.toml"
    config.write_text(f'[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "{stage}"\n' + table.format(fifo=fifo))
    code, lines = prep("run", str(config), "--out", str(tmp_path / "out"), "--quiet")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].endswith(ending.format(fifo=fifo))


def test_a_fifo_given_as_the_config_is_one_line(tmp_path):
    fifo = to_fifo(tmp_path / "run.toml")
    code, lines = prep("run", str(fifo), "--out", str(tmp_path / "out"), "--quiet")
    assert code == 1 and lines == [f"Error: config file {fifo} is a FIFO (named pipe), not a regular file"], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe[sources.web]\n", "not UTF-8 text, as TOML must be (byte offset 0)"),
        (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "not valid TOML: arrays or tables nested too deeply"),
        (b"x = " + b"{a=" * 3000 + b"1" + b"}" * 3000 + b"\n", "not valid TOML: arrays or tables nested too deeply"),
    ],
)
def test_a_config_that_is_no_toml_is_a_config_error_naming_it(tmp_path, content, message):
    config = tmp_path / "run.toml"
    config.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value) == f"{config}: {message}"


def test_a_fifo_in_a_mixture_folder_is_one_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "a document of a few words"}\n')
    config = tmp_path / "run.toml"
    config.write_text('[sources.web]\npaths = ["a.jsonl"]\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n')
    run = tmp_path / "run"
    assert prep("run", str(config), "--out", str(run), "--quiet")[0] == 0
    code, lines = prep("mix", str(run), "--out", str(tmp_path / "mix"))
    assert code == 0, lines
    order = to_fifo(tmp_path / "mix" / "order_source.npy")
    code, lines = prep("report", str(run), str(tmp_path / "mix"), "-o", str(tmp_path / "report.html"))
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"Error: {order}: ") and "FIFO (named pipe), not a regular file" in lines[0]
    # The loader reads the same arrays to train in their order.
    load = f"from pipeline.loader import TokenDataset; TokenDataset({str(tmp_path / 'mix')!r}, seq_len=4)"
    proc = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and f"OrderArrayError: {order}: " in proc.stderr, proc.stderr
