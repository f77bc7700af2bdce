"""`prep report SEARCH_OUT`: a `prep mix search` folder gets its own page (every trial's
predicted against measured loss per fit, each source's share against loss, the proposal
against the natural mixture, a table of trials), and a folder that is no search keeps the
behaviour it had. The folder is made by the search's own ``describe`` on fits of made-up
losses, so it has exactly the shape a real search writes, in a fraction of a second."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from pipeline.commands.report import report
from pipeline.mixsearch.fit import MODELS, Objective
from pipeline.mixsearch.search import SearchResult, describe
from pipeline.report.search import SearchReportError, render_search

SOURCES = ["web", "math", "c<o>de"]  # a name that must be escaped, as a user's file name may need
SETS = {"eval:prose.jsonl": 3.0, "eval:math.jsonl": 1.0}
TRIALS = 7
UNHEALTHY = 4  # this trial diverged: in the table, not in the fits or the scatters


def _search_folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    shares = rng.dirichlet([2.0, 1.0, 1.0], TRIALS)
    logs = np.log(shares + 1e-3)
    records = [
        {
            "trial": f"trial-{i}",
            "data": {"name": f"mix-{i}"},
            "final": {
                "eval:prose.jsonl": float(3.0 - 0.3 * logs[i, 0]),
                "eval:math.jsonl": float(2.5 - 0.2 * logs[i, 1]),
            },
            "health": {"status": "diverged" if i == UNHEALTHY else "ok"},
        }
        for i in range(TRIALS)
    ]
    healthy = [i for i in range(TRIALS) if i != UNHEALTHY]
    measured = {name: np.array([records[i]["final"][name] for i in healthy]) for name in SETS}
    fits = [Objective(model, shares[healthy], measured, SETS) for model in MODELS]
    chosen = min(fits, key=lambda fit: fit.error)
    proposal, natural = np.array([0.6, 0.3, 0.1]), np.array([0.7, 0.05, 0.25])
    predicted = {"proposal": float(chosen.predict(proposal)[0]), "natural": float(chosen.predict(natural)[0])}
    objective = sum(chosen.weights[name] * values for name, values in measured.items())
    result = SearchResult(
        SOURCES, shares, records, TRIALS, sorted(SETS), measured, objective, fits, chosen, proposal, natural,
        predicted, "prep mix RUN --web 0.6 --math 0.3", ["the proposal's predicted gain is within the error"],
    )  # fmt: skip
    settings = SimpleNamespace(runs=[root / "run"], tokens=100_000, target_tokens=2_000_000)
    folder = root / "search"
    (folder / "ledger").mkdir(parents=True)  # as a real search has: the dispatch must not take it for an ablation
    (folder / "search.json").write_text(json.dumps(describe(result, settings)))
    return folder


@pytest.fixture
def search_folder(tmp_path) -> Path:
    return _search_folder(tmp_path)


def _page(folder: Path, tmp_path: Path) -> str:
    out = tmp_path / "search.html"
    result = CliRunner().invoke(report, [str(folder), "--out", str(out)])
    assert result.exit_code == 0 and result.output == f"wrote {out}\n", result.output
    return out.read_text(encoding="utf-8")


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page)


def _titled(page: str, start: str) -> list[str]:
    return [chart for chart in _svgs(page) if re.search(f'aria-label="{re.escape(html.escape(start))}', chart)]


def _tips(chart: str) -> list[str]:
    return [html.unescape(tip) for tip in re.findall(r'<circle class="trial".*?<title>(.*?)</title>', chart)]


def test_a_search_folder_gets_one_point_per_healthy_trial_per_fit(search_folder, tmp_path):
    page = _page(search_folder, tmp_path)
    assert "<h1>prep mix search</h1>" in page and "<script" not in page
    raw = json.loads((search_folder / "search.json").read_text())
    healthy = [trial for trial in raw["trials"] if trial["health"] == "ok"]
    for fit in raw["fits"]:
        (chart,) = _titled(page, f"{fit['model']}: leave-one-out prediction against measured loss")
        assert f"error {fit['loo_error']:.4f}" in html.unescape(chart)
        assert "measured loss (nats/token)" in chart and "predicted loss (nats/token)" in chart  # axis labels
        assert "<title>y = x</title>" in chart
        tips = _tips(chart)
        assert len(tips) == len(healthy) == TRIALS - 1
        for trial, predicted, tip in zip(healthy, fit["loo_objective"], tips, strict=True):
            measured = sum(w * trial["final"][name] for name, w in raw["weights"].items())
            assert tip == f"{trial['mixture']}: measured {measured:.4f}, predicted {predicted:.4f}"
    assert f"mix-{UNHEALTHY}:" not in html.unescape(page)  # the diverged trial is in no chart...
    assert "<td>mix-4</td>" in page and "(diverged)" in page  # ...but in the table of trials


def test_every_source_has_its_scatter_and_its_bars_against_the_natural_mixture(search_folder, tmp_path):
    page = _page(search_folder, tmp_path)
    raw = json.loads((search_folder / "search.json").read_text())
    for source in SOURCES:
        (chart,) = _titled(page, f"{source}: share against loss")
        assert len(_tips(chart)) == TRIALS - 1 and f"share of {html.escape(source)}" in chart
        assert f"<th>{html.escape(source)}</th>" in page  # a column of the table of trials
    assert "c<o>de" not in page  # escaped everywhere
    (bars,) = _titled(page, "proposed against natural mixture")
    text = html.unescape(bars)
    for label in ("proposal", "natural"):
        assert f"{label}: predicted {raw['predicted'][label]:.4f}" in text  # the legend
        for source in SOURCES:
            assert f"{source} ({label}): {100 * raw[label][source]:.3g}%" in text  # one bar each
    chosen = next(fit for fit in raw["fits"] if fit["model"] == raw["chosen"])
    assert f"cross-validated error {chosen['loo_error']:.4f}" in text
    assert "prep mix RUN --web 0.6 --math 0.3" in page and "within the error" in page


def test_a_folder_that_is_no_search_keeps_its_behaviour(search_folder, tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.html"
    plain = tmp_path / "plain"
    plain.mkdir()
    result = runner.invoke(report, [str(plain), "--out", str(out)])
    assert result.exit_code == 1 and "no manifest.json" in result.output  # as before: no prep run
    result = runner.invoke(report, [str(search_folder), str(plain), "--out", str(out)])
    assert result.exit_code == 2 and "holds a mixture search; MIX_DIR goes with a prep run only" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: "{not json", "cannot be read as JSON"),
        (lambda raw: "[" * 100_000, "cannot be read as JSON"),
        (lambda raw: '{"format": ' + "9" * 5000 + "}", "cannot be read as JSON"),
        (lambda raw: {**raw, "format": "prep-ablate"}, 'no "format": "prep-mix-search"'),
        (lambda raw: {**raw, "natural": {"web": 1.0}}, "name different sources"),
        (lambda raw: {**raw, "trials": [{**raw["trials"][0], "shares": "web"}]}, "trial 0 has no shares"),
        (lambda raw: {**raw, "fits": [{**raw["fits"][0], "loo_objective": [1.0]}]}, "no prediction per healthy"),
        (lambda raw: {**raw, "chosen": "lightgbm"}, "none of the fits"),
    ],
)
def test_a_damaged_search_json_is_one_line_naming_the_file(search_folder, tmp_path, edit, message):
    path = search_folder / "search.json"
    edited = edit(json.loads(path.read_text()))
    path.write_text(edited if isinstance(edited, str) else json.dumps(edited))
    with pytest.raises(SearchReportError, match=re.escape(message)):
        render_search(search_folder)
    result = CliRunner().invoke(report, [str(search_folder), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 1 and result.output.startswith(f"Error: {path}: ") and result.output.count("\n") == 1
