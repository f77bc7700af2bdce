"""The page ``prep report`` writes about an experiments ledger (``prep ablate``'s trial records).

A table of every trial, then per experiment (newest first) a table of the final losses per
DATA and one chart of loss over tokens trained per evaluation set, and one of the training
loss. A chart has one line per trial: the colour is the DATA, so the seeds of one DATA are
lines of one colour and their spread shows the seed noise a difference must beat.

The charts draw with ``svg``'s frame, not ``svg.lines``: ``lines`` has one colour per series
and its y axis starts at 0, where losses a few hundredths apart would be one line. Every
string from a record (data names come from users' file names) goes through ``svg.esc``.
"""

from __future__ import annotations

import math
from pathlib import Path

from pipeline import __version__
from pipeline.formats.experiments import SUFFIX, LedgerError, find_ledger, read_ledger
from pipeline.report import svg
from pipeline.report.html import STYLE, ReportError, page_shell, write_page

MAX_POINTS = 400  # a longer curve is drawn as the means of runs of consecutive points
DASH = "–"
COLUMNS = ("date", "experiment", "data", "model (params)", "seed", "tokens", "tokens/s", "data wait", "status")
NOWRAP = ".wide td{white-space:nowrap}"  # a wide table scrolls rather than breaking its dates

__all__ = ["LedgerError", "find_ledger", "render_experiments", "write_experiments_report"]


def render_experiments(ledger_dir: Path) -> str:
    """The HTML page; ``LedgerError`` for an unreadable record, ``ReportError`` for none."""
    ledger_dir = Path(ledger_dir)
    records = read_ledger(ledger_dir)
    if not records:
        raise ReportError(f"{ledger_dir}: no trial records ({SUFFIX} files) yet")
    experiments: dict[str, list[dict]] = {}
    for record in records:  # oldest first, so each list is too
        experiments.setdefault(str(record["experiment"]), []).append(record)
    newest = sorted(experiments.items(), key=lambda item: str(item[1][-1]["date"]), reverse=True)
    sets = _eval_sets(name for record in records for name in _dict(record["final"]))
    nav = [f'<a href="#trials">Trials ({len(records)})</a>'] + [
        f'<a href="#experiment-{i}">{svg.esc(name)}</a>' for i, (name, _) in enumerate(newest, 1)
    ]
    body = [
        '<section id="trials"><h2>Trials</h2><p class="caption">Every trial in the ledger, newest first. '
        "Losses are in nats per token on each evaluation set at the end of training.</p>",
        _table(
            [*COLUMNS, *sets],
            [_trial_row(record, sets) for record in reversed(records)],
        ),
        "</section>",
    ]
    body += [_experiment(i, name, trials) for i, (name, trials) in enumerate(newest, 1)]
    meta = (
        f"{svg.esc(ledger_dir.resolve())} · prep {svg.esc(__version__)} · "
        f"{_count(len(records), 'trial')} in {_count(len(experiments), 'experiment')}"
    )
    return page_shell("prep experiments", ledger_dir.resolve().name, STYLE + NOWRAP, meta, "".join(nav), "".join(body))


def write_experiments_report(ledger_dir: Path, out: Path) -> Path:
    """Render and write atomically; ``ReportError`` naming ``out`` when it cannot be written."""
    return write_page(render_experiments(ledger_dir), out)


def _experiment(index: int, name: str, trials: list[dict]) -> str:
    datas = _unique(_data_name(t) for t in trials)
    colours = {data: svg.colour(i) for i, data in enumerate(datas)}
    seeds = _unique(str(t.get("seed")) for t in trials)
    model = _dict(trials[0]["model"])
    sets = _eval_sets(s for t in trials for s in [*_dict(t["eval"]), *_dict(t["final"])])
    parts = [
        f'<section id="experiment-{index}"><h2>Experiment {svg.esc(name)}</h2><p class="meta">',
        svg.esc(
            f"{trials[-1]['date']} · {_count(len(trials), 'trial')} · data {', '.join(datas)} · "
            f"{_count(len(seeds), 'seed')} · model {_model(model)} · "
            f"device {trials[-1].get('device', '?')}"
        ),
        '</p><h3>Final loss per data</h3><p class="caption">The mean over seeds (lowest and highest '
        "seed in brackets when there are several), in nats per token.</p>",
        _table(["data", "trials", *sets], [_summary_row(d, trials, sets) for d in datas]),
        '<p class="caption">Each line is one trial: its colour is the data, so the lines of one '
        "colour are its seeds and their spread is the noise a difference between data must beat. "
        "Hover a line for its seed and last loss.</p>",
    ]
    for eval_set in sets:
        curves = [(t, _points(_dict(t["eval"]).get(eval_set))) for t in trials]
        parts.append(f"<h3>Loss on {svg.esc(eval_set)}</h3>")
        parts.append(_chart(curves, colours, f"{eval_set}: loss over tokens trained"))
    curves = [(t, _points(t["train_curve"])) for t in trials]
    parts += ["<h3>Training loss</h3>", _chart(curves, colours, "training loss over tokens trained")]
    return "".join(parts) + "</section>"


