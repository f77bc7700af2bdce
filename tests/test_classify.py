"""The ``classify`` stage: fastText scores as columns, min_score and keep_top, exact and
deterministic keep_top selection (any worker count, after a kill), one-line config errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SHARED_DATA, write_config, write_jsonl

from pipeline.engine.config import ConfigError, load_config
from pipeline.engine.run import run_pipeline
from pipeline.kernels.hashing import id_hashes
from stages.classify import models, topk
from stages.classify.models import ModelSpec

LID = REPO / "stages" / "models" / "lid.176.ftz"
WORDS = "the a house garden river morning walked friend city market bread letter window quiet story old green".split()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A two-label fastText model trained here (math vs prose), deterministic with one thread."""
    import fasttext

    folder = tmp_path_factory.mktemp("tiny")
    rng = random.Random(0)
    lines = []
    for _ in range(400):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        lines.append(f"__label__math solve {a} x plus {b} equals {a + b} find x and the sum of {a} and {b}")
        lines.append("__label__prose " + " ".join(rng.choice(WORDS) for _ in range(12)))
    (folder / "train.txt").write_text("\n".join(lines) + "\n")
    model = fasttext.train_supervised(
        input=str(folder / "train.txt"), epoch=5, dim=8, minCount=1, thread=1, seed=0, verbose=0
    )
    model.save_model(str(folder / "tiny.bin"))
    return folder / "tiny.bin"


def _lingua(lang: str, count: int) -> list[str]:
    with gzip.open(SHARED_DATA / "langid" / "lingua_testdata.jsonl.gz", "rt") as f:
        rows = (json.loads(line) for line in f)
        texts = [r["text"] for r in rows if r["lang"] == lang and r["kind"] == "sentences"]
    return texts[:count]


def _model_table(name: str, path: Path, label: str, **threshold) -> str:
    extra = "".join(f"{key} = {value}\n" for key, value in threshold.items())
    return f'[[stages.models]]\nname = "{name}"\npath = "{path}"\nlabel = "{label}"\n{extra}'


