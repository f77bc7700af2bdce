"""The ``decontaminate`` stage on real data: GSM8K's test questions planted, verbatim and
lightly edited, into real math (Stacks Project) and web pages are caught; its train
questions, planted the same way, are not (when only the test split is the benchmark);
clean real documents pass untouched; cut mode keeps the paragraphs it did not match;
a bad benchmark file is one clear error; and the stage runs through ``prep run``.

What it promises (stages/decontaminate/stage.py): a document sharing ``min_matches``
word 13-grams with a benchmark, words normalised (lower-case, punctuation deleted,
whitespace splits), is dropped with the benchmark's name as reason and a JSON detail
naming the example and the n-gram; ``cut`` removes only the matched paragraphs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import REPO, SHARED_DATA, make_batch, write_config, write_jsonl

from pipeline.commands.main import main
from stages.decontaminate import Decontaminate
from stages.decontaminate.kernels import words

pytestmark = pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data is not present")


def _jsonl(relative: str, limit: int | None = None) -> list[dict]:
    rows = []
    with gzip.open(SHARED_DATA / relative, "rt", encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if limit is not None and len(rows) >= limit:
                break
    return rows


@pytest.fixture(scope="module")
def gsm8k():
    rows = _jsonl("math/gsm8k.jsonl.gz")
    return {
        "rows": rows,
        "test": [(i, r) for i, r in enumerate(rows) if r["split"] == "test"],
        "train": [(i, r) for i, r in enumerate(rows) if r["split"] == "train"],
    }


@pytest.fixture(scope="module")
def hosts():
    """Real documents: Stacks Project sections (LaTeX) and web pages (gold main text)."""
    math = [r["text"] for r in _jsonl("math/stacks_project_sections.jsonl.gz", 200)]
    web = [r["text"] for r in _jsonl("web/web_gold.jsonl.gz", 200)]
    cc = [r["text"] for r in _jsonl("web/dolma_ccmain_20190717_00140.jsonl.gz", 100)]
    return {"math": math, "web": web, "cc": cc}


def benchmark(**extra) -> dict:
    return {
        "name": "gsm8k",
        "path": str(SHARED_DATA / "math/gsm8k.jsonl.gz"),
        "fields": ["question", "answer"],
        "filter": {"split": "test"},
        **extra,
    }


@pytest.fixture(scope="module")
def stage():
    return Decontaminate(Decontaminate.Options(benchmarks=[benchmark()]))


def plant(host: str, passage: str) -> str:
    """``passage`` as a paragraph of its own in the middle of ``host``."""
    paragraphs = host.split("\n\n")
    middle = len(paragraphs) // 2
    return "\n\n".join(paragraphs[:middle] + [passage] + paragraphs[middle:])


def reformat_numbers(text: str) -> str:
    """1000 -> 1,000 and 1,000 -> 1000."""

    def swap(m: re.Match) -> str:
        digits = m.group().replace(",", "")
        return digits if "," in m.group() else f"{int(digits):,}"

    return re.sub(r"\d{1,3}(?:,\d{3})+|\d{4,}", swap, text)


def rewrap(text: str, rng: random.Random) -> str:
    """Every space becomes one of: two spaces, a newline, a space and a newline, a tab."""
    return re.sub(" ", lambda _: rng.choice(["  ", "\n", " \n", "\t", " "]), text)


def drop_a_sentence(text: str) -> str:
    sentences = re.split(r"(?<=[.?!])\s+", text.strip())
    if len(sentences) < 2:
        return text
    del sentences[len(sentences) // 2 - (len(sentences) % 2 == 0)]
    return " ".join(sentences)


def shares_13_gram(text: str, original: str) -> bool:
    """Plain Python over word tuples: whether ``text`` holds 13 consecutive words of ``original``."""
    w, o = words(text), words(original)
    grams = {tuple(o[j : j + 13]) for j in range(len(o) - 12)}
    return any(tuple(w[j : j + 13]) in grams for j in range(len(w) - 12))


def run(stage: Decontaminate, texts: list[str]):
    return stage.process(make_batch(texts), "web")


def flagged(out) -> np.ndarray:
    if out.drop_reason is None:
        return np.zeros(out.batch.num_rows, bool)
    return ~np.asarray(out.drop_reason.is_null().to_numpy(zero_copy_only=False))


# --- normalisation ----------------------------------------------------------------------


def test_words_are_lowercased_with_punctuation_deleted_and_numbers_unformatted():
    assert words("Hello, World! It's  $1,000.\n1\u00a0000 and 1000") == [
        "hello",
        "world",
        "its",
        "1000",
        "1000",
        "and",
        "1000",
    ]
    assert words("Ünïcode — ΣΟΦΙΑ “quoted” 😀") == ["ünïcode", "σοφια", "quoted"]


# --- recall: GSM8K test questions planted into real documents ---------------------------


def test_planted_test_questions_are_caught_verbatim_and_lightly_edited(stage, gsm8k, hosts):
    rng = random.Random(18)
    with_numbers = [(i, r) for i, r in gsm8k["test"] if re.search(r"\d{4,}|\d,\d{3}", r["question"])]
    chosen = rng.sample(gsm8k["test"], 50)
    variants = {
        "verbatim": [(i, r["question"]) for i, r in chosen],
        "numbers reformatted": [(i, reformat_numbers(r["question"])) for i, r in rng.sample(with_numbers, 50)],
        "whitespace and newlines": [(i, rewrap(r["question"], rng)) for i, r in chosen],
        "one sentence dropped": [(i, drop_a_sentence(r["question"])) for i, r in chosen],
    }
    host_docs = hosts["math"][:25] + hosts["web"][:25]
    recall, possible = {}, {}
    for name, planted in variants.items():
        assert name != "numbers reformatted" or all(q != gsm8k["rows"][i]["question"] for i, q in planted)
        out = run(stage, [plant(host_docs[k], q) for k, (_, q) in enumerate(planted)])
        hit = flagged(out)
        recall[name] = hit.mean()
        # What any 13-gram matcher could find: the variant still shares a 13-gram with its original.
        truth = np.array([shares_13_gram(q, gsm8k["rows"][i]["question"]) for i, q in planted])
        possible[name] = truth.mean()
        assert np.array_equal(hit, truth), name
        details = [json.loads(d) for d in out.detail.filter(pa.array(hit)).to_pylist()]
        assert all(d["benchmark"] == "gsm8k" and len(words(d["ngram"])) == 13 for d in details)
        named = [d["example"] for d in details]
        expected = [i for (i, _), h in zip(planted, hit) if h]
        assert np.mean(np.equal(named, expected)) >= 0.95  # the planted example itself, bar shared n-grams
    print("\nrecall over 50 planted GSM8K test questions:", {k: round(float(v), 3) for k, v in recall.items()})
    print("share that still holds a 13-gram of its question:", {k: round(float(v), 3) for k, v in possible.items()})
    assert recall["verbatim"] == recall["numbers reformatted"] == recall["whitespace and newlines"] == 1.0
    # Dropping a sentence can leave no run of 13 words of the original (a 23-word question
    # of two sentences); every variant that keeps one is caught (asserted above).
    assert recall["one sentence dropped"] >= 0.75


def test_train_questions_do_not_trigger_when_only_the_test_split_is_the_benchmark(stage, gsm8k, hosts):
    """Only a train question that truly shares a 13-gram with a test example (GSM8K has a
    few, found here by plain Python over word tuples) may match."""
    test_grams = set()
    for _, r in gsm8k["test"]:
        for field in ("question", "answer"):
            w = words(r[field])
            test_grams.update(tuple(w[j : j + 13]) for j in range(len(w) - 12))
    train = [r["question"] for _, r in gsm8k["train"]]
    truth = np.array([any(tuple(w[j : j + 13]) in test_grams for j in range(len(w) - 12)) for w in map(words, train)])
    hit = flagged(run(stage, train))
    assert np.array_equal(hit, truth), np.flatnonzero(hit != truth)
    assert truth.sum() <= 10  # a handful of real overlaps among 7,473
    rng = random.Random(7)
    sample = rng.sample([q for q, t in zip(train, truth) if not t], 100)
    docs = hosts["math"] + hosts["web"]
    assert not flagged(run(stage, [plant(docs[k], q) for k, q in enumerate(sample)])).any()


def test_clean_real_documents_are_untouched(stage, hosts):
    docs = hosts["math"] + hosts["web"] + hosts["cc"]
    out = run(stage, docs)
    assert not flagged(out).any()
    assert out.batch.column("text").to_pylist() == docs


# --- cut mode -----------------------------------------------------------------------------


def test_cut_removes_the_matched_paragraphs_and_keeps_the_rest_byte_for_byte(gsm8k, hosts):
    cut = Decontaminate(Decontaminate.Options(benchmarks=[benchmark()], mode="cut"))
    example = next(r for _, r in gsm8k["test"] if len(words(r["answer"])) >= 40)
    question, answer = example["question"], example["answer"]
    host = hosts["math"][5]
    planted = plant(host, question)
    doc_with_answer = planted + "\n\n" + answer
    only_question = "\n  \n" + question + "\n"
    out = run(cut, [planted, doc_with_answer, only_question, host])
    texts = out.batch.column("text").to_pylist()
    assert texts[0] == host
    assert host.startswith(texts[1]) and texts[1] == host.rstrip()  # a last paragraph goes with the break before it
    assert out.drop_reason.to_pylist() == [None, None, "gsm8k", None]
    assert out.changed == 2 and out.counters["decontaminate.cut_paragraphs"] == 3


# --- benchmark files ----------------------------------------------------------------------


def test_a_bad_benchmark_file_is_one_clear_error_naming_it(tmp_path):
    garbage = tmp_path / "evals.jsonl.gz"
    garbage.write_bytes(b"\x1f\x8b not really gzip")
    stage = Decontaminate(Decontaminate.Options(benchmarks=[{"name": "x", "path": str(garbage), "fields": ["q"]}]))
    with pytest.raises(ValueError, match=r"benchmark 'x': cannot read .*evals\.jsonl\.gz"):
        run(stage, ["text"])
    with pytest.raises(ValueError, match="does not exist"):
        Decontaminate.Options(benchmarks=[{"name": "x", "path": str(tmp_path / "missing.jsonl"), "fields": ["q"]}])
    with pytest.raises(ValueError, match="unknown key 'feilds'.*did you mean 'fields'"):
        Decontaminate.Options(benchmarks=[{"name": "x", "path": str(garbage), "feilds": ["q"]}])
    empty = write_jsonl(tmp_path / "other.jsonl", [{"prompt": "no field named q here"}])
    stage = Decontaminate(Decontaminate.Options(benchmarks=[{"name": "x", "path": str(empty), "fields": ["q"]}]))
    with pytest.raises(ValueError, match=r"other\.jsonl has no example with text in \['q'\]"):
        run(stage, ["text"])


def test_bad_rows_are_skipped_and_parquet_and_save_to_disk_folders_read(tmp_path, gsm8k):
    examples = [{"question": r["question"], "idx": f"t{i}"} for i, r in gsm8k["test"][:20]]
    lines = [json.dumps(e) for e in examples[:10]] + ["{not json", "[1, 2]", '{"question": 7}', ""]
    (tmp_path / "b.jsonl").write_text("\n".join(lines + [json.dumps(e) for e in examples[10:]]) + "\n")
    pq.write_table(pa.Table.from_pylist(examples), tmp_path / "b.parquet")
    folder = tmp_path / "saved"
    folder.mkdir()
    table = pa.Table.from_pylist(examples)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    for path, shift in ((tmp_path / "b.jsonl", 4), (tmp_path / "b.parquet", 0), (folder, 0)):
        bench = {"name": "b", "path": str(path), "fields": ["question"], "id": "idx"}
        stage = Decontaminate(Decontaminate.Options(benchmarks=[bench]))
        out = run(stage, [examples[15]["question"], "unrelated words " * 20])
        assert out.drop_reason.to_pylist() == ["b", None]
        assert json.loads(out.detail[0].as_py())["example"] == 15 + shift
        assert json.loads(out.detail[0].as_py())["id"] == examples[15]["idx"]
        assert stage.index.meta["benchmarks"][0]["bad_rows"] == (3 if shift else 0)
    assert [p.name for p in map(__import__("pathlib").Path, Decontaminate.files(stage.options))] == [
        "data-00000-of-00001.arrow",
        "state.json",
    ]


def gsm8k_config(path: Path, sources: str, stage_extra: str = "") -> Path:
    """A config of ``sources`` (TOML) through one decontaminate stage against GSM8K's test
    split; ``stage_extra``: more of the stage's table (a per-source override)."""
    return write_config(
        path,
        f'{sources}[[stages]]\nname = "decontaminate"\n{stage_extra}'
        f'[[stages.benchmarks]]\nname = "gsm8k"\npath = "{SHARED_DATA / "math/gsm8k.jsonl.gz"}"\n'
        'fields = ["question", "answer"]\nfilter = { split = "test" }\n',
    )


