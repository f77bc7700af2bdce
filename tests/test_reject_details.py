"""The ledger says why: every drop of ``length``, ``langid`` and ``quality`` carries, as its
``detail``, the value and the threshold that decided it (issue 48), as classify's and
dedup's drops do. Hand-made batches whose value and threshold are known, then the sample
run's whole ledger."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_CONFIG, make_batch

from pipeline.commands.main import main
from pipeline.engine.run import run_pipeline
from pipeline.stage import threshold_detail
from stages.langid.stage import LangId
from stages.length import Length
from stages.quality.rules import QualityOptions
from stages.quality.stage import QualityStage

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"  # 10 distinct words


def details(detail: pa.Array) -> list[dict | None]:
    return [None if text is None else json.loads(text) for text in detail.to_pylist()]


def test_threshold_detail_is_json_only_where_a_threshold_is_set():
    value = pa.array([12, 7, float("nan")], pa.float64())
    threshold = pa.array([50, None, float("inf")], pa.float64())
    assert details(threshold_detail(value, threshold)) == [
        {"value": 12, "threshold": 50},
        None,
        {"value": None, "threshold": None},  # never text that does not parse
    ]
    labelled = threshold_detail(pa.array([0.73], pa.float32()), pa.array([0.5], pa.float32()), pa.array(['a"b']))
    assert details(labelled) == [{"value": 0.73, "threshold": 0.5, "label": 'a"b'}]


def test_length_detail_is_the_character_count_and_the_bound_it_crossed():
    out = Length(Length.Options(min_chars=3, max_chars=5)).process(make_batch(["ab", "abcd", "abcdefg"]), "web")
    assert out.drop_reason.to_pylist() == ["too-short", None, "too-long"]
    assert details(out.detail) == [{"value": 2, "threshold": 3}, None, {"value": 7, "threshold": 5}]


def test_quality_word_count_detail_names_the_minimum_or_the_maximum_it_failed():
    texts = [WORDS, " ".join([WORDS] * 6)]  # 10 and 60 words
    too_few = QualityStage(QualityOptions(gopher_repetition=False))
    out = too_few.process(make_batch(texts), "web")
    assert out.drop_reason.to_pylist()[0] == "gopher_quality:word_count"
    assert details(out.detail)[0] == {"value": 10, "threshold": 50}
    too_many = QualityStage(QualityOptions(gopher_repetition=False, gopher_min_doc_words=0, gopher_max_doc_words=8))
    out = too_many.process(make_batch(texts), "web")
    assert out.drop_reason.to_pylist() == ["gopher_quality:word_count"] * 2
    assert details(out.detail) == [{"value": 10, "threshold": 8}, {"value": 60, "threshold": 8}]


def test_quality_detail_is_the_signal_column_of_the_rule_that_fired():
    # Four lines, two of them repeats of the first: half the lines are duplicates.
    repeated = "\n".join([WORDS, WORDS, "kilo lima mike", WORDS])
    out = QualityStage(QualityOptions()).process(make_batch([repeated]), "web")
    assert out.drop_reason.to_pylist() == ["gopher_repetition:dup_line_frac"]
    fraction = out.batch.column("gr_dup_line_frac")[0].as_py()
    assert fraction == pytest.approx(0.5)
    assert details(out.detail) == [{"value": 0.5, "threshold": 0.3}]


def test_code_and_math_drops_carry_their_rule_values():
    texts = ["ab " * 500, "x" * 1500, "   ", "x = 1\n"]
    code = QualityStage(QualityOptions()).process(make_batch(texts), "code")
    assert code.drop_reason.to_pylist() == ["code:max_line_length", "code:encoded_blob", "code:empty", None]
    assert details(code.detail) == [
        {"value": 1500, "threshold": 1000},
        {"value": 1500, "threshold": 1024},
        {"value": 0, "threshold": 0},
        None,
    ]
    options = QualityOptions(math_max_dup_line_char_frac=0.25)
    math = QualityStage(options).process(make_batch(["a = b\n" * 4, "$x^2$"]), "math")
    assert math.drop_reason.to_pylist() == ["math:dup_line_char_frac", None]
    (value,) = [d["value"] for d in details(math.detail) if d]
    assert value > 0.25 and details(math.detail)[0]["threshold"] == 0.25


GERMAN = "Der schnelle braune Fuchs springt über den faulen Hund und läuft dann tief in den Wald hinein."
ENGLISH = "ok ok lol"  # English, but not sure of it: well under 0.99


def test_langid_detail_is_the_score_and_the_threshold_and_the_unwanted_label():
    stage = LangId(LangId.Options(min_score=0.5, min_scores={"en": 0.99}, second_opinion=""))
    out = stage.process(make_batch([GERMAN, ENGLISH, "1234 5678"]), "web")
    assert out.drop_reason.to_pylist() == ["lang:de", "lang:low-score", "lang:low-score"]
    scores = out.batch.column("lang_score").to_numpy()
    german, english, no_letter = details(out.detail)
    assert german == {"value": float(str(scores[0])), "threshold": 0.5, "label": "de"}
    assert english == {"value": float(str(scores[1])), "threshold": 0.99}
    assert np.float32(english["value"]) < np.float32(0.99)
    assert no_letter == {"value": 0, "threshold": 0.5}  # no letter: no language, no score


def test_langid_keeps_have_no_detail():
    out = LangId(LangId.Options(languages="all", second_opinion="")).process(make_batch([GERMAN]), "web")
    assert out.drop_reason.to_pylist() == [None] and out.detail.to_pylist() == [None]


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("why") / "out"
    run_pipeline(SAMPLE_CONFIG, out, workers=1, quiet=True)
    return out


def test_every_threshold_drop_of_the_sample_run_says_why(sample_run):
    ledger = pq.read_table(sample_run / "rejects", columns=["stage", "reason", "detail"]).to_pylist()
    judged = [row for row in ledger if row["stage"] in ("length", "langid", "quality")]
    assert {row["stage"] for row in judged} == {"length", "langid", "quality"}
    for row in judged:
        detail = json.loads(row["detail"])
        assert isinstance(detail["value"], (int, float)) and isinstance(detail["threshold"], (int, float)), row
        if row["reason"].startswith("lang:") and row["reason"] != "lang:low-score":
            assert detail["label"] == row["reason"].removeprefix("lang:")
        if row["reason"] == "too-short":
            assert detail["value"] < detail["threshold"]


def rejects_command(*args: str):
    return CliRunner().invoke(main, ["rejects", *map(str, args)])


def test_prep_rejects_lists_id_stage_reason_and_detail_one_line_each(sample_run):
    result = rejects_command(sample_run, "--stage", "length", "--limit", "3")
    assert result.exit_code == 0, result.output
    header, *lines, more = result.output.splitlines()
    assert header.split() == ["id", "stage", "reason", "detail"]
    assert len(lines) == 3 and "there are more" in more
    ledger = pq.read_table(sample_run / "rejects", columns=["id", "stage", "reason", "detail"])
    by_id = {row["id"]: row for row in ledger.to_pylist()}
    for line in lines:
        doc_id, stage, reason, detail = line.split(maxsplit=3)
        assert (stage, reason, json.loads(detail)) == ("length", "too-short", json.loads(by_id[doc_id]["detail"]))


def test_prep_rejects_filters_by_reason_and_ends_without_a_note_when_all_are_shown(sample_run):
    result = rejects_command(sample_run, "--reason", "exact-duplicate", "--limit", "100")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()[1:]
    ledger = pq.read_table(sample_run / "rejects", columns=["reason"]).column("reason").to_pylist()
    assert len(lines) == ledger.count("exact-duplicate") > 0
    assert all(line.split()[1:3] == ["dedup", "exact-duplicate"] for line in lines)


def test_prep_rejects_says_what_the_ledger_holds_when_nothing_matches(sample_run):
    result = rejects_command(sample_run, "--stage", "lenght")
    assert result.exit_code == 1
    assert "no reject" in result.output and "length (" in result.output and "Traceback" not in result.output


def test_prep_rejects_refuses_a_folder_that_is_no_run(tmp_path):
    result = rejects_command(tmp_path)
    assert result.exit_code == 1
    assert "is not a prep run" in result.output and "Traceback" not in result.output