def _read(folder: Path) -> list[dict]:
    files = sorted(folder.rglob("*.parquet")) if folder.exists() else []
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def _digest(out: Path) -> dict[str, str]:
    """Every output file but the timings, relative path -> sha256."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[:2] != ("stats", "cost") and p.name != "cost.json"
    }


# -- scoring ---------------------------------------------------------------------------------


def test_score_is_the_probability_of_the_label(tiny_model):
    spec = ModelSpec(name="math", path=str(tiny_model), label="math")
    texts = pa.array(["solve 3 x plus 4 equals 7 find x", "the old house by the\nriver", "", "  \n "])
    scores = models.score(spec, texts)
    assert scores.dtype == np.float32
    assert scores[0] > 0.5 > scores[1] and scores[2] == scores[3] == 0.0  # empty after preprocess: 0
    import fasttext

    model = fasttext.load_model(str(tiny_model))
    labels, probs = model.predict("the old house by the river", k=-1)
    assert scores[1] == np.float32(probs[list(labels).index("__label__math")])
    (spec,) = models.parse_models([{"name": "p", "path": str(tiny_model), "label": "__label__prose"}])
    prose = models.score(spec, texts)
    assert abs(float(prose[1]) + float(scores[1]) - 1.0) < 1e-4


def test_lid_scores_english_above_german(shared_data):
    spec = ModelSpec(name="english", path=str(LID), label="en")
    en = models.score(spec, pa.array(_lingua("en", 50)))
    de = models.score(spec, pa.array(_lingua("de", 50)))
    assert np.median(en) > 0.8 and np.median(de) < 0.05 and float(en.max()) <= 1.0


# -- selection -------------------------------------------------------------------------------


@pytest.mark.parametrize("gather", [1 << 22, 7])
def test_kth_best_matches_a_full_sort_with_ties(monkeypatch, gather):
    """Radix passes (a tiny gather limit) and a plain sort agree, ties and duplicate ids included."""
    monkeypatch.setattr(topk, "GATHER", gather)
    rng = np.random.default_rng(0)
    units = []
    for size in (40, 0, 25, 60):
        scores = rng.choice(np.array([0.0, 0.25, 0.5, 1.0, 0.9375], np.float32), size)
        hashes = rng.integers(0, 6, size).astype(np.uint64) << np.uint64(40)  # many equal id hashes
        units.append((topk.order_key(scores), hashes))
    total = sum(len(k) for k, _ in units)
    keys = np.concatenate([k for k, _ in units])
    hashes = np.concatenate([h for _, h in units])
    ordinals = np.concatenate([np.full(len(k), i) for i, (k, _) in enumerate(units)])
    rows = np.concatenate([np.arange(len(k)) for k, _ in units])
    order = np.lexsort((rows, ordinals, hashes, keys))
    for k in (1, 2, 17, 64, total - 1, total):
        t = topk.kth_best(lambda: iter(units), k, total)
        best = order[k - 1]
        assert (t.id_hash, t.unit, t.row) == (int(hashes[best]), int(ordinals[best]), int(rows[best]))
        kept = sum(
            int(topk.within(key, h, np.arange(len(key)), t, (i > t.unit) - (i < t.unit)).sum())
            for i, (key, h) in enumerate(units)
        )
        assert kept == k


# -- config ----------------------------------------------------------------------------------


def _config(tmp_path: Path, models_toml: str, extra: str = "") -> Path:
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "1", "text": "hello world"}])
    return write_config(
        tmp_path / "c.toml",
        f'[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "classify"\n{extra}{models_toml}',
    )


@pytest.mark.parametrize(
    "models_toml, message",
    [
        (_model_table("q", Path("/nonexistent/q.bin"), "hq"), "cannot read model /nonexistent/q.bin"),
        ("GARBAGE", "is not a fastText model"),
        ('[[stages.models]]\nname = "q"\npath = "LID"\n', "label must be a non-empty string"),
        (_model_table("q", LID, "en", min_score=0.5, keep_top=0.1), "set min_score or keep_top, not both"),
        (_model_table("q", LID, "en", keep_top=0), "keep_top must lie in (0, 1]"),
        (_model_table("q", LID, "en", min_score=1.5), "min_score must lie in [0, 1]"),
        (_model_table("q", LID, "en", keeptop=0.1), "did you mean 'keep_top'?"),
        (_model_table("q", LID, "en") + _model_table("q", LID, "de"), "two models are named 'q'"),
        (_model_table("q-1", LID, "en"), "name must be a letter"),
        ("", "classify needs at least one model"),
    ],
)
def test_config_mistakes_are_one_line_before_any_work(tmp_path, models_toml, message):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a model at all")
    models_toml = models_toml.replace("GARBAGE", _model_table("q", garbage, "hq")).replace("LID", str(LID))
    with pytest.raises(ConfigError) as error:
        load_config(_config(tmp_path, models_toml))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_model_path_is_one_line_from_the_command(tmp_path):
    config = _config(tmp_path, _model_table("quality", tmp_path / "missing.bin", "hq"))
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(config), "--out", str(tmp_path / "out"), "-q"],
        capture_output=True,
        text=True,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "missing.bin" in lines[0] and "cannot read model" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_label_the_model_lacks_is_refused_when_the_config_is_read(tmp_path, tiny_model):
    config = _config(tmp_path, _model_table("quality", tiny_model, "hq"))
    with pytest.raises(ConfigError) as error:
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    assert "no label 'hq'" in str(error.value) and "its labels: " in str(error.value)
    assert sorted(str(error.value).split("its labels: ")[1].split(", ")) == ["math", "prose"]
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="no label 'maths'; did you mean 'math'"):
        load_config(_config(tmp_path, _model_table("quality", tiny_model, "maths")))


# -- runs ------------------------------------------------------------------------------------


def test_min_score_drops_with_reason_and_detail(shared_data, tmp_path, tiny_model):
    en, de = _lingua("en", 30), _lingua("de", 20)
    records = [{"id": f"en-{i}", "text": t} for i, t in enumerate(en)] + [
        {"id": f"de-{i}", "text": t} for i, t in enumerate(de)
    ]
    write_jsonl(tmp_path / "web" / "a.jsonl", records)
    write_jsonl(tmp_path / "code" / "a.jsonl", [{"id": "c", "text": "Der Code ist hier."}])
    config = write_config(
        tmp_path / "c.toml",
        '[sources.web]\npaths = ["web/*.jsonl"]\n[sources.code]\npaths = ["code/*.jsonl"]\n'
        '[[stages]]\nname = "classify"\nskip_sources = ["code"]\n'
        + _model_table("english", LID, "en", min_score=0.5)
        + _model_table("math", tiny_model, "math"),  # a score column, no selection
    )
    (stage,) = load_config(config).stages
    assert not stage.is_global  # no keep_top: scored per document, no extra pass
    manifest = run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    kept = _read(tmp_path / "out" / "docs" / "web")
    ledger = _read(tmp_path / "out" / "rejects" / "web")
    assert {r["id"] for r in kept} | {r["id"] for r in ledger} == {r["id"] for r in records}
    assert all(r["english_score"] >= 0.5 and 0.0 <= r["math_score"] <= 1.0 for r in kept)
    assert len(kept) >= 28 and all(r["id"].startswith("en-") for r in kept)
    assert {r["reason"] for r in ledger} == {"classify:english"} and len(ledger) >= 21
    expected = models.score(ModelSpec("english", str(LID), "en"), pa.array([r["text"] for r in ledger]))
    for row, score in zip(ledger, expected):
        assert row["stage"] == "classify" and row["file"] == "a.jsonl"
        detail = json.loads(row["detail"])
        assert detail == {"score": detail["score"], "threshold": 0.5} and detail["score"] < 0.5
        assert np.float32(detail["score"]) == score
    schema = pq.read_schema(next((tmp_path / "out" / "docs" / "web").glob("*.parquet")))
    assert schema.field("english_score").type == pa.float32() == schema.field("math_score").type
    (code,) = _read(tmp_path / "out" / "docs" / "code")
    assert code["english_score"] is None and code["math_score"] is None
    assert manifest["stages"]["classify"]["rejected"] == {"classify:english": len(ledger)}
    # a reason that already names its stage is not prefixed again (not classify:classify:english)
    assert manifest["sources"]["web"]["rejected_by"] == {"classify:english": len(ledger)}


# A run over real web pages (5 files) and a mixed source (2 files, English and German, with
# copies of one id in both files): keep_top per source, with per-source fractions.
# A third source ties on the score everywhere: one sentence under 20 ids, each id in both of
# its files, so the id hash and then the unit decide (11 of 40: one id keeps only one copy).
KEEP_TOP = {"web": {"english": 0.1, "math": 0.5}, "mixed": {"english": 0.25}, "same": {"english": 0.275}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_model):
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    root = tmp_path_factory.mktemp("corpus")
    with gzip.open(SHARED_DATA / "web" / "web_gold.jsonl.gz", "rt") as f:
        pages = [json.loads(next(f)) for _ in range(320)]
    for i in range(4):
        write_jsonl(root / "web" / f"gold{i}.jsonl", [{"id": p["id"], "text": p["text"]} for p in pages[i::4]])
    with gzip.open(SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz", "rt") as f:
        dolma = [json.loads(line) for line in f]
    dolma = [{"id": d["id"], "text": d["text"]} for d in dolma if d["text"].strip()][:80]
    write_jsonl(root / "web" / "dolma.jsonl", dolma)
    en, de = _lingua("en", 120), _lingua("de", 80)
    mixed = [{"id": f"en-{i}", "text": t} for i, t in enumerate(en)] + [
        {"id": f"de-{i}", "text": t} for i, t in enumerate(de)
    ]
    random.Random(1).shuffle(mixed)
    twin = {"id": "twin", "text": en[0]}  # one id twice: equal score and hash, ordered by unit
    write_jsonl(root / "mixed" / "m0.jsonl", [*mixed[:100], twin])
    write_jsonl(root / "mixed" / "m1.jsonl", [twin, *mixed[100:]])
    same = [{"id": f"s{i}", "text": en[1]} for i in range(20)]
    write_jsonl(root / "same" / "a.jsonl", same)
    write_jsonl(root / "same" / "b.jsonl", same[::-1])
    web_models = _model_table("english", LID, "en", keep_top=0.1) + _model_table(
        "math", tiny_model, "math", keep_top=0.5
    )
    mixed_models = (
        f'models = [{{name = "english", path = "{LID}", label = "en", keep_top = 0.25}},'
        f' {{name = "math", path = "{tiny_model}", label = "math"}}]\n'
    )
    config = write_config(
        root / "c.toml",
        "[run]\ngroup_bytes = 0\n"  # a unit per file: the kill test needs several units
        '[sources.web]\npaths = ["web/*.jsonl"]\n[sources.mixed]\npaths = ["mixed/*.jsonl"]\n'
        '[sources.same]\npaths = ["same/*.jsonl"]\n'
        f'[[stages]]\nname = "classify"\n{web_models}[stages.per_source.mixed]\n{mixed_models}'
        f'[stages.per_source.same]\nmodels = [{{name = "english", path = "{LID}", label = "en", keep_top = 0.275}}]\n',
    )
    assert load_config(config).stages[0].is_global  # keep_top: the whole-run phases
    run_pipeline(config, root / "w1", workers=1, quiet=True, keep_work=True)  # thresholds.json stays
    return root, config, tiny_model


def _expected_kept(root: Path, source: str, tiny_model: Path) -> list[str]:
    """The ids keep_top should keep, by a plain sort of every document's (score, id hash, unit, row)."""
    files = sorted((root / source).glob("*.jsonl"))  # unit names sort as the files do here
    docs = [(unit, row, json.loads(line)) for unit, f in enumerate(files) for row, line in enumerate(f.open())]
    ids = pa.array([d["id"] for _, _, d in docs])
    texts = pa.array([d["text"] for _, _, d in docs])
    kept = np.ones(len(docs), bool)
    for name, fraction in KEEP_TOP[source].items():
        spec = ModelSpec(name, str(LID if name == "english" else tiny_model), "en" if name == "english" else "math")
        keys = topk.order_key(models.score(spec, texts))
        order = np.lexsort(([r for _, r, _ in docs], [u for u, _, _ in docs], id_hashes(ids), keys))
        top = np.zeros(len(docs), bool)
        top[order[: math.ceil(fraction * len(docs) - 1e-9)]] = True
        kept &= top
    return sorted(d["id"] for (_, _, d), k in zip(docs, kept) if k)