KILLER = """
import os, signal, sys
from pipeline.engine.run import run_pipeline
import stages.decontaminate.stage as stage

built = stage.build

def killing_build(work, specs, n):
    built(work, specs, n)  # the index written, its task's marker not yet
    os.kill(os.getpid(), signal.SIGKILL)

stage.build = killing_build
run_pipeline(sys.argv[1], sys.argv[2], workers=1, quiet=True)
"""


def _digest(out: Path) -> dict[str, str]:
    """Every file of the run folder but its timings, relative path -> sha256."""
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[:2] != ("stats", "cost") and p.name != "cost.json"
    }


def test_the_index_is_built_once_per_setting_before_the_units_and_a_kill_in_it_resumes(tmp_path, gsm8k, hosts):
    """The index is the stage's finalize (no map): one task per setting its sources need,
    before segment 0; the chain is not cut (the ledger stays ``.s0``); a run killed in the
    build resumes to the bytes of an uninterrupted one."""
    questions = [r["question"] for _, r in gsm8k["test"][:6]]
    for source, host in (("web", hosts["web"]), ("math", hosts["math"])):
        docs = [{"id": f"{source}-clean-{k}", "text": t} for k, t in enumerate(host[:6])]
        docs += [{"id": f"{source}-planted-{k}", "text": plant(host[10 + k], q)} for k, q in enumerate(questions)]
        write_jsonl(tmp_path / "in" / source / "a.jsonl", docs)
    sources = '[sources.web]\npaths = ["in/web/*.jsonl"]\n[sources.math]\npaths = ["in/math/*.jsonl"]\n'
    config = gsm8k_config(tmp_path / "c.toml", sources, "[stages.per_source.math]\nn = 8\n")
    clean = tmp_path / "clean"
    keep = "--keep-work"  # the indexes, looked at below and compared with the resumed run's
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(clean), "-w", "2", "-q", keep])
    assert result.exit_code == 0, result.output
    assert sorted(p.parent.name for p in (clean / "stats").glob("prepare-*/finalize.json")) == [
        "prepare-0-0",
        "prepare-0-1",
    ]
    assert len(list((clean / "work" / "decontaminate").glob("*/meta.json"))) == 2  # web's n = 13, math's n = 8
    assert sorted(p.name for p in (clean / "rejects").rglob("*.parquet")) == ["00000-a.jsonl.s0.parquet"] * 2
    assert len(pq.read_table(clean / "rejects")) == 12

    killed = tmp_path / "killed"
    (tmp_path / "killer.py").write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this tree's prep, not the one installed
    run = subprocess.run([sys.executable, str(tmp_path / "killer.py"), str(config), str(killed)], cwd=REPO, env=env)
    assert run.returncode == -signal.SIGKILL
    assert not list((killed / "stats").glob("prepare-*/finalize*.json"))
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(killed), "-w", "2", "-q", keep])
    assert result.exit_code == 0, result.output
    assert _digest(killed) == _digest(clean)


