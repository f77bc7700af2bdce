"""A rerun checks what each done unit wrote into docs/, rejects/ and tokens/ against the
sizes its marker recorded (and that a Parquet file's footer reads) before it trusts the
marker: a file damaged after its unit was done is redone, said in one line; one made
from work files that are gone is refused in one line. Before, the marker's word was
taken and the damage stayed under "already complete"."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, write_config
from test_resume_fuzz import WEB_UNIT, _stopped_at
from test_run import tree_digest

import pipeline.engine.run as run_module
from pipeline.engine.config import ConfigError
from pipeline.engine.run import run_pipeline

LENGTH = '[[stages]]\nname = "length"\nmin_chars = 200\n'
TOKENIZE = '[[stages]]\nname = "tokenize"\ntokenizer = "cl100k_base"\n'
DEDUP = '[[stages]]\nname = "dedup"\n'
MATH_UNIT = "00000-arxiv.jsonl.gz.to-00001"


def _config(tmp_path, stages: str, sources=("web",)):
    paths = {"web": "web/*.gz", "math": "math/*.jsonl.gz"}
    text = "".join(f'[sources.{s}]\npaths = ["{REPO}/data/sample/{paths[s]}"]\n' for s in sources)
    return write_config(tmp_path / "run.toml", text + stages)


def _cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _footer_zeroed(path):
    """The same size, the footer's length overwritten: only reading the footer tells."""
    data = bytearray(path.read_bytes())
    data[-8:-4] = b"\0\0\0\0"
    path.write_bytes(bytes(data))


def _rerun_said(config, out, capsys) -> str:
    capsys.readouterr()
    run_pipeline(config, out, workers=1, progress="none")
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "key, damage",
    [
        (f"docs/web/{WEB_UNIT}.parquet", _cut),
        (f"docs/web/{WEB_UNIT}.parquet", _footer_zeroed),
        (f"docs/web/{WEB_UNIT}.parquet", lambda path: path.unlink()),
        (f"rejects/web/{WEB_UNIT}.s0.parquet", _footer_zeroed),
        (f"tokens/web/{WEB_UNIT}.bin", _cut),
    ],
)
def test_an_output_damaged_after_the_run_completed_is_redone_on_the_rerun(tmp_path, capsys, key, damage):
    config, out = _config(tmp_path, LENGTH + TOKENIZE), tmp_path / "out"
    run_pipeline(config, out, workers=1, quiet=True)
    clean = tree_digest(out)
    damage(out / key)
    said = _rerun_said(config, out, capsys)
    assert said.startswith(f"redoing 1 unit whose output changed after being done: {key} ")
    assert len(said.strip().splitlines()) == 1
    assert tree_digest(out) == clean and not (out / "work").exists()  # the redo's work files go too
    assert json.loads((out / "cost.json").read_text())["resumed"]["complete_before"] is False
    assert _rerun_said(config, out, capsys) == ""  # now whole: nothing to redo


def test_a_marker_cut_short_after_the_run_completed_is_redone_not_a_traceback(tmp_path, capsys):
    config, out = _config(tmp_path, LENGTH), tmp_path / "out"
    run_pipeline(config, out, workers=1, quiet=True)
    clean = tree_digest(out)
    key = f"stats/segment-0/web/{WEB_UNIT}.json"
    _cut(out / key)
    assert _rerun_said(config, out, capsys).startswith(f"redoing 1 unit whose output changed after being done: {key} ")
    assert tree_digest(out) == clean


def test_a_later_segments_output_damaged_before_its_segment_is_done_is_redone(tmp_path, monkeypatch, capsys):
    """The documents the segment before left are still in work/: the unit is redone."""
    config, out = _config(tmp_path, DEDUP + TOKENIZE, ("web", "math")), tmp_path / "out"
    run_pipeline(config, tmp_path / "clean", workers=1, quiet=True)
    calls = []

    def second_of_segment_1(config, store, segment_index, unit, options):
        calls.extend([unit.name] if segment_index == 1 else [])
        return len(calls) == 2

    _stopped_at(config, out, monkeypatch, run_module, "segment_task", second_of_segment_1)
    done = next(out.glob(f"docs/*/{calls[0]}.parquet"))
    _cut(done)
    said = _rerun_said(config, out, capsys)
    assert said.startswith(f"redoing 1 unit whose output changed after being done: {done.relative_to(out)} has ")
    assert tree_digest(out) == tree_digest(tmp_path / "clean")


def test_a_later_segments_output_damaged_once_its_work_files_are_gone_is_refused(tmp_path):
    config, out = _config(tmp_path, DEDUP, ("math",)), tmp_path / "out"
    run_pipeline(config, out, workers=1, quiet=True)
    key = f"docs/math/{MATH_UNIT}.parquet"
    _cut(out / key)
    with pytest.raises(ConfigError) as refused:
        run_pipeline(config, out, workers=1, quiet=True)
    line = str(refused.value)
    assert line.startswith(f"{out}/{key} has ") and "\n" not in line
    assert line.endswith("so it cannot be redone alone: run with --force to start over")
    run_pipeline(config, out, workers=1, quiet=True, force=True)
    assert run_pipeline(config, out, workers=1, quiet=True)["balance"]["output"] > 0