def test_keep_top_keeps_exactly_the_fraction_of_each_source(corpus):
    root, _, tiny_model = corpus
    out = root / "w1"
    thresholds = json.loads((out / "work" / "global" / "1" / "thresholds.json").read_text())
    assert {s: {m: t["keep_top"] for m, t in v.items()} for s, v in thresholds.items()} == KEEP_TOP
    assert thresholds["web"]["english"]["documents"] == 400 and thresholds["web"]["english"]["keep"] == 40
    assert thresholds["mixed"]["english"]["keep"] == math.ceil(0.25 * 202) == 51
    kept = [r["id"] for r in _read(out / "docs" / "same")]
    assert len(kept) == 11 and sorted(kept.count(i) for i in set(kept)) == [1, 2, 2, 2, 2, 2]
    for source in KEEP_TOP:
        kept = _read(out / "docs" / source)
        ledger = _read(out / "rejects" / source)
        total = len(kept) + len(ledger)
        first = sum(r["reason"] == "classify:english" for r in ledger)  # the first model is always named
        assert total - first == math.ceil(KEEP_TOP[source]["english"] * total)
        assert sorted(r["id"] for r in kept) == _expected_kept(root, source, tiny_model)
        for row in ledger:
            detail = json.loads(row["detail"])
            name = row["reason"].removeprefix("classify:")
            assert detail["keep_top"] == KEEP_TOP[source][name]
            assert detail["score"] <= detail["threshold"] == np.float32(thresholds[source][name]["score"])


