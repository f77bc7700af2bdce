"""The page ``prep report`` writes about a ``prep mix search`` folder (its ``search.json``).

Three questions a reader of a search asks, one chart each, then the table of trials:

- Can the fits be trusted? Each fit model's leave-one-out prediction of every healthy trial
  against the trial's measured loss, with the y = x line: points far off it are the
  cross-validated error the proposal's predicted gain has to beat.
- What does each source do? One small scatter per source of its share in a trial against
  the trial's loss: a source whose points fall to the right is one the loss wants more of.
- What is proposed? The proposal's shares beside the natural ones, with each predicted loss
  and the chosen fit's cross-validated error.

"Loss" is the search's objective: the eval sets' final losses (nats/token) weighted as the
search weighted them. ``search.json`` is read as hostile input: anything not of its shape is
a ``SearchReportError`` naming the file and the field, never a traceback. Every string from
it (source and trial names come from users' file names) goes through ``svg.esc``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pipeline import __version__
from pipeline.formats.experiments import SearchFolder
from pipeline.report import svg
from pipeline.report.experiments import NOWRAP, _count, _finite, _table
from pipeline.report.html import STYLE, ReportError, page_shell, write_page

FORMAT = "prep-mix-search"
SMALL = (372, 220)  # width, height of a per-source chart: two fit side by side on the page
FLEX = ".charts{display:flex;flex-wrap:wrap;gap:0 16px}"


class SearchReportError(ReportError):
    """``search.json`` is not what ``prep mix search`` writes; the message says where."""


@dataclass
class Search:
    """What the page draws, checked and with each healthy trial's objective worked out."""

    sources: list[str]
    weights: dict[str, float]  # eval set -> its weight in the objective (summing to 1)
    trials: list[dict]  # every trial, healthy or not, in order
    healthy: list[dict]  # the trials the fits saw, in the order of their predictions
    measured: list[float]  # each healthy trial's objective
    fits: list[dict]  # model, loo_error, loo_objective (one per healthy trial)
    chosen: str
    mixtures: dict[str, dict[str, float]]  # "proposal", "natural" -> share per source
    predicted: dict[str, float]
    raw: dict


def is_search(folder: Path) -> bool:
    return SearchFolder(folder).summary.is_file()


def load_search(folder: Path) -> Search:
    path = SearchFolder(folder).summary
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # also not UTF-8, nested too deep, a 4,300-digit number
        raise SearchReportError(f"{path}: cannot be read as JSON ({error})") from None

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise SearchReportError(f"{path}: {what}; is it what `prep mix search` wrote?")

    need(isinstance(raw, dict) and raw.get("format") == FORMAT, f'no "format": "{FORMAT}"')
    mixtures = {label: raw.get(label) for label in ("proposal", "natural")}
    for label, shares in mixtures.items():
        need(_numbers(shares), f'"{label}" is not a share per source')
    sources = list(mixtures["proposal"])
    need(list(mixtures["natural"]) == sources and bool(sources), '"proposal" and "natural" name different sources')
    weights = raw.get("weights")
    need(_numbers(weights) and bool(weights), '"weights" is not a weight per eval set')
    trials = raw.get("trials")
    need(isinstance(trials, list) and bool(trials), '"trials" is not a list of trials')
    for index, trial in enumerate(trials):
        ok = isinstance(trial, dict) and _numbers(trial.get("shares")) and list(trial["shares"]) == sources
        need(ok and isinstance(trial.get("final"), dict), f"trial {index} has no shares of {sources} or no final")
    healthy = [trial for trial in trials if trial.get("health") == "ok"]
    for trial in healthy:
        need(_numbers({name: trial["final"].get(name) for name in weights}), f"trial {trial.get('trial')}: no loss")
    measured = [sum(w * trial["final"][name] for name, w in weights.items()) for trial in healthy]
    fits = raw.get("fits")
    need(isinstance(fits, list) and bool(fits), '"fits" is not a list of fits')
    for fit in fits:
        ok = isinstance(fit, dict) and _finite(fit.get("loo_error")) and isinstance(fit.get("loo_objective"), list)
        need(ok and len(fit["loo_objective"]) == len(healthy), "a fit has no prediction per healthy trial")
        need(all(_finite(value) for value in fit["loo_objective"]), "a fit's predictions are not numbers")
    predicted = raw.get("predicted")
    need(_numbers(predicted) and set(mixtures) <= set(predicted), '"predicted" lacks the proposal or natural')
    chosen = str(raw.get("chosen"))
    need(chosen in [str(fit.get("model")) for fit in fits], f'"chosen" ({chosen}) is none of the fits')
    return Search(sources, weights, trials, healthy, measured, fits, chosen, mixtures, predicted, raw)


