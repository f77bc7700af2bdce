"""`prep mix search` and `prep ablate` used as a new user uses them, mistakes included: each
mistake is one line the user can act on, refused before any training when it can be, and
an interrupted or damaged search resumes without training a finished trial again.

The runs are small slices of the shared corpora (web pages, Python, GSM8K) and the eval
text is held-out prose (US speeches); trials are a few steps of the tiny preset."""

from __future__ import annotations

import gzip
import json
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA

from pipeline.ablate import ablation
from pipeline.ablate.ablation import AblationOptions, run_ablation
from pipeline.ablate.data import AblationDataError
from pipeline.ablate.evalsets import EvalSetError
from pipeline.ablate.evaltexts import file_texts, training_inputs
from pipeline.ablate.multiple_choice import read_questions
from pipeline.ablate.trial import run_trial
from pipeline.commands.main import main
from pipeline.formats.experiments import read_ledger
from pipeline.mix.inventory import take_inventory
from pipeline.mixsearch import search as search_module
from pipeline.mixsearch import trials as trials_module
from pipeline.mixsearch.search import SearchOptions, run_search
from pipeline.mixsearch.trials import TrialSettings, runs_key
from pipeline.text.tokenizers import load_tokenizer

TOKENS = 8_192  # four steps of the tiny preset's 16 x 128


def _head(path: Path, limit: int) -> list[dict]:
    """The first documents of a shared corpus, ``limit`` bytes of text in all (none over 20,000)."""
    rows, size = [], 0
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            text = json.loads(line)["text"]
            if len(text) <= 20_000:
                rows.append({"id": f"{path.name}-{index}", "text": text})
                size += len(text.encode("utf-8"))
            if size >= limit:
                break
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _build(root: Path, name: str, source: str, input_name: str) -> Path:
    config = root / f"{name}.toml"
    config.write_text(
        f'[sources.{source}]\npaths = ["{input_name}"]\n[[stages]]\nname = "tokenize"\ntokenizer = "gpt2"\n'
    )
    built = CliRunner().invoke(main, ["run", str(config), "--out", str(root / name), "-q"])
    assert built.exit_code == 0, built.output
    return root / name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Runs of web pages, Python and GSM8K; a run whose one input is empty (a source of no
    tokens); a second run with a source named ``web``; and held-out prose to evaluate on."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    root = tmp_path_factory.mktemp("hostile_search")
    slices = {
        "web": _head(SHARED_DATA / "web" / "web_gold.jsonl.gz", 120_000),
        "code": _head(SHARED_DATA / "code" / "python_stdlib.jsonl.gz", 100_000),
        "math": _head(SHARED_DATA / "math" / "gsm8k.jsonl.gz", 100_000),
        "zero": [],
    }
    paths = {}
    for name, rows in slices.items():
        _write(root / f"{name}.jsonl", rows)
        paths[name] = _build(root, f"run-{name}", name, f"{name}.jsonl")
    news = _head(SHARED_DATA / "web" / "dolma_ccmain_20190717_00140.jsonl.gz", 60_000)
    _write(root / "news.jsonl", news)
    paths["web2"] = _build(root, "run-web2", "web", "news.jsonl")
    paths["eval"] = _write(root / "prose.jsonl", _head(SHARED_DATA / "eval" / "us_speeches.jsonl.gz", 40_000))
    paths["root"] = root
    return paths


def _settings(corpus: dict[str, Path], out: Path, runs=("web", "code", "math"), evals=None) -> TrialSettings:
    evals = evals or [corpus["eval"]]
    return TrialSettings(
        runs=[corpus[name] for name in runs],
        out=out,
        tokens=TOKENS,
        eval_files=evals,
        weights={f"eval:{path.name}": 1.0 for path in evals},
        eval_tokens=1024,
        device="cpu",
        threads=1,
        workers=0,
    )


@pytest.fixture
def trainings(monkeypatch) -> list[str]:
    """The DATA of every trial trained from here on (the ledger's reads are not counted)."""
    trained = []

    def counted(plan, *args, **kwargs):
        trained.append(plan.data.name)
        return run_trial(plan, *args, **kwargs)

    monkeypatch.setattr(ablation, "run_trial", counted)
    return trained


def _search(corpus, *words: str, out: Path) -> tuple[int, str]:
    base = ["mix", "search", *(str(corpus[name]) for name in ("web", "code", "math"))]
    options = ["--trials", "4", "--tokens", str(TOKENS), "--eval-tokens", "1024", "--threads", "1", "--out", str(out)]
    result = CliRunner().invoke(main, [*base, *options, *words])
    return result.exit_code, result.output