def test_keep_top_output_is_byte_identical_with_two_workers(corpus):
    root, config, _ = corpus
    run_pipeline(config, root / "w2", workers=2, quiet=True, keep_work=True)
    assert _digest(root / "w1") == _digest(root / "w2")


KILLER = """
import os, signal, sys
from pipeline.engine.run import run_pipeline
from stages.classify.stage import Classify

KILL_AT = sys.argv[3]
map_unit, finalize = Classify.map_unit, Classify.finalize
calls = []

def killing_map(self, batches, unit, work_dir):
    result = map_unit(self, batches, unit, work_dir)  # written, not yet committed
    calls.append(unit.unit)
    if KILL_AT == "map" and len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

def killing_finalize(self, work_dir):
    finalize(self, work_dir)  # thresholds written, no marker yet
    if KILL_AT == "finalize":
        os.kill(os.getpid(), signal.SIGKILL)

Classify.map_unit, Classify.finalize = killing_map, killing_finalize
run_pipeline(sys.argv[1], sys.argv[2], workers=1, quiet=True)
"""


def test_a_run_killed_in_the_global_phase_resumes_byte_identical(corpus):
    root, config, _ = corpus
    out = root / "killed"
    (root / "killer.py").write_text(KILLER)
    for kill_at in ("map", "finalize"):
        result = subprocess.run([sys.executable, str(root / "killer.py"), str(config), str(out), kill_at], cwd=REPO)
        assert result.returncode == -signal.SIGKILL, kill_at
        assert not (out / "manifest.json").exists()
    assert len(list((out / "stats" / "global-1-map").rglob("*.json"))) == 9  # every unit mapped
    assert not (out / "stats" / "global-1" / "finalize.json").exists()
    run_pipeline(config, out, workers=2, quiet=True, keep_work=True)
    assert not list(out.rglob(".*.tmp"))
    assert _digest(root / "w1") == _digest(out)
    assert os.path.exists(out / "manifest.json")


