"""`prep report` over a `prep ablate` ledger: the trial table, the loss charts, escaping, the CLI."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.commands.report import report
from pipeline.formats.experiments import write_record
from pipeline.report.experiments import find_ledger, render_experiments, write_experiments_report

SVG_NS = "{http://www.w3.org/2000/svg}"
NASTY = "<script>alert(1)</script>.jsonl"
SETS = ("held-out:raw", "eval:us_speeches.jsonl.gz")


def record(data: str, seed: int, day: int, *, base: float, stopped: str = "") -> dict:
    curve = [[t * 1000, base + 4.0 / (t + 1)] for t in range(1, 6)]
    return {
        "experiment": "exp-a",
        "trial": f"{data.strip('<>/().')[:6]}-{seed}",
        "date": f"2024-05-0{day}T12:00:00+00:00",
        "prep_version": "0.1.0",
        "data": {
            "name": data,
            "path": f"/x/{data}",
            "kind": "run",
            "fingerprint": "f",
            "shares": {},
            "sample": None,
            "tokens": 10_000,
        },
        "model": {
            "preset": "tiny",
            "params": 1_234_567,
            "layers": 2,
            "d_model": 64,
            "heads": 2,
            "seq_len": 128,
            "vocab": {},
        },
        "device": "cpu",
        "seed": seed,
        "tokens": 5000,
        "wall_s": 10.0,
        "step_s": 0.1,
        "tokens_per_s": 500.0,
        "data_wait_share": 0.05,
        "train_curve": [[t * 100, base + 5.0 / (t + 1)] for t in range(1, 51)],
        "eval": {name: [[x, y + k * 0.1] for x, y in curve] for k, name in enumerate(SETS)},
        "final": {name: curve[-1][1] + k * 0.1 for k, name in enumerate(SETS)},
        "health": {"status": "stopped" if stopped else "ok", "message": stopped},
        "projection": {},
    }


@pytest.fixture
def ablate_out(tmp_path: Path) -> Path:
    ledger = tmp_path / "ablation" / "ledger"
    write_record(ledger, record("raw", 1, 1, base=3.5))
    write_record(ledger, record("raw", 2, 2, base=3.52))
    write_record(ledger, record(NASTY, 1, 3, base=3.3))
    write_record(ledger, record(NASTY, 2, 4, base=3.31, stopped="loss went NaN at step 40"))
    return tmp_path / "ablation"


def svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(markup) for markup in re.findall(r"<svg .*?</svg>", page, flags=re.S)]


def test_page_has_a_chart_per_eval_set_and_training_with_a_colour_per_data(ablate_out):
    page = render_experiments(ablate_out / "ledger")
    charts = svgs(page)
    titles = [chart.find(f"{SVG_NS}title").text for chart in charts]
    assert titles == [f"{name}: loss over tokens trained" for name in SETS] + ["training loss over tokens trained"]
    for chart in charts:
        lines = list(chart.iter(f"{SVG_NS}polyline"))
        assert len(lines) == 4  # one per trial: two data, two seeds each
        assert len({line.get("stroke") for line in lines}) == 2  # one colour per data
        tips = [line.find(f"{SVG_NS}title").text for line in lines]
        assert sum(tip.startswith("raw · seed") for tip in tips) == 2
        assert sum(tip.startswith(NASTY + " · seed") for tip in tips) == 2
        # The y axis spans the losses, not 0 upwards.
        y_labels = [float(t.text) for t in chart.iter(f"{SVG_NS}text") if t.get("text-anchor") == "end"]
        assert min(y_labels) >= 3 and max(y_labels) < 9


def test_table_lists_every_trial_escapes_names_and_shows_stops(ablate_out):
    page = render_experiments(ablate_out / "ledger")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;.jsonl" in page
    trials = page.split("<tbody>")[1].split("</tbody>")[0]
    rows = trials.split("<tr>")[1:]
    assert len(rows) == 4
    assert [row.count("2024-05-0") for row in rows] == [1, 1, 1, 1]
    assert rows[0].startswith("<td>2024-05-04 12:00</td>")  # newest first
    assert "stopped: loss went NaN at step 40" in rows[0] and "<td>ok</td>" in rows[3]
    assert "<td>tiny 1.23M</td>" in rows[0] and "<td>5.0%</td>" in rows[0]
    assert all(f"<th>{name}</th>" in page for name in SETS)
    # Per experiment, the final loss per data: the mean over seeds and their range.
    assert "<td>raw</td><td>2</td><td>4.177 (4.167–4.187)</td><td>4.277 (4.267–4.287)</td>" in page
    assert "<td>3.972 (3.967–3.977)</td>" in page


def test_cli_on_the_ledger_and_on_its_parent(ablate_out, tmp_path):
    assert find_ledger(ablate_out) == ablate_out / "ledger" == find_ledger(ablate_out / "ledger")
    for folder in (ablate_out, ablate_out / "ledger"):
        out = tmp_path / folder.name / "page.html"
        result = CliRunner().invoke(report, [str(folder), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert result.output == f"wrote {out}\n"
        assert "<h1>prep experiments</h1>" in out.read_text()


@pytest.mark.parametrize("damage", ["{not json", "[" * 100_000, None], ids=["not-json", "too-deep", "fifo"])
def test_a_corrupt_record_is_a_one_line_error(ablate_out, tmp_path, damage):
    broken = ablate_out / "ledger" / "broken.trial.json"
    broken.unlink(missing_ok=True)
    if damage is None:
        os.mkfifo(broken)  # read, it blocked the report for good
    else:
        broken.write_text(damage)
    result = CliRunner().invoke(report, [str(ablate_out), "--out", str(tmp_path / "page.html")])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("Error: ") and "broken.trial.json" in result.output
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("field, value, said", [("date", 20240501, "an integer"), ("trial", None, "null")])
def test_a_record_whose_sort_key_is_not_text_is_a_one_line_error(ablate_out, tmp_path, field, value, said):
    """The ledger is read in date order: a date of another type ended the report in
    "TypeError: '<' not supported between instances of 'int' and 'str'"."""
    path = write_record(ablate_out / "ledger", record("raw", 3, 5, base=3.4))
    written = json.loads(path.read_text())
    path.write_text(json.dumps({**written, field: value}))
    result = CliRunner().invoke(report, [str(ablate_out), "--out", str(tmp_path / "page.html")])
    assert result.exit_code == 1 and result.output == (
        f"Error: {path}: {field} is {said}, expected a string (an unreadable trial record)\n"
    ), result.output


def test_an_empty_ablation_folder_says_so(tmp_path):
    (tmp_path / "ablation" / "ledger").mkdir(parents=True)
    result = CliRunner().invoke(report, [str(tmp_path / "ablation"), "-o", str(tmp_path / "p.html")])
    assert result.exit_code == 1 and "no trial records" in result.output
    with pytest.raises(ValueError, match="no trial records"):
        write_experiments_report(tmp_path / "ablation" / "ledger", tmp_path / "p.html")
