"""Multiple-choice evals in `prep ablate`: the benchmark shapes read from a hand-made file,
malformed rows skipped with their line, per-character scoring checked by hand, and the
weighted objective."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import REPO

from pipeline.ablate.multiple_choice import MultipleChoiceError, choice_set, read_questions, score
from pipeline.ablate.trial import evaluate_choices
from pipeline.ablate.verdict import compare, objective, verdict_lines
from pipeline.commands.main import main
from pipeline.commands.options import WeightedFile

FIXTURE = REPO / "tests" / "data" / "multiple_choice.jsonl"
EOD = 9
IDS = {" ": 1, "a": 6, "b": 2, "x": 3}  # one token per character; label id k costs k bits


class CharTokenizer:
    def encode_batch(self, texts):
        ids = [IDS[c] for text in texts for c in text]
        return np.array(ids, dtype=np.int64), np.array([len(text) for text in texts], dtype=np.int64)


class BitsModel(torch.nn.Module):
    def label_log_probs(self, inputs, positions, labels):
        return -labels.float() * math.log(2)


def test_hellaswag_arc_and_piqa_shapes_are_read_and_malformed_rows_named_by_line():
    questions, skipped, problems = read_questions(FIXTURE)
    assert [len(q.choices) for q in questions] == [4, 4, 4, 2, 2, 2]
    assert [q.answer for q in questions] == [0, 0, 0, 1, 0, 0]
    assert questions[1].context == "She opened the umbrella because"  # HellaSwag's ctx_a + ctx_b
    assert questions[3].context == "What do people drink?" and questions[3].choices[1] == "water"  # ARC's own shape
    assert questions[4].choices == ["rub them with a towel.", "put them in a lake."]  # PIQA
    assert skipped == 3
    assert problems[0] == "multiple_choice.jsonl line 4: not JSON (JSONDecodeError)"
    assert problems[1] == "multiple_choice.jsonl line 8: no answer (one of label, answer, answerKey)"
    assert problems[2] == "multiple_choice.jsonl line 9: answer 5 is not one of the 2 choices"


def test_answers_int_refuses_and_json_python_cannot_parse_are_skipped_rows_not_a_crash(tmp_path):
    path = tmp_path / "odd.jsonl"
    answers = ("1", "\u00b2", "\u0661", "9" * 5000)
    rows = [json.dumps({"question": "Q?", "choices": ["a", "b"], "answer": answer}) for answer in answers]
    rows += ['{"question": "Q?", "choices": ["a", "b"], "answer": ' + "9" * 5000 + "}", "[" * 100_000]
    path.write_text("".join(row + "\n" for row in rows))
    questions, skipped, problems = read_questions(path)
    assert [q.answer for q in questions] == [1] and skipped == 5
    assert problems[0] == "odd.jsonl line 2: answer '\u00b2' is not one of the 2 choices"
    assert problems[3:] == ["odd.jsonl line 5: not JSON (ValueError)", "odd.jsonl line 6: not JSON (RecursionError)"]


def test_a_file_without_a_valid_question_is_refused_with_its_problems(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"ctx": "only a context"}\n\xff\xfe\n')
    with pytest.raises(MultipleChoiceError, match=r"bad.jsonl: no valid question \(bad.jsonl line 1: no choices"):
        read_questions(path)


def test_choices_are_ranked_by_log_likelihood_per_character(tmp_path):
    path = tmp_path / "mc.jsonl"
    rows = [{"ctx": "x", "endings": ["a", "bbbb"], "label": 1}, {"ctx": "x", "endings": ["a", "bbbb"], "label": 0}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    questions = choice_set(path, CharTokenizer(), {"eod_id": EOD, "bos_id": None}, seq_len=8)
    assert questions.labels[1, :6].tolist() == [3, 1, 2, 2, 2, 2]  # the context, then " bbbb"
    assert questions.continuation[1].tolist() == [False, True, True, True, True, True, False, False]
    scores = evaluate_choices(BitsModel(), questions, None, "cpu", torch.autocast("cpu", enabled=False))
    # By hand: " a" costs 1 + 6 = 7 bits over 2 characters (3.5 a character), " bbbb" 1 + 4 x 2 = 9
    # bits over 5 (1.8): per character "bbbb" wins, though in total it costs more.
    assert scores["accuracy"] == 0.5
    assert math.isclose(scores["answer_nats_per_char"], (1.8 + 3.5) / 2 * math.log(2), rel_tol=1e-6)
    assert score(questions, np.array([-7.0, -90.0, -7.0, -90.0]))["accuracy"] == 0.5


def _record(name: str, seed: int, text: float, mc: float) -> dict:
    return {
        "data": {"name": name},
        "seed": seed,
        "final": {"eval:x": text},
        "final_mc": {"mc:q": {"accuracy": 0.5, "answer_nats_per_char": mc}},
        "health": {"status": "ok"},
    }


def test_the_objective_is_the_weighted_mean_of_the_eval_losses():
    records = [_record("a", 0, 3.0, 1.0), _record("a", 1, 3.2, 1.2)]
    records += [_record("b", 0, 3.1, 2.0), _record("b", 1, 3.3, 2.2)]
    table, sets = objective(records, {"eval:x": 1.0, "mc:q": 3.0})
    assert sets == ["eval:x", "mc:q"]
    assert np.allclose(table["a"], [(3.0 + 3 * 1.0) / 4, (3.2 + 3 * 1.2) / 4])
    comparisons = {c.eval_set: c for c in compare(records, {"eval:x": 1.0, "mc:q": 3.0})}
    assert comparisons["mc:q"].unit == "nats/char" and comparisons["mc:q"].winner == "a"
    assert math.isclose(comparisons["the weighted objective"].difference, (0.1 + 3 * 1.0) / 4)
    lines = verdict_lines(records, {"eval:x": 1.0, "mc:q": 3.0})
    assert any(line.startswith("objective: a 1.600 ± 0.141, b") and "1 x eval:x + 3 x mc:q" in line for line in lines)
    assert any(line.startswith("mc:q: a 1.100") and "accuracy a 0.500" in line for line in lines)
    assert objective(records, {"eval:x": 0.0, "mc:q": 0.0}) == ({}, [])


def test_an_eval_weight_is_read_after_the_last_colon_and_a_bad_one_refused(tmp_path):
    runner = CliRunner()
    good = WeightedFile().convert(f"{FIXTURE}:2.5", None, None)
    assert good == (FIXTURE, 2.5) and WeightedFile().convert(str(FIXTURE), None, None) == (FIXTURE, 1.0)
    for value, message in ((f"{FIXTURE}:nan", "not a finite number"), (f"{FIXTURE}:-1", "-1"), ("nofile:2", "no such")):
        result = runner.invoke(main, ["ablate", str(tmp_path), "--out", str(tmp_path / "o"), "--eval-mc", value])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