def test_a_model_replaced_before_a_resume_makes_it_another_run(tmp_path, tiny_model):
    """The run's fingerprint holds each model's sha256: scores of two models never mix."""
    model = tmp_path / "model.bin"
    shutil.copyfile(tiny_model, model)
    config = _config(tmp_path, _model_table("m", model, "math", min_score=0.5))
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)
    run_pipeline(config, tmp_path / "out", workers=1, quiet=True)  # the same model: resumes
    import fasttext

    # Another model with the same labels (one without ``math`` is refused when the config is read).
    other = fasttext.train_supervised(input=str(tiny_model.parent / "train.txt"), epoch=6, dim=8, thread=1, verbose=0)
    other.save_model(str(model))
    with pytest.raises(ConfigError, match="different models"):
        run_pipeline(config, tmp_path / "out", workers=1, quiet=True)


@pytest.mark.parametrize("keep", [8, 100, 4096, 200_000])
def test_a_model_cut_short_is_refused_before_fasttext_reads_it(tmp_path, keep):
    """fastText reads each dictionary word up to its NUL byte without checking for the end
    of the file: a model cut inside its dictionary would hang the run, not fail it."""
    cut = tmp_path / "cut.ftz"
    cut.write_bytes(LID.read_bytes()[:keep])
    with pytest.raises(ConfigError, match="cut short"):
        load_config(_config(tmp_path, _model_table("q", cut, "en")))