def test_mistakes_in_the_arguments_are_refused_in_one_line_before_any_training(corpus, tmp_path, trainings):
    """Each mistake is found before the first trial and nothing is written: more --trials than
    the sampler draws, weights that leave nothing to minimize, a typo in --baseline, two eval
    files of one name, an epoch limit no mixture meets, a --prior that forgets sources, runs
    of one source, an --out that is a user's folder."""
    eval_file = str(corpus["eval"])
    (tmp_path / "other").mkdir()
    twin = shutil.copy(corpus["eval"], tmp_path / "other" / corpus["eval"].name)
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    cases = {
        "--trials 2,000,000: give 4 to 1,048,576": ["--trials", "2000000", "--eval", eval_file],
        "every --eval file has weight 0": ["--eval", f"{eval_file}:0"],
        "--baseline: unknown source 'nope'": ["--eval", eval_file, "--baseline", "--nope 0.5"],
        "--baseline: weights sum to 1.4, above 1": ["--eval", eval_file, "--baseline", "--web 0.7 --code 0.7"],
        "would both be eval set eval:prose.jsonl": ["--eval", eval_file, "--eval", str(twin)],
        "raise --max-epochs or lower --target-tokens": ["--eval", eval_file, "--max-epochs", "0.1"],
        "--prior names no share for code, math, so every trial": ["--eval", eval_file, "--prior", "--web 1"],
    }
    for expected, words in cases.items():
        out = tmp_path / f"search-{len(list(tmp_path.iterdir()))}"
        code, output = _search(corpus, *words, out=out)
        assert code == 1 and expected in output and "Traceback" not in output, (expected, output)
        assert output.count("Error:") == 1 and not out.exists(), output
    single = CliRunner().invoke(
        main,
        ["mix", "search", str(corpus["web"]), str(corpus["zero"]), "--eval", eval_file, "-o", str(tmp_path / "one")],
    )
    assert single.exit_code == 1 and "one source with tokens (web): there is no mixture to search" in single.output
    code, output = _search(corpus, "--eval", eval_file, out=users)
    assert code == 1 and "--out " in output and "not a prep mix search (it holds notes.txt)" in output
    assert sorted(p.name for p in users.iterdir()) == ["notes.txt"] and (users / "notes.txt").read_text() == "mine"
    assert trainings == []


def test_eval_files_with_nothing_to_read_are_named_with_their_first_bad_line(corpus, tmp_path, trainings):
    empty, broken = tmp_path / "empty.jsonl", tmp_path / "broken.jsonl"
    empty.write_text("")
    broken.write_text('{"text": \n[1, 2]\n')
    for path, expected in ((empty, "the file is empty"), (broken, "broken.jsonl line 1: bad-input:broken-json")):
        code, output = _search(corpus, "--eval", str(path), out=tmp_path / f"search-{path.stem}")
        assert code == 1 and expected in output and "Traceback" not in output, output
        assert not (tmp_path / f"search-{path.stem}").exists()  # refused before the first trial's mixture
    assert trainings == []


def test_skipped_lines_of_an_eval_file_are_named_and_multiple_choice_rows_explained(corpus, tmp_path):
    """An --eval file that mixes prose and multiple-choice rows keeps the prose and names
    each other row by its line; --eval-mc rows that cannot be scored are named too."""
    mixed = _write(tmp_path / "mixed.jsonl", [{"text": "The union is strong and the people are free."}])
    with mixed.open("a") as lines:
        lines.write('{"question": "2 + 2?", "choices": ["4", "5"], "answer": 0}\nnot json\n{"text": 7}\n')
    chosen = file_texts(mixed, load_tokenizer("gpt2"), 1, 1000)
    assert chosen.texts == ["The union is strong and the people are free."] and chosen.skipped == 3
    assert sorted(chosen.problems) == [
        "mixed.jsonl line 2: bad-input:missing-text",
        "mixed.jsonl line 3: bad-input:broken-json",
        "mixed.jsonl line 4: bad-input:non-string-text",
    ]
    rows = [
        {"question": "The sky is", "choices": ["blue", "green"], "answer": 0},
        {"question": "Out of range", "choices": ["a", "b"], "answer": 2},
        {"question": "Negative", "choices": ["a", "b"], "answer": -1},
        {"question": "No choices", "choices": [], "answer": 0},
        {"question": "Not strings", "choices": [1, 2], "answer": 0},
        {"question": "One choice", "choices": ["only"], "answer": 0},
        {"question": "An empty choice", "choices": ["", "x"], "answer": 1},
        {"question": "A true answer", "choices": ["a", "b"], "answer": True},
        {"text": "plain prose, no question"},
    ]
    questions, skipped, problems = read_questions(_write(tmp_path / "mc.jsonl", rows))
    assert [q.context for q in questions] == ["The sky is"] and skipped == 8
    assert problems == [
        "mc.jsonl line 2: answer 2 is not one of the 2 choices",
        "mc.jsonl line 3: answer -1 is not one of the 2 choices",
        *[
            f"mc.jsonl line {n}: no choices (endings, choices or sol1, sol2: two or more non-empty strings)"
            for n in (4, 5, 6)
        ],
    ]


