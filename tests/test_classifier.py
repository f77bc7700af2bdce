"""``prep classifier train`` and ``eval`` on real text: clean edited prose (US presidential
speeches, cut into paragraph-sized documents) against web text (Common Crawl documents),
and the metric, sampling and shuffling pieces on small hand-made cases."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import REPO, SHARED_DATA, write_jsonl

from pipeline.classifier.metrics import auc, average_ranks, calibration, classification_metrics, positive_label
from pipeline.classifier.sampling import Quota, heldout_ids
from pipeline.classifier.shuffle import ShuffledLines
from pipeline.commands.main import main
from pipeline.formats.fasttext_model import sidecar_path
from pipeline.kernels.hashing import file_sha256, id_hashes

WEB = "web/dolma_ccmain_20190717_00140.jsonl.gz"  # 697 Common Crawl documents
# Small and fast on 1,000 documents: few buckets keep the model at ~30 MB instead of ~850 MB;
# more epochs and a higher rate than the defaults, which are for corpora of 100k+ documents.
FAST = ["--threads", "1", "--bucket", "50000", "--dim", "50", "--epoch", "10", "--lr", "0.5"]


def speech_paragraphs(shared: Path, min_chars: int = 1500) -> list[dict]:
    """The 124 speeches as documents of whole paragraphs, about min_chars each (~700)."""
    docs = []
    with gzip.open(shared / "eval" / "us_speeches.jsonl.gz", "rt") as f:
        for speech in map(json.loads, f):
            current: list[str] = []
            for paragraph in (p.strip() for p in speech["text"].split("\n\n")):
                if paragraph:
                    current.append(paragraph)
                if current and (sum(map(len, current)) >= min_chars or not paragraph):
                    docs.append({"id": f"{speech['id']}#{len(docs)}", "text": "\n\n".join(current)})
                    current = []
            if current:
                docs.append({"id": f"{speech['id']}#{len(docs)}", "text": "\n\n".join(current)})
    return docs


def prep(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, *words: str) -> None:
    """The command failed with one error line naming ``words``, and no traceback."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()  # progress lines may come first
    assert lines[-1].startswith("Error: ") and sum(line.startswith("Error") for line in lines) == 1, result.output
    for word in words:
        assert word in lines[-1], lines[-1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    folder = tmp_path_factory.mktemp("classifier")
    speeches = speech_paragraphs(SHARED_DATA)
    return {
        "folder": folder,
        "speeches": write_jsonl(folder / "speeches.jsonl", speeches),
        "n_speeches": len(speeches),
        "web": SHARED_DATA / WEB,
    }


@pytest.fixture(scope="module")
def trained(corpus) -> dict:
    out = corpus["folder"] / "a" / "prose.bin"
    args = ["--positive", corpus["speeches"], "--negative", corpus["web"], "--max-per-label", 500, *FAST]
    result = prep("classifier", "train", "--out", out, *args)
    assert result.exit_code == 0, result.output
    return {"out": out, "args": args, "result": result, "sidecar": json.loads(sidecar_path(out).read_text())}


def test_train_tells_edited_prose_from_web_text(trained, corpus):
    metrics = trained["sidecar"]["heldout_metrics"]
    assert metrics["auc"] > 0.95 and metrics["accuracy"] > 0.9, metrics
    assert metrics["labels"]["positive"]["f1"] > 0.9 and metrics["labels"]["negative"]["f1"] > 0.9
    assert sum(row["count"] for row in metrics["calibration"]["bins"]) == metrics["documents"]
    stdout = trained["result"].stdout
    assert f"accuracy {metrics['accuracy']:.3f}, AUC {metrics['auc']:.3f} of P(positive)" in stdout
    assert "calibration of P(positive)" in stdout and "0.9-1.0" in stdout
    assert "training fastText on" in trained["result"].stderr
    # Nothing but the model and its sidecar is left beside it.
    assert sorted(p.name for p in trained["out"].parent.iterdir()) == ["prose.bin", "prose.bin.json"]


def test_the_sidecar_says_what_trained_the_model_on_what(trained, corpus):
    side = trained["sidecar"]
    assert side["preprocessing"] == "dclm" and side["prep_version"]
    assert sorted(side["labels"]) == ["negative", "positive"] and side["positive_label"] == "positive"
    assert side["hyperparameters"]["wordNgrams"] == 2 and side["hyperparameters"]["bucket"] == 50000
    assert side["model_sha256"] == file_sha256(trained["out"])
    files = {f["path"]: f["sha256"] for source in side["inputs"] for f in source["files"]}
    assert files == {
        str(corpus["speeches"]): file_sha256(corpus["speeches"]),
        str(corpus["web"]): file_sha256(corpus["web"]),
    }
    counts = side["counts"]
    assert counts["positive"]["available"] == corpus["n_speeches"]
    for label in ("positive", "negative"):
        assert counts[label]["train"] + counts[label]["heldout"] == 500
        assert counts[label]["heldout"] == side["heldout_metrics"]["labels"][label]["count"]
    assert side["skipped"] == {str(corpus["web"]): {"empty-text": 27}}  # the web file's empty documents


def test_the_same_command_picks_the_same_documents_whatever_the_input_order(trained, corpus):
    # Split the prose over two files, named in the opposite order: same ids, same picks.
    docs = [json.loads(line) for line in corpus["speeches"].read_text().splitlines()]
    first = write_jsonl(corpus["folder"] / "b" / "first.jsonl", docs[1::2])
    second = write_jsonl(corpus["folder"] / "b" / "second.jsonl", docs[::2])
    out = corpus["folder"] / "b" / "again.bin"
    args = [a if a != corpus["speeches"] else second for a in trained["args"]]
    args[args.index(second) : args.index(second) + 1] = [second, "--positive", first]
    result = prep("classifier", "train", "--out", out, *args)
    assert result.exit_code == 0, result.output
    again = json.loads(sidecar_path(out).read_text())
    assert again["counts"] == trained["sidecar"]["counts"]
    # One thread and hash-ordered training lines: the very same model, metrics and all.
    assert again["model_sha256"] == trained["sidecar"]["model_sha256"]
    assert again["heldout_metrics"] == trained["sidecar"]["heldout_metrics"]


def test_eval_on_the_heldout_documents_reproduces_the_metrics(tmp_path, corpus):
    speeches = [dict(d, label="prose") for d in map(json.loads, corpus["speeches"].read_text().splitlines())]
    with gzip.open(corpus["web"], "rt") as f:
        web = [{"id": d["id"], "text": d["text"], "label": "web"} for d in map(json.loads, f) if d["text"].strip()]
    data = write_jsonl(tmp_path / "labeled.jsonl.gz", speeches + web)
    out = tmp_path / "labeled.bin"
    result = prep("classifier", "train", "--out", out, "--data", data, "--positive-label", "prose", *FAST)
    assert result.exit_code == 0, result.output
    side = json.loads(sidecar_path(out).read_text())
    assert side["positive_label"] == "prose" and side["heldout_metrics"]["auc"] > 0.95
    assert side["skipped"] == {} and "skipped" not in result.output  # every record has a usable label
    records = speeches + web
    held = heldout_ids(pa.array([r["id"] for r in records]), 0.1)
    pq.write_table(pa.Table.from_pylist([r for r, h in zip(records, held) if h]), tmp_path / "held.parquet")
    result = prep("classifier", "eval", out, tmp_path / "held.parquet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == side["heldout_metrics"]
    text = prep("classifier", "eval", out, tmp_path / "held.parquet")
    assert f"accuracy {side['heldout_metrics']['accuracy']:.3f}" in text.stdout
    assert "skipped" not in text.output  # it warned "skipped 0 records ... (bad-label 0, no-label 0)"


def test_a_run_folder_is_a_source_of_documents(tmp_path, corpus):
    docs = [json.loads(line) for line in corpus["speeches"].read_text().splitlines()]
    run = tmp_path / "run"
    (run / "docs" / "eval").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(docs[:300]), run / "docs" / "eval" / "part-0.parquet")
    out = tmp_path / "run.bin"
    result = prep(
        "classifier", "train", "--out", out, "--positive", run, "--negative", corpus["web"],
        "--positive-label", "edited", "--negative-label", "web", "--max-per-label", 300, *FAST,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    side = json.loads(sidecar_path(out).read_text())
    assert side["counts"]["edited"]["train"] + side["counts"]["edited"]["heldout"] == 300
    assert side["inputs"][0]["kind"] == "run"
    assert side["inputs"][0]["files"][0]["sha256"] == file_sha256(run / "docs" / "eval" / "part-0.parquet")


def test_numeric_labels_and_parquet_without_ids(tmp_path):
    words = ["alpha beta gamma", "delta epsilon zeta"]
    rows = [{"text": f"{words[i % 2]} {i}\nsecond line", "label": i % 2} for i in range(40)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "numbers.parquet")
    out = tmp_path / "n.bin"
    args = ["--data", tmp_path / "numbers.parquet", "--holdout", "0", "--bucket", "1000", "--dim", "8"]
    result = prep("classifier", "train", "--out", out, *args)
    assert result.exit_code == 0, result.output
    assert "no held-out documents" in result.stdout
    side = json.loads(sidecar_path(out).read_text())
    assert sorted(side["labels"]) == ["0", "1"] and side["heldout_metrics"] is None
    assert side["counts"] == {label: {"available": 20, "heldout": 0, "train": 20} for label in ("0", "1")}
    # Without ids, documents are named by file name and row: the same split wherever the file is.
    held = heldout_ids(pa.array([f"numbers.parquet:{i}" for i in range(40)]), 0.5)
    expected = {str(label): int(held[label::2].sum()) for label in (0, 1)}
    (tmp_path / "moved").mkdir()
    (tmp_path / "numbers.parquet").rename(tmp_path / "moved" / "numbers.parquet")
    args[1], args[3] = tmp_path / "moved" / "numbers.parquet", "0.5"
    assert prep("classifier", "train", "--out", out, *args).exit_code == 0
    counts = json.loads(sidecar_path(out).read_text())["counts"]
    assert {label: count["heldout"] for label, count in counts.items()} == expected


# -- errors: one line, naming the file ------------------------------------------------------


def test_input_errors_are_one_line(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "a b c", "label": "x"}, {"text": "d e", "label": "y"}])
    one = write_jsonl(tmp_path / "one.jsonl", [{"text": "a b c", "label": "x"}] * 3)
    no_text = write_jsonl(tmp_path / "no_text.jsonl", [{"body": "a b c", "label": "x"}])
    no_label = write_jsonl(tmp_path / "no_label.jsonl", [{"text": "a b c", "tag": "x"}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = ["classifier", "train", "--out", tmp_path / "m.bin"]
    assert_one_line_error(prep(*out, "--data", empty), "no documents", "empty.jsonl")
    assert_one_line_error(prep(*out, "--data", one), "only one label", "(x)")
    assert_one_line_error(prep(*out, "--data", tmp_path / "missing.jsonl"), "missing.jsonl", "does not exist")
    assert_one_line_error(prep(*out, "--positive", tmp_path / "nothing*.jsonl", "--negative", good), "no files match")
    assert_one_line_error(prep(*out, "--data", good, "--data", no_text), "no_text.jsonl", "no 'text' field")
    assert_one_line_error(prep(*out, "--data", no_label), "no_label.jsonl", "no 'label' field")
    assert_one_line_error(prep(*out, "--data", good, "--positive", good), "either --data")
    assert_one_line_error(prep(*out), "--data FILE")
    assert_one_line_error(prep(*out, "--positive", tmp_path, "--negative", good), "not a prep run")
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_records_without_a_usable_label_are_skipped_and_counted(tmp_path):
    """One record with no label, a list for a label or whitespace in it stopped training on
    every other record; now it is skipped and counted, as an unreadable line is."""
    good = [{"text": f"alpha words {i}", "label": "x"} for i in range(20)]
    good += [{"text": f"beta words {i}", "label": "y"} for i in range(20)]
    bad = [{"text": "c d"}, {"text": "e f", "label": ["x"]}, {"text": "g h", "label": "high quality"}]
    data = write_jsonl(tmp_path / "mixed.jsonl", good[:20] + bad + good[20:])
    lists = write_jsonl(tmp_path / "lists.jsonl", [{"text": "a b", "label": ["x"]}] * 2)
    done = prep("classifier", "train", "--data", data, "--data", lists, "--out", tmp_path / "m.bin", "--epoch", "1")
    assert done.exit_code == 0, done.output
    assert (
        "skipped 3 records of" in done.output
        and "mixed.jsonl that cannot be used (bad-label 2, no-label 1)" in done.output
    )
    assert "skipped 2 records of" in done.output and "(bad-label 2)" in done.output
    counts = json.loads((tmp_path / "m.bin.json").read_text())["counts"]
    assert {label: c["available"] for label, c in counts.items()} == {"x": 20, "y": 20}


def test_eval_errors_are_one_line(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b c", "label": "x"}])
    not_model = tmp_path / "notes.bin"
    not_model.write_text("hello, world\n")
    assert_one_line_error(prep("classifier", "eval", tmp_path / "none.bin", data), "none.bin")
    assert_one_line_error(prep("classifier", "eval", not_model, data), "notes.bin", "not a fastText model")


# -- metrics on hand-made cases --------------------------------------------------------------


def test_auc_of_perfect_inverted_and_tied_scores():
    positive = np.array([0, 0, 1, 1], dtype=bool)
    assert auc(np.array([0.1, 0.2, 0.8, 0.9]), positive) == 1.0
    assert auc(np.array([0.9, 0.8, 0.2, 0.1]), positive) == 0.0
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), positive) == 0.75
    assert auc(np.full(4, 0.5), positive) == 0.5  # all tied: chance
    # One positive ties one negative (counts 1/2): (1 + 0.5 + 1 + 1) / 4.
    assert auc(np.array([0.2, 0.5, 0.5, 0.9]), np.array([0, 1, 0, 1], dtype=bool)) == 0.875
    assert auc(np.array([0.1, 0.2]), np.array([1, 1], dtype=bool)) is None
    assert list(average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0]))) == [4.0, 1.0, 4.0, 2.0, 4.0]