# --- through prep run ---------------------------------------------------------------------


def test_the_stage_runs_through_prep_run_with_a_toml_config(tmp_path, gsm8k, hosts):
    questions = [r["question"] for _, r in gsm8k["test"][:5]]
    docs = [{"id": f"clean-{k}", "text": t} for k, t in enumerate(hosts["web"][:20])]
    docs += [{"id": f"planted-{k}", "text": plant(hosts["math"][k], q)} for k, q in enumerate(questions)]
    write_jsonl(tmp_path / "in" / "a.jsonl", docs[::2])
    write_jsonl(tmp_path / "in" / "b.jsonl", docs[1::2])
    config = gsm8k_config(tmp_path / "c.toml", '[sources.web]\npaths = ["in/*.jsonl"]\n')
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(out), "-w", "1", "-q", "--keep-work"])
    assert result.exit_code == 0, result.output
    kept = set(pq.read_table(out / "docs").column("id").to_pylist())
    assert kept == {d["id"] for d in docs if d["id"].startswith("clean")}
    ledger = pq.read_table(out / "rejects").to_pylist()
    assert sorted(r["id"] for r in ledger) == [f"planted-{k}" for k in range(5)]
    assert {(r["stage"], r["reason"]) for r in ledger} == {("decontaminate", "gsm8k")}
    assert {json.loads(r["detail"])["example"] for r in ledger} == {i for i, _ in gsm8k["test"][:5]}
    state = json.loads((out / ".prep" / "run.json").read_text())
    assert str(SHARED_DATA / "math/gsm8k.jsonl.gz") in state["stage_files"]
    assert len(list((out / "work" / "decontaminate").glob("*/hashes.npy"))) == 1  # kept after the run

    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08garbage")
    config.write_text(config.read_text().replace(str(SHARED_DATA / "math/gsm8k.jsonl.gz"), str(broken)))
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out2"), "-w", "1", "-q"])
    assert result.exit_code != 0
    assert "broken.jsonl.gz" in result.output and "Traceback" not in result.output
