"""`prep show` on kept and dropped documents; `prep estimate` arithmetic."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.inspect_cli import estimate_hours
from pipeline.run import run_pipeline
from test_run import SAMPLE_CONFIG


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("show") / "out"
    run_pipeline(SAMPLE_CONFIG, out, workers=1, quiet=True)
    return out


def test_show_a_dropped_document_names_stage_and_rule(run):
    ledger = pq.read_table(run / "rejects").to_pylist()
    short = next(r for r in ledger if r["reason"] == "too-short")
    result = CliRunner().invoke(main, ["show", str(run), short["id"]])
    assert result.exit_code == 0, result.output
    assert "DROPPED by stage 'length', rule 'too-short'" in result.output
    assert f"{short['file']}:{short['line']}" in result.output
    assert short["text"][:50] in result.output


def test_show_a_kept_document_with_its_signals(run):
    kept = pq.read_table(run / "docs" / "math").slice(0, 1).to_pylist()[0]
    result = CliRunner().invoke(main, ["show", str(run), kept["id"], "--chars", "0"])
    assert result.exit_code == 0
    assert f"{kept['id']}: kept (math)" in result.output
    assert f"n_chars: {kept['n_chars']}" in result.output and kept["text"] in result.output


def test_show_unknown_id(run):
    result = CliRunner().invoke(main, ["show", str(run), "no-such-id"])
    assert result.exit_code != 0 and "no document 'no-such-id'" in result.output


def test_estimate(tmp_path):
    # 1B parameters x 20B tokens = 1.2e20 FLOPs, at 40% of an H100's 989 TFLOP/s.
    result = estimate_hours(20_000_000_000, 1e9, 8, 0.4, 989e12)
    assert result["flops"] == pytest.approx(1.2e20)
    assert result["gpu_hours"] == pytest.approx(1.2e20 / (0.4 * 989e12) / 3600)
    assert result["wall_hours"] == pytest.approx(result["gpu_hours"] / 8)
    (tmp_path / "mix.json").write_text(json.dumps({"tokens": 20_000_000_000}))
    out = CliRunner().invoke(main, ["estimate", str(tmp_path), "--params", "1B", "--gpus", "8", "--mfu", "0.4"])
    assert out.exit_code == 0, out.output
    assert f"{result['gpu_hours']:,.4g} GPU-hours" in out.output