def test_an_eval_file_that_is_a_training_input_is_called_out(corpus):
    warned = training_inputs([corpus["eval"], corpus["root"] / "code.jsonl"], [corpus["web"], corpus["code"]])
    assert len(warned) == 1 and "code.jsonl is the training input code.jsonl of" in warned[0]
    assert "(source code): its loss measures memorization" in warned[0]


def test_a_search_over_an_empty_source_a_shared_name_and_a_contaminated_eval_says_so(corpus, tmp_path, trainings):
    """A source with no tokens is left out (not a cryptic refusal of the first trial), two
    runs of one source name are pooled and the user told, an eval file that is a training
    input is called out; the search still ends with a prep mix command that prep mix accepts."""
    evals = [corpus["eval"], corpus["root"] / "web.jsonl"]
    settings = _settings(corpus, tmp_path / "search", runs=("web", "code", "zero", "web2"), evals=evals)
    said = []
    result = run_search(SearchOptions(trials=4, settings=settings), progress=said.append)
    assert result.sources == ["code", "web"] and len(trainings) == 4
    notes = "\n".join(result.notes)
    assert "source 'zero' has no tokens: left out of the search (share 0)" in notes
    assert "source 'web' is in 2 runs (" in notes and "rename one in its run's config" in notes
    assert "--eval " in notes and "web.jsonl is the training input web.jsonl of" in notes
    assert sum("is the training input" in line for line in said) >= 1
    described = json.loads((tmp_path / "search" / "search.json").read_text())
    assert described["notes"] == result.notes
    words = shlex.split(result.command)
    planned = CliRunner().invoke(main, [*words[1:-2], "--dry-run"])
    assert planned.exit_code == 0, planned.output


def test_a_search_interrupted_in_each_phase_resumes_without_training_a_finished_trial(
    corpus, tmp_path, trainings, monkeypatch
):
    """Killed while writing a trial's mixture, during the fit and during the validation: each
    time the search resumes, trains what was not finished and nothing that was; a report of
    the half-finished search is drawn from its ledger."""
    options = SearchOptions(trials=4, settings=_settings(corpus, tmp_path / "search"), seeds=2)
    counted = ablation.run_trial  # the trainings fixture's counter
    real_write_mix, real_objective = trials_module.write_mix, search_module.Objective

    def killed_while_writing(folder, description, order):
        real_write_mix(folder, description, order)
        (Path(folder) / "mix.json").unlink()  # as if killed before the manifest, written last
        raise KeyboardInterrupt

    writes = [0]

    def write_then_die(folder, description, order):
        writes[0] += 1
        (killed_while_writing if writes[0] == 3 else real_write_mix)(folder, description, order)

    monkeypatch.setattr(trials_module, "write_mix", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        run_search(options, progress=lambda line: None)
    assert len(trainings) == 2 and len(read_ledger(tmp_path / "search" / "ledger")) == 2
    monkeypatch.setattr(trials_module, "write_mix", real_write_mix)
    report = CliRunner().invoke(main, ["report", str(tmp_path / "search"), "-o", str(tmp_path / "half.html")])
    assert report.exit_code == 0 and "a mix search cut short (no search.json)" in report.output
    assert "mix-" in (tmp_path / "half.html").read_text()  # the finished trials, by their mixtures

    def fit_dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search_module, "Objective", fit_dies)
    with pytest.raises(KeyboardInterrupt):
        run_search(options, progress=lambda line: None)
    assert len(trainings) == 4 and not (tmp_path / "search" / "search.json").exists()
    monkeypatch.setattr(search_module, "Objective", real_objective)

    def validation_dies(plan, *args, **kwargs):
        if len(trainings) == 6:
            raise KeyboardInterrupt  # the third validation trial
        trainings.append(plan.data.name)
        return run_trial(plan, *args, **kwargs)

    monkeypatch.setattr(ablation, "run_trial", validation_dies)
    with pytest.raises(KeyboardInterrupt):
        run_search(options, progress=lambda line: None)
    finished = list(trainings)
    monkeypatch.setattr(ablation, "run_trial", counted)
    result = run_search(options, progress=lambda line: None)
    assert result.trained == 2 and len(trainings) == 8 and trainings[:6] == finished
    assert sorted(trainings[4:]) == ["natural", "natural", "proposed", "proposed"]
    assert len(read_ledger(tmp_path / "search" / "ledger")) == 8 and result.verdict
    again = run_search(options, progress=lambda line: None)
    assert again.trained == 0 and again.command == result.command


