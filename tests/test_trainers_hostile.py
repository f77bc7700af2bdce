"""``prep classifier train``/``eval`` and ``prep tokenizer train`` in the hands of a new user
with hostile data and options: every failure is one line the user can act on, no C++
abort reaches them, Ctrl-C stops training, and nothing half-made lands under a final name.

Tiny hand-made inputs, so each test trains in about a second."""

from __future__ import annotations

import importlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import REPO, write_jsonl

from pipeline.commands.main import main
from pipeline.formats import fasttext_model
from pipeline.formats.fasttext_model import read_sidecar, sidecar_path
from pipeline.kernels.hashing import file_sha256
from pipeline.util.atomic import writer_tag
from pipeline.util.processes import ChildDied, run_in_child

FAST = ["--epoch", "2", "--dim", "4", "--bucket", "100", "--threads", "1"]


def prep(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, *words: str) -> str:
    """The command failed with one ``Error:`` line holding ``words``; that line."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("Error: ") and sum(line.startswith("Error") for line in lines) == 1, result.output
    for word in words:
        assert word in lines[-1], lines[-1]
    return lines[-1]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def labeled(folder: Path, name: str = "data.jsonl", prefix: str = "") -> Path:
    """Two labels (a, b) of 30 documents each, with words that tell them apart."""
    rows = [{"text": f"alpha beta gamma {i} delta", "label": f"{prefix}a"} for i in range(30)]
    rows += [{"text": f"one two three {i} four", "label": f"{prefix}b"} for i in range(30)]
    return write_jsonl(folder / name, rows)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    out = folder / "m.bin"
    result = prep("classifier", "train", "--data", labeled(folder), "--out", out, *FAST)
    assert result.exit_code == 0, result.output
    return out


# -- fastText's own aborts and hangs ---------------------------------------------------------


def test_threads_fasttext_cannot_start_are_one_line_not_an_abort(tmp_path):
    """fastText starts a thread per --threads; one it cannot start called std::terminate,
    and the whole process died of SIGABRT with a core dump. No system starts ten million
    (Linux's pid_max is at most about four million)."""
    data = labeled(tmp_path)
    out = tmp_path / "m.bin"
    result = prep("classifier", "train", "--data", data, "--out", out, *FAST[:-2], "--threads", "10000000")
    one_line_error(result, "fastText stopped with signal", "--threads")
    assert not out.exists() and not sidecar_path(out).exists() and not leftovers(tmp_path)


def _train_forever(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A ``prep classifier train`` that would train for hours, stopped once training began."""
    out = tmp_path / "m.bin"
    args = ["classifier", "train", "--data", labeled(tmp_path), "--out", out, "--epoch", "100000000"]
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", *map(str, args), "--dim", "1", "--bucket", "10", "--threads", "1"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    for line in process.stdout:
        if line.startswith("training fastText"):
            break
    time.sleep(1)  # into fastText's C++ loop
    return process, out


def test_ctrl_c_stops_training_and_leaves_nothing(tmp_path):
    """fastText's C++ loop never answered Ctrl-C: the command trained on to its end."""
    process, out = _train_forever(tmp_path)
    process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and "interrupted" in output and "Traceback" not in output, output
    assert not out.exists() and not leftovers(tmp_path)


def test_sigkill_mid_training_leaves_no_model_and_no_trainer(tmp_path):
    """Killed outright, prep cannot clean up, but nothing lands under the model's name, its
    fastText child dies with it (it trained on, an orphan), and the same command succeeds."""
    process, out = _train_forever(tmp_path)
    process.kill()
    # The orphan held the output pipe open: reading to its end waited for it.
    process.communicate(timeout=60)
    assert not out.exists() and not sidecar_path(out).exists()
    killed = leftovers(tmp_path)  # the model being written, the training and held-out lines
    assert len(killed) == 3 and all(f".m.bin.{process.pid}@" in name for name in killed), killed
    live = tmp_path / f".m.bin.{writer_tag()}.other.tmp"  # a writer that still runs
    live.write_bytes(b"")
    done = prep("classifier", "train", "--data", tmp_path / "data.jsonl", "--out", out, *FAST)
    assert done.exit_code == 0, done.output
    assert sorted(json.loads(sidecar_path(out).read_text())["labels"]) == ["a", "b"]
    assert leftovers(tmp_path) == [live.name]  # the dead writer's temporaries went with the next training


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


class Killed(Exception):
    """Stands for a SIGKILL at the moment it is raised."""


@pytest.mark.parametrize("at", ["model rename", "sidecar write"])
def test_a_training_killed_between_its_writes_leaves_a_model_and_its_own_sidecar(tmp_path, model, monkeypatch, at):
    """The sidecar was written before the model's rename: killed between the two, the old
    model lay beside the new model's sidecar (its labels, metrics and sha256)."""
    out = tmp_path / "m.bin"
    out.write_bytes(model.read_bytes())
    sidecar_path(out).write_bytes(sidecar_path(model).read_bytes())
    data = write_jsonl(tmp_path / "other.jsonl", [{"text": f"word{i % 7} x", "label": f"l{i % 3}"} for i in range(60)])

    training = importlib.import_module("pipeline.classifier.train")  # (the package's ``train`` is the function)
    real_replace = os.replace

    def replace(source, target):
        if at == "model rename" and Path(target) == out:
            raise Killed
        real_replace(source, target)

    def write_json_atomic(path, value):
        raise Killed

    monkeypatch.setattr(os, "replace", replace)
    if at == "sidecar write":
        monkeypatch.setattr(training, "write_json_atomic", write_json_atomic)
    result = prep("classifier", "train", "--data", data, "--out", out, *FAST)
    assert result.exit_code != 0 and "Error: Killed" in result.output, result.output
    monkeypatch.undo()
    sidecar = read_sidecar(out)  # a model's own, or none
    assert sidecar is None or sidecar["model_sha256"] == file_sha256(out)
    assert sorted(fasttext_model.labels(fasttext_model.load(str(out)))) == (
        ["l0", "l1", "l2"] if at == "sidecar write" else ["a", "b"]
    )


def test_a_sidecar_of_another_model_is_refused(tmp_path, model):
    """A model copied over another kept the other's sidecar, which eval read as its own."""
    out = tmp_path / "m.bin"
    data = write_jsonl(tmp_path / "other.jsonl", [{"text": f"word{i % 7} x", "label": f"l{i % 3}"} for i in range(60)])
    assert prep("classifier", "train", "--data", data, "--out", out, *FAST).exit_code == 0
    out.write_bytes(model.read_bytes())
    one_line_error(prep("classifier", "eval", out, labeled(tmp_path)), "m.bin.json describes another model", "sha256")


def test_min_count_above_every_count_is_one_line_naming_the_highest(tmp_path):
    """fastText kept no word and trained a classifier that answered every text alike."""
    out = tmp_path / "m.bin"
    data = labeled(tmp_path)  # each of alpha, beta, ..., four in 30 documents
    args = ["--data", data, "--out", out, "--holdout", "0", *FAST]
    one_line_error(prep("classifier", "train", *args, "--min-count", "31"), "--min-count 31", "occurs 30 times")
    assert not out.exists() and not sidecar_path(out).exists() and not leftovers(tmp_path)
    assert prep("classifier", "train", *args, "--min-count", "30").exit_code == 0
    assert {"alpha", "four"} <= set(fasttext_model.load(str(out)).words)


def test_a_tokenizer_training_removes_what_a_killed_one_left(tmp_path, run):
    out = tmp_path / "t.model"
    host = writer_tag().split("@")[1]
    dead, live = tmp_path / f".t.model.{_dead_pid()}@{host}.x1.tmp", tmp_path / f".t.model.{writer_tag()}.x2.tmp"
    for path in (dead, live):
        path.write_bytes(b"half a model")
    assert prep("tokenizer", "train", run, "--vocab-size", "300", "--out", out).exit_code == 0
    assert leftovers(tmp_path) == [live.name]


def test_a_child_that_aborts_is_an_error_not_a_crash():
    """What both trainers run in: a C++ abort in the child is ChildDied here."""
    with pytest.raises(ChildDied, match="signal SIGABRT"):
        run_in_child(os.abort)
    assert run_in_child(max, 3, 7) == 7


def test_ctrl_c_stops_a_child_that_ignores_it(tmp_path):
    """The child starts with Ctrl-C ignored, as in a C++ loop that never checks for it
    (SentencePiece's trainer ran on for minutes); Ctrl-C here kills it."""
    script = "import time; from pipeline.util.processes import run_in_child; run_in_child(time.sleep, 600)"
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # the child has started
    process.send_signal(signal.SIGINT)
    try:
        _, errors = process.communicate(timeout=30)  # the child held stderr open while it lived
    finally:
        process.kill()
    assert process.returncode != 0 and "KeyboardInterrupt" in errors


# -- labels ------------------------------------------------------------------------------------


def test_labels_already_prefixed_train_the_plain_labels(tmp_path):
    """``__label__a`` from a fastText-style file became the label ``__label____label__a``,
    which no ``classify`` config could name (its ``label`` drops one prefix)."""
    out = tmp_path / "m.bin"
    data = labeled(tmp_path, prefix="__label__")
    result = prep("classifier", "train", "--data", data, "--out", out, *FAST, "--positive-label", "__label__b")
    assert result.exit_code == 0, result.output
    side = json.loads(sidecar_path(out).read_text())
    assert sorted(side["labels"]) == ["a", "b"] and side["positive_label"] == "b"
    result = prep("classifier", "eval", out, data, "--json")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(result.stdout)["labels"]) == ["a", "b"]


# -- --out ---------------------------------------------------------------------------------------


def test_out_never_replaces_a_file_that_is_not_a_model(tmp_path, model):
    notes = tmp_path / "notes.txt"
    notes.write_text("a file of the user's\n")
    data = labeled(tmp_path)
    one_line_error(prep("classifier", "train", "--data", data, "--out", notes, *FAST), "notes.txt", "not a fastText")
    assert notes.read_text() == "a file of the user's\n"
    # An existing model is replaced.
    again = tmp_path / "again.bin"
    again.write_bytes(model.read_bytes())
    assert prep("classifier", "train", "--data", data, "--out", again, *FAST, "--seed", "7").exit_code == 0
    assert json.loads(sidecar_path(again).read_text())["hyperparameters"]["seed"] == 7
    assert not leftovers(tmp_path)


# -- damaged models --------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [100, 2000, -100, "zeroed tail", "weights not numbers", "tail not numbers"])
def test_a_damaged_model_is_one_line_in_eval_and_in_a_run(tmp_path, model, cut):
    """A model cut inside its vectors loaded, and failed on the first document with
    fastText's "Vector::mul: size mismatch", naming no file."""
    data = model.read_bytes()
    if cut == "zeroed tail":
        data = data[:-300] + bytes(300)
    elif cut == "weights not numbers":  # fastText's "Encountered NaN.", as a Python error
        data = data[:-32] + struct.pack("<8f", *[float("nan")] * 8)  # the output vectors: 2 labels x dim 4
    elif cut == "tail not numbers":  # and the output's header: std::bad_alloc, as a Python error
        data = data[:-64] + struct.pack("<16f", *[float("nan")] * 16)
    else:
        data = data[:cut]
    damaged = tmp_path / "damaged.bin"
    damaged.write_bytes(data)
    labeled(tmp_path)
    one_line_error(prep("classifier", "eval", damaged, tmp_path / "data.jsonl"), "damaged.bin")
    config = tmp_path / "c.toml"
    config.write_text(
        '[sources.s]\npaths = ["data.jsonl"]\n[[stages]]\nname = "classify"\n'
        f'[[stages.models]]\nname = "m"\npath = "{damaged}"\nlabel = "a"\n'
    )
    one_line_error(prep("run", config, "--out", tmp_path / "run", "-w", "1"), "damaged.bin")


def test_a_model_of_another_fasttext_version_says_so(tmp_path, model):
    data = bytearray(model.read_bytes())
    data[4:8] = (11).to_bytes(4, "little")
    (tmp_path / "old.bin").write_bytes(data)
    labeled(tmp_path)
    one_line_error(prep("classifier", "eval", tmp_path / "old.bin", tmp_path / "data.jsonl"), "file version 11")


# -- prep tokenizer train ------------------------------------------------------------------------


def make_run(folder: Path, texts: list[str | None]) -> Path:
    """A prep run folder whose kept documents are ``texts``."""
    docs = folder / "docs" / "s"
    docs.mkdir(parents=True)
    ids = [f"d{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"id": ids, "text": pa.array(texts, pa.string())}), docs / "part-0.parquet")
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(200)]
    return make_run(tmp_path_factory.mktemp("run"), texts)


@pytest.mark.parametrize(
    ("vocab", "words"),
    [
        ("1", ["--vocab-size 1 is too small", "at least 259"]),
        ("260", ["--vocab-size 260 is too small for the sample", "need at least"]),
        ("100000", ["--vocab-size 100000 is more pieces than the sample", "at most"]),
    ],
)
def test_a_vocabulary_the_sample_cannot_fit_is_one_line(tmp_path, run, vocab, words):
    """SentencePiece's own text was a C++ check with its source line: the user had to guess."""
    out = tmp_path / "t.model"
    one_line_error(prep("tokenizer", "train", run, "--vocab-size", vocab, "--out", out), *words)
    assert not out.exists() and not leftovers(tmp_path)


def test_tokenizer_refusals_are_one_line(tmp_path, run):
    out = tmp_path / "t.model"
    empty = make_run(tmp_path / "empty", [None, "", None])
    one_line_error(prep("tokenizer", "train", empty, "--vocab-size", "300", "--out", out), "has no text")
    for options in (["--vocab-size", "100000000000"], ["--vocab-size", "300", "--threads", "100000"]):
        one_line_error(
            prep("tokenizer", "train", run, *options, "--out", out), options[-2]
        )  # past SentencePiece's int32, its 1024
    notes = tmp_path / "notes.txt"
    notes.write_text("a file of the user's\n")
    one_line_error(prep("tokenizer", "train", run, "--vocab-size", "300", "--out", notes), "not a SentencePiece")
    assert notes.read_text() == "a file of the user's\n" and not out.exists()


def test_a_trained_tokenizer_replaces_its_earlier_model(tmp_path, run):
    out = tmp_path / "t.model"
    for vocab in ("300", "320"):
        result = prep("tokenizer", "train", run, "--vocab-size", vocab, "--out", out)
        assert result.exit_code == 0, result.output
    from pipeline.text.tokenizers import load_tokenizer

    assert load_tokenizer(str(out)).vocab_size == 320 and not leftovers(tmp_path)