def test_auc_matches_the_pairwise_definition():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 200) / 4  # many ties
    positive = rng.random(200) < 0.4
    pos, neg = scores[positive], scores[~positive]
    pairwise = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
    assert auc(scores, positive) == pytest.approx(pairwise, abs=1e-12)


def test_calibration_bins():
    table = calibration(np.array([0.05, 0.15, 0.1, 0.95, 1.0, 1.00001]), np.array([0, 1, 0, 1, 1, 1], dtype=bool))
    assert [row["count"] for row in table] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 3]
    assert table[1]["mean_predicted"] == 0.125 and table[1]["observed"] == 0.5
    assert table[9]["observed"] == 1.0 and table[9]["mean_predicted"] == pytest.approx(0.983333, abs=1e-6)
    assert table[2]["mean_predicted"] is None and (table[0]["low"], table[9]["high"]) == (0.0, 1.0)


def test_classification_metrics_per_label():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
    m = classification_metrics(["a", "a", "b", "b", "c"], probs, ["a", "b"], positive="a")
    assert m["documents"] == 5 and m["accuracy"] == 0.6
    assert m["labels"]["a"] == {"count": 2, "predicted": 3, "precision": 0.666667, "recall": 1.0, "f1": 0.8}
    assert m["labels"]["b"] == {"count": 2, "predicted": 2, "precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert m["labels"]["c"] == {"count": 1, "predicted": 0, "precision": None, "recall": 0.0, "f1": None}
    assert m["auc"] == pytest.approx(1.0) and m["calibration"]["of"] == "P(a)"
    three = classification_metrics(["a", "b", "c"], np.eye(3), ["a", "b", "c"], positive="a")
    assert three["auc"] is None and three["accuracy"] == 1.0 and three["calibration"]["of"] == "P(top label)"
    assert positive_label(["neg", "pos"]) == "neg" and positive_label(["negative", "positive"]) == "positive"
    assert positive_label(["x", "y"], recorded="y") == "y"
    with pytest.raises(ValueError, match="not a label"):
        positive_label(["x", "y"], wanted="z")


# -- sampling and shuffling --------------------------------------------------------------------


def test_max_per_label_keeps_the_smallest_hashes_whatever_the_order():
    ids = [f"doc-{i}" for i in range(5000)]
    labels = ["a" if i % 3 else "b" for i in range(5000)]
    hashes = id_hashes(pa.array(ids))
    expected = set()
    for label in "ab":
        mine = [i for i in range(5000) if labels[i] == label]
        expected |= {mine[j] for j in np.argsort(hashes[mine])[:700]}
    for seed in range(3):
        order = list(range(5000))
        random.Random(seed).shuffle(order)
        quota = Quota(700)
        batches = [order[i : i + 333] for i in range(0, 5000, 333)]
        for batch in batches:
            quota.add([labels[i] for i in batch], hashes[batch])
        selector = quota.selector()
        picked = {
            i
            for batch in batches
            for i, keep in zip(batch, selector.take([labels[i] for i in batch], hashes[batch]))
            if keep
        }
        assert picked == expected


def test_duplicate_ids_never_exceed_the_quota():
    quota = Quota(3)
    hashes = id_hashes(pa.array(["same"] * 5 + ["other"]))
    quota.add(["a"] * 6, hashes)
    assert quota.selector().take(["a"] * 6, hashes).sum() == 3


def test_shuffled_lines_spill_and_merge_in_key_order(tmp_path):
    pairs = [(random.Random(i).randrange(1 << 64), f"line {i}") for i in range(2000)] + [(7, "tie 1"), (7, "tie 2")]
    outputs = []
    for run_bytes in (1 << 30, 4096):  # one run in memory; many spilled runs
        lines = ShuffledLines(tmp_path / "model.bin", run_bytes=run_bytes)
        for key, line in pairs:
            lines.add(key, line)
        path = lines.close()
        outputs.append(path.read_text())
        path.unlink()
    assert outputs[0] == outputs[1]
    assert outputs[0].splitlines() == [line for _, line in sorted(pairs, key=lambda p: p[0])]
    assert list(tmp_path.iterdir()) == []


def test_a_model_rewritten_in_place_is_loaded_again(tmp_path):
    """Loading is cached per process, but by the file's version, not its name alone."""
    import fasttext

    from pipeline.formats import fasttext_model

    def train(label: str) -> None:
        data = tmp_path / "train.txt"
        data.write_text("".join(f"__label__{label} word{i} text\n__label__other filler{i}\n" for i in range(20)))
        fasttext.train_supervised(str(data), epoch=1, dim=4, bucket=1000, thread=1, verbose=0).save_model(str(path))

    path = tmp_path / "m.bin"
    train("first")
    assert "first" in fasttext_model.labels(fasttext_model.load(str(path)))
    train("second")
    assert "second" in fasttext_model.labels(fasttext_model.load(str(path)))


@pytest.mark.parametrize(
    "sidecar, message",
    [
        ("{not json", "m.bin.json: not JSON"),
        ("[1]", "m.bin.json: the file is an array, expected an object"),
        ('{"positive_label": 1}', "m.bin.json: positive_label is an integer, expected a string or null"),
        (None, "m.bin.json: cannot read it (a FIFO (named pipe), not a regular file)"),
    ],
)
def test_eval_on_a_damaged_sidecar_is_one_line_naming_it(tmp_path, sidecar, message):
    """The sidecar sits beside the model the user names: read bare, a FIFO there hung the
    command and damage was a traceback or a JSON error naming no file."""
    model = tmp_path / "m.bin"
    model.write_bytes((REPO / "stages" / "models" / "lid.176.ftz").read_bytes())
    if sidecar is None:
        os.mkfifo(sidecar_path(model))
    else:
        sidecar_path(model).write_text(sidecar)
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "hello there my friend", "label": "en"}])
    result = CliRunner().invoke(main, ["classifier", "eval", str(model), str(data)])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"Error: {sidecar_path(model)}") and message in result.output, result.output