def test_a_damaged_trial_record_is_named_with_what_to_do_and_only_that_trial_is_trained_again(
    corpus, tmp_path, trainings
):
    options = SearchOptions(trials=4, settings=_settings(corpus, tmp_path / "search"))
    first = run_search(options, progress=lambda line: None)
    damaged = sorted((tmp_path / "search" / "ledger").iterdir())[0]
    damaged.write_text('{"format": "prep-ablation-trial", "version": 1, "trial": ')
    code, output = _search(corpus, "--eval", str(corpus["eval"]), "--eval-tokens", "1024", out=tmp_path / "search")
    assert code == 1 and str(damaged) in output and "delete that file to train" in output, output
    assert "Traceback" not in output and damaged.exists()
    damaged.unlink()
    again = run_search(options, progress=lambda line: None)
    assert again.trained == 1 and len(trainings) == 5
    assert np.array_equal(again.shares, first.shares)


def test_a_run_rebuilt_in_place_gets_new_trial_mixtures(corpus, tmp_path):
    """A trial mixture is keyed by what the runs hold: a run rebuilt with other documents
    must not resume onto mixtures planned from its old shards."""
    root = tmp_path
    shutil.copy(corpus["root"] / "math.jsonl", root / "math.jsonl")
    run = _build(root, "run", "math", "math.jsonl")
    before = runs_key(take_inventory([run]))
    assert runs_key(take_inventory([run])) == before  # the same runs, the same key
    rows = [json.loads(line) for line in (root / "math.jsonl").read_text().splitlines()]
    _write(root / "math.jsonl", rows[: len(rows) // 2])
    shutil.rmtree(run)
    _build(root, "run", "math", "math.jsonl")
    assert runs_key(take_inventory([run])) != before
    settings = _settings(corpus, root / "search")
    folders = {trials_module.trial_folder(replace(settings, runs_key=key), ["math"], np.ones(1)) for key in ("a", "b")}
    assert len(folders) == 2


def _ablate(corpus, tmp_path, datas, **options) -> AblationOptions:
    return AblationOptions(
        data=datas, out=tmp_path / "ablation", tokens=2048, eval_tokens=1024, eval_points=1,
        eval_files=[corpus["eval"]], device="cpu", threads=1, workers=0, **options,
    )  # fmt: skip


def test_ablate_refuses_the_same_data_twice_and_data_without_tokens(corpus, tmp_path, trainings):
    copy = shutil.copytree(corpus["web"], tmp_path / "copy")
    for datas, expected in (
        ([corpus["web"], corpus["web"]], "holds the same tokens as"),
        ([corpus["web"], copy], f"{copy} holds the same tokens as {corpus['web']}: give each DATA once"),
        ([corpus["web"], corpus["zero"]], "no tokens (were all its documents dropped?): nothing to train on"),
    ):
        with pytest.raises(
            AblationDataError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
        ):
            run_ablation(_ablate(corpus, tmp_path, datas, held_out=0.2), progress=lambda line: None)
    code = CliRunner().invoke(main, ["ablate", str(corpus["web"]), str(corpus["zero"]), "--out", str(tmp_path / "a")])
    assert code.exit_code == 1 and "nothing to train on" in code.output and "Traceback" not in code.output
    assert trainings == []


def test_a_data_holding_out_nothing_is_refused_only_when_its_held_out_set_is_weighed(corpus, tmp_path, trainings):
    """prep mix search's small trial mixtures may hold out no document: their held-out sets
    weigh nothing, so the trial goes on without one instead of telling the user to raise a
    --held-out that prep mix search does not have."""
    datas = [corpus["math"]]
    with pytest.raises(EvalSetError, match="no document of .* is held out; raise --held-out"):
        run_ablation(_ablate(corpus, tmp_path, datas, held_out=1e-9), progress=lambda line: None)
    said = []
    result = run_ablation(_ablate(corpus, tmp_path, datas, held_out=1e-9, held_out_weight=0.0), progress=said.append)
    assert any("is held out, so it has no held-out set" in line for line in said)
    assert list(result.records[0]["final"]) == ["eval:prose.jsonl"] and trainings == ["run-math"]