def _chart(curves: list[tuple[dict, list[tuple[float, float]]]], colours: dict[str, str], title: str) -> str:
    """Loss over tokens trained, one polyline per curve in its DATA's colour; the y axis
    spans the losses (from a round value below the lowest), not 0 upwards."""
    curves = [(trial, _thin(points)) for trial, points in curves if points]
    if not curves:
        return f'<p class="missing">{svg.esc(title)}: no points recorded.</p>'
    xs = [x for _, points in curves for x, _ in points]
    ys = [y for _, points in curves for _, y in points]
    step = svg.nice_ticks(max(max(ys) - min(ys), 1e-3))[1]
    low = math.floor(min(ys) / step) * step
    plot = svg._Plot((min(0.0, min(xs)), max(xs)), max(ys) - low)
    body = plot.axes(svg._linear_ticks(plot), "tokens trained", "loss (nats/token)", lambda v: svg.fmt(v + low))
    for trial, points in curves:
        data = _data_name(trial)
        line = " ".join(f"{plot.x(x):.1f},{plot.y(y - low):.1f}" for x, y in points)
        tip = f"{data} · seed {trial.get('seed')} · {points[-1][1]:.4f} at {svg.fmt(points[-1][0])} tokens"
        body.append(
            f'<polyline points="{line}" fill="none" stroke="{colours[data]}" stroke-width="1.5">'
            f"<title>{svg.esc(tip)}</title></polyline>"
        )
    body += svg._legend(list(colours), plot.left, 16)  # colours are in legend order
    return svg._document(svg.WIDTH, plot.height, title, body)


def _trial_row(record: dict, sets: list[str]) -> list[str]:
    final = _dict(record["final"])
    return [
        str(record["date"])[:16].replace("T", " "),
        str(record["experiment"]),
        _data_name(record),
        _model(_dict(record["model"])),
        str(record.get("seed")),
        _number(record["tokens"], svg.fmt),
        _number(record["tokens_per_s"], svg.fmt),
        _number(record["data_wait_share"], lambda v: f"{v:.1%}"),
        _status(_dict(record["health"])),
        *(_number(final.get(s), lambda v: f"{v:.3f}") for s in sets),
    ]


def _summary_row(data: str, trials: list[dict], sets: list[str]) -> list[str]:
    mine = [t for t in trials if _data_name(t) == data]
    cells = [data, str(len(mine))]
    for eval_set in sets:
        losses = [v for t in mine if _finite(v := _dict(t["final"]).get(eval_set))]
        mean = f"{sum(losses) / len(losses):.3f}" if losses else DASH
        spread = f" ({min(losses):.3f}–{max(losses):.3f})" if len(losses) > 1 else ""
        cells.append(mean + spread)
    return cells


def _status(health: dict) -> str:
    status = str(health.get("status", "?"))
    message = str(health.get("message") or "")
    return f"{status}: {message}" if message and status != "ok" else status


def _model(model: dict) -> str:
    preset, params = str(model.get("preset", "?")), model.get("params")
    return f"{preset} {svg.fmt(params)}" if _finite(params) else preset


def _data_name(record: dict) -> str:
    return str(_dict(record["data"]).get("name", "?"))


def _points(raw: object) -> list[tuple[float, float]]:
    """The ``[tokens, loss]`` pairs of a curve with finite numbers, in order of tokens."""
    pairs = raw if isinstance(raw, list) else []
    good = [p for p in pairs if isinstance(p, list | tuple) and len(p) == 2 and all(_finite(v) for v in p)]
    return sorted((float(x), float(y)) for x, y in good)


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most about ``MAX_POINTS`` points: runs of consecutive points become their means."""
    size = math.ceil(len(points) / MAX_POINTS)
    if size <= 1:
        return points
    runs = [points[i : i + size] for i in range(0, len(points), size)]
    return [(sum(x for x, _ in run) / len(run), sum(y for _, y in run) / len(run)) for run in runs]


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{svg.esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{svg.esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="wide" style="overflow-x:auto">{table}</div>'  # one column per evaluation set


def _number(value: object, form) -> str:
    return form(float(value)) if _finite(value) else DASH


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _unique(values) -> list[str]:
    return list(dict.fromkeys(str(v) for v in values))


def _eval_sets(names) -> list[str]:
    """Held-out sets first (the data's own), then the evaluation files, each by name."""
    return sorted(_unique(names), key=lambda name: (not name.startswith("held-out:"), name))