def render_search(folder: Path) -> str:
    search = load_search(folder)
    sections = [
        ("fits", "Predicted against measured", _fits_section(search)),
        ("sources", "Each source's weight against loss", _sources_section(search)),
        ("proposal", "Proposed against natural", _proposal_section(search)),
        ("trials", f"Trials ({len(search.trials)})", _trials_section(search)),
    ]
    nav = "".join(f'<a href="#{key}">{svg.esc(title)}</a>' for key, title, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{svg.esc(title)}</h2>{html}</section>' for key, title, html in sections)
    raw = search.raw
    meta = svg.esc(
        f"{Path(folder).resolve()} · prep {__version__} · {_count(len(search.trials), 'trial')} "
        f"({len(search.healthy)} healthy) of {_tokens(raw.get('tokens'))} tokens each · "
        f"sources {', '.join(search.sources)} · target {_tokens(raw.get('target_tokens'))} tokens"
    )
    return page_shell("prep mix search", Path(folder).resolve().name, STYLE + NOWRAP + FLEX, meta, nav, body)


def write_search_report(folder: Path, out: Path) -> Path:
    return write_page(render_search(folder), out)


def _fits_section(search: Search) -> str:
    parts = [
        _caption(
            "Each point is one healthy trial: its measured loss (the eval sets' final losses, weighted as "
            f"the search weighted them: {_weights(search.weights)}) against the fit's prediction from all "
            "the other trials. On the dashed line the fit is exact; the spread about it is the "
            f"cross-validated error. The search proposes with the {search.chosen} fit."
        )
    ]
    values = search.measured + [v for fit in search.fits for v in fit["loo_objective"]]
    low, high = _span(values)
    high = low + svg.nice_ticks(high - low)[-1]  # the y axis's rounded top: both axes alike, y = x at 45°
    for index, fit in enumerate(search.fits):
        name = str(fit.get("model"))
        points = [
            (measured, predicted, f"{trial.get('mixture')}: measured {measured:.4f}, predicted {predicted:.4f}")
            for trial, measured, predicted in zip(search.healthy, search.measured, fit["loo_objective"], strict=True)
        ]
        title = f"{name}: leave-one-out prediction against measured loss (error {fit['loo_error']:.4f})"
        labels = ("measured loss (nats/token)", "predicted loss (nats/token)")
        parts.append(_scatter(points, title, labels, (low, high), (low, high), svg.colour(index), diagonal=True))
    return "".join(parts)


def _sources_section(search: Search) -> str:
    parts = [
        _caption(
            "One chart per source: each point is one healthy trial, its share of that source against its "
            "measured loss. Points falling to the right mean the loss wants more of the source."
        ),
        '<div class="charts">',
    ]
    y_range = _span(search.measured)
    for index, source in enumerate(search.sources):
        shares = [float(trial["shares"][source]) for trial in search.healthy]
        points = [
            (share, loss, f"{trial.get('mixture')}: {source} {share:.3f}, loss {loss:.4f}")
            for trial, share, loss in zip(search.healthy, shares, search.measured, strict=True)
        ]
        x_range = (0.0, svg.nice_ticks(max(max(shares), 1e-3))[-1])
        labels = (f"share of {source}", "loss (nats/token)")
        parts.append(
            _scatter(points, f"{source}: share against loss", labels, x_range, y_range, svg.colour(index), SMALL)
        )
    return "".join(parts) + "</div>"


def _proposal_section(search: Search) -> str:
    error = next(float(fit["loo_error"]) for fit in search.fits if str(fit.get("model")) == search.chosen)
    names = {
        label: f"{label}: predicted {search.predicted[label]:.4f}" for label in ("proposal", "natural")
    }  # the legend carries each mixture's predicted loss
    labels, series = [], {name: [] for name in names.values()}
    for source in search.sources:
        for label, name in names.items():
            labels.append(f"{source} ({label})")
            for other in series:  # one bar per row: the other mixture's value there is 0
                series[other].append(100 * search.mixtures[label][source] if other == name else 0.0)
    title = f"proposed against natural mixture: share of tokens per source (cross-validated error {error:.4f})"
    chart = svg.hbars(labels, series, title, "%", axes=("source (mixture)", "share of tokens (%)"))
    notes = [str(line) for line in _list(search.raw.get("notes"))]
    verdict = [str(line) for line in _list(search.raw.get("verdict"))]
    parts = [
        _caption(
            f"The proposal minimizes the {search.chosen} fit's predicted loss under the search's bounds and "
            f"epoch limit; predicted losses are in nats/token, and a difference within the fit's "
            f"cross-validated error ({error:.4f}) is one the proxy cannot vouch for."
        ),
        chart,
        "".join(f"<p>{svg.esc(note)}</p>" for note in notes),
    ]
    if verdict:
        parts.append(f"<h3>Validation</h3><pre>{svg.esc(chr(10).join(verdict))}</pre>")
    parts.append(f"<h3>The winner as a mixture</h3><pre>{svg.esc(search.raw.get('command', ''))}</pre>")
    return "".join(parts)


def _trials_section(search: Search) -> str:
    predictions = {id(trial): i for i, trial in enumerate(search.healthy)}
    sets = list(search.weights)
    header = ["trial", "mixture", *search.sources, *sets, "loss", *(str(f.get("model")) for f in search.fits)]
    rows = []
    for trial in search.trials:
        row = predictions.get(id(trial))
        final = trial["final"]
        rows.append(
            [
                str(trial.get("trial", "?")),
                str(trial.get("mixture", "?")),
                *(f"{float(trial['shares'][source]):.3f}" for source in search.sources),
                *(f"{final[name]:.4f}" if _finite(final.get(name)) else "–" for name in sets),
                f"{search.measured[row]:.4f}" if row is not None else f"({trial.get('health', '?')})",
                *(f"{fit['loo_objective'][row]:.4f}" if row is not None else "–" for fit in search.fits),
            ]
        )
    caption = _caption(
        "Every trial in order: its shares, its final loss per eval set (nats/token), the weighted loss, and "
        "each fit's leave-one-out prediction of it. An unhealthy trial shows its status and was left out of the fits."
    )
    return caption + _table(header, rows)


def _scatter(points, title, labels, x_range, y_range, fill, size=(svg.WIDTH, 300), diagonal=False) -> str:
    """Points (x, y, tip) on axes spanning ``x_range`` and ``y_range``; the y axis is drawn
    from ``y_range``'s low end (losses a few hundredths apart would be one dot from 0).
    ``diagonal`` draws y = x dashed, for predictions against measurements."""
    x_low, y_low = x_range[0], y_range[0]
    plot = svg._Plot((x_low, x_range[1]), y_range[1] - y_low, height=size[1], width=size[0])
    body = plot.axes(svg._linear_ticks(plot), *labels, lambda v: svg.fmt(v + y_low))
    if diagonal:
        ends = [max(x_low, y_low), min(plot.x1, y_low + plot.y1)]
        body.append(
            f'<line x1="{plot.x(ends[0]):.1f}" y1="{plot.y(ends[0] - y_low):.1f}" x2="{plot.x(ends[1]):.1f}" '
            f'y2="{plot.y(ends[1] - y_low):.1f}" stroke="#000" stroke-dasharray="5 3"><title>y = x</title></line>'
        )
    for x, y, tip in points:
        body.append(
            f'<circle class="trial" cx="{plot.x(x):.1f}" cy="{plot.y(y - y_low):.1f}" r="4" fill="{fill}" '
            f'fill-opacity="0.8"><title>{svg.esc(tip)}</title></circle>'
        )
    body.append(svg._text(plot.left, 16, title, extra=' font-weight="bold"'))
    return svg._document(size[0], size[1], title, body)


def _span(values: list[float]) -> tuple[float, float]:
    """From a round value below the lowest to the highest, as the ablation charts do."""
    step = svg.nice_ticks(max(max(values) - min(values), 1e-3))[1]
    low = math.floor((min(values) - step / 4) / step) * step  # room below, so no point sits on the axis
    return low, max(values) + step / 4


def _caption(text: str) -> str:
    return f'<p class="caption">{svg.esc(text)}</p>'


def _weights(weights: dict[str, float]) -> str:
    return ", ".join(f"{name} {weight:.2f}" for name, weight in weights.items())


def _tokens(value: object) -> str:
    return svg.fmt(value) if _finite(value) else "?"


def _numbers(value: object) -> bool:
    return isinstance(value, dict) and all(_finite(v) for v in value.values())


def _list(value: object) -> list:
    return value if isinstance(value, list) else []
