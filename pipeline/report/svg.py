"""Charts as inline SVG strings: horizontal bars, histogram (with threshold marks), stacked area, line.

Why our own: the report must be one self-contained page that opens anywhere, so charts
are plain SVG markup in the HTML (no JS library, no image files, no matplotlib). The
charts are few and simple, so a small module does them with fixed styling.

Every piece of text (labels, titles, series names) goes through ``esc``: labels come
from data (rule names, language codes, source names) and must never break the markup.
Each mark carries a ``<title>`` so hovering it shows its exact value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np

from pipeline.util.printable import printable

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#999999")
FONT = "font-family:system-ui,sans-serif;font-size:12px"
CHAR_WIDTH = 7  # rough width of one 12px character, for label columns
WIDTH = 760
MAX_LABEL_CHARS = 40


def esc(value: object) -> str:
    """Text made safe for SVG/HTML content and attribute values: markup escaped, and the
    control characters and bidi overrides of ``printable`` written as visible escapes (a
    rejected document's id or text is untrusted input; raw, a U+202E in it reversed what
    the page showed after it, and C0 controls are not allowed in HTML). Newlines and tabs
    stay, for the ``<pre>`` of a document's text."""
    return html.escape(printable(value, text=True), quote=True)


def fmt(value: float) -> str:
    """A number short enough for an axis or a bar end: 1,234 / 12.3k / 4.5M / 0.25."""
    value = float(value)
    magnitude = abs(value)
    if magnitude >= 1e5:
        for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
            if magnitude >= scale:
                return f"{value / scale:.3g}{suffix}"
    if magnitude >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _clip(label: str) -> str:
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"


def _document(width: float, height: float, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(title)}" style="{FONT}">'
        f"<title>{esc(title)}</title>{''.join(body)}</svg>"
    )


def _text(x: float, y: float, content: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{esc(content)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, tip: str) -> str:
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" fill="{fill}">'
        f"<title>{esc(tip)}</title></rect>"
    )


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    """One row of coloured swatches; returns nothing for a single unnamed series."""
    parts, cursor = [], x
    for index, name in enumerate(names):
        parts.append(f'<rect x="{cursor:.1f}" y="{y - 10:.1f}" width="10" height="10" fill="{colour(index)}"/>')
        parts.append(_text(cursor + 14, y, name))
        cursor += 14 + CHAR_WIDTH * len(name) + 18
    return parts


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (1, 2 or 5 times a power of ten apart)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [step * i for i in range(int(math.ceil(high / step - 1e-9)) + 1)]


def hbars(
    labels: Sequence[str],
    series: dict[str, Sequence[float]],
    title: str,
    unit: str = "",
    axes: tuple[str, str] | None = None,
) -> str:
    """Horizontal bars, one row per label, the series stacked left to right.

    A legend appears when there is more than one series; the total is written at the end
    of each bar. ``axes`` (what the rows are, what a bar's length counts) labels both axes,
    for rows whose labels are bare numbers (cluster sizes) that say neither.
    """
    labels = [str(label) for label in labels]
    names = list(series)
    values = np.array([[float(v) for v in series[name]] for name in names]).reshape(len(names), len(labels))
    totals = values.sum(axis=0) if len(names) else np.zeros(len(labels))
    label_width = min(max((len(_clip(label)) for label in labels), default=4), MAX_LABEL_CHARS) * CHAR_WIDTH + 12
    top = (28 if len(names) > 1 else 8) + (18 if axes else 0)
    row, bar = 22, 16
    chart_width = WIDTH - label_width - 70
    scale = chart_width / max(float(totals.max()) if len(labels) else 0.0, 1e-12)
    body = _legend(names, label_width, 16) if len(names) > 1 else []
    height = top + len(labels) * row + 6 + (22 if axes else 0)
    if axes:
        rows_label, values_label = axes
        body.append(_text(4, top - 6, rows_label, extra=' font-weight="bold"'))  # on its own line: any length fits
        body.append(_text(label_width + chart_width / 2, height - 8, values_label, "middle"))
    for i, label in enumerate(labels):
        y = top + i * row
        body.append(_text(label_width - 6, y + bar - 4, _clip(label), "end", f' data-full="{esc(label)}"'))
        x = float(label_width)
        for j, name in enumerate(names):
            width = values[j, i] * scale
            if values[j, i] > 0:
                tip = f"{label}: {fmt(values[j, i])}{unit}" + (f" ({name})" if len(names) > 1 else "")
                body.append(_rect(x, y, width, bar, colour(j), tip))
            x += width
        body.append(_text(x + 4, y + bar - 4, fmt(totals[i]) + unit, extra=' fill="#333"'))
    return _document(WIDTH, height, title, body)


class _Plot:
    """The frame of an x/y chart: margins, scales, axes and tick labels."""

    left, right, top, bottom = 64, 16, 28, 42

    def __init__(self, x_range: tuple[float, float], y_high: float, height: int = 260, width: int = WIDTH):
        self.height, self.width = height, width
        self.x0, self.x1 = x_range
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        self.y_ticks = nice_ticks(y_high)
        self.y1 = self.y_ticks[-1]
        self.inner_w = width - self.left - self.right
        self.inner_h = height - self.top - self.bottom

    def x(self, value: float) -> float:
        return self.left + (value - self.x0) / (self.x1 - self.x0) * self.inner_w

    def y(self, value: float) -> float:
        return self.top + self.inner_h - value / self.y1 * self.inner_h

    def axes(self, x_ticks: list[tuple[float, str]], x_label: str, y_label: str, y_format=fmt) -> list[str]:
        base = self.top + self.inner_h
        parts = [
            f'<line x1="{self.left}" y1="{base}" x2="{self.left + self.inner_w}" y2="{base}" stroke="#333"/>',
            f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{base}" stroke="#333"/>',
        ]
        for value in self.y_ticks:
            y = self.y(value)
            parts.append(
                f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.left + self.inner_w}" y2="{y:.1f}" stroke="#ddd"/>'
            )
            parts.append(_text(self.left - 6, y + 4, y_format(value), "end"))
        for value, label in x_ticks:
            x = self.x(value)
            parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="#333"/>')
            parts.append(_text(x, base + 18, label, "middle"))
        parts.append(_text(self.left + self.inner_w / 2, self.height - 6, x_label, "middle"))
        parts.append(
            _text(
                14,
                self.top + self.inner_h / 2,
                y_label,
                "middle",
                f' transform="rotate(-90 14 {self.top + self.inner_h / 2:.1f})"',
            )
        )
        return parts


def histogram(
    edges: np.ndarray,
    series: dict[str, np.ndarray],
    title: str,
    x_label: str,
    *,
    log_x: bool = True,
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """Counts per bin on a log-scaled x axis (linear with ``log_x=False``); several series
    are overlaid as outlined, translucent steps so a 'before' and an 'after' (or kept and
    dropped) can be compared bin by bin. Each of ``marks``, (x value, label), is a dashed
    vertical line across the plot, labelled at its top: a threshold, say.

    ``edges`` are the bin edges (increasing, positive when log-scaled); each series has
    len(edges) - 1 counts.
    """
    edges = np.asarray(edges, dtype=np.float64)
    logs = np.log10(edges) if log_x else edges
    high = max((float(np.max(c)) for c in series.values() if len(c)), default=0.0)
    plot = _Plot((float(logs[0]), float(logs[-1])), high)
    if log_x:
        decades = range(int(math.ceil(logs[0] - 1e-9)), int(math.floor(logs[-1] + 1e-9)) + 1)
        body = plot.axes([(d, fmt(10.0**d)) for d in decades], x_label, "documents")
    else:
        body = plot.axes(_linear_ticks(plot), x_label, "documents")
    for index, (name, counts) in enumerate(series.items()):
        points, base = [], plot.y(0)
        for k, count in enumerate(counts):
            points += [(plot.x(logs[k]), plot.y(count)), (plot.x(logs[k + 1]), plot.y(count))]
        path = (
            f"M{plot.x(logs[0]):.1f},{base:.1f} "
            + " ".join(f"L{x:.1f},{y:.1f}" for x, y in points)
            + f" L{plot.x(logs[-1]):.1f},{base:.1f} Z"
        )
        body.append(
            f'<path d="{path}" fill="{colour(index)}" fill-opacity="0.25" stroke="{colour(index)}" stroke-width="1.5">'
            f"<title>{esc(name)}: {fmt(float(np.sum(counts)))} documents</title></path>"
        )
    body += _marks(plot, [(math.log10(v) if log_x else v, label) for v, label in marks if v > 0 or not log_x])
    body += _legend(list(series), plot.left, 16)
    return _document(WIDTH, plot.height, title, body)


def _marks(plot: _Plot, marks: Sequence[tuple[float, str]]) -> list[str]:
    """Dashed vertical lines at x values inside the plot, each labelled at its top (on the
    line's left when it stands in the right half, so the label stays inside the chart)."""
    parts, base = [], plot.top + plot.inner_h
    for value, label in marks:
        if not plot.x0 <= value <= plot.x1:
            continue
        x = plot.x(value)
        right_half = x > plot.left + plot.inner_w / 2
        parts.append(
            f'<line x1="{x:.1f}" y1="{plot.top}" x2="{x:.1f}" y2="{base}" stroke="#000" stroke-width="1.5" '
            f'stroke-dasharray="5 3"><title>{esc(label)}</title></line>'
        )
        parts.append(_text(x - 4 if right_half else x + 4, plot.top + 12, label, "end" if right_half else "start"))
    return parts


def stacked_area(
    x: np.ndarray,
    shares: dict[str, np.ndarray],
    title: str,
    x_label: str,
    x_range: tuple[float, float] | None = None,
    targets: Sequence[tuple[float, float, dict[str, float]]] = (),
) -> str:
    """Shares (summing to 1 at each x) stacked bottom to top: a mixture over training.

    ``x_range`` sets the axis (e.g. 0 to all tokens when ``x`` are bin centres). Each of
    ``targets``, (x from, x to, share per series), draws the target shares over its span
    as dashed lines at the stacked boundaries, where each band's top edge should lie."""
    x = np.asarray(x, dtype=np.float64)
    plot = _Plot(x_range or (float(x[0]), float(x[-1])), 1.0)
    body = plot.axes(_linear_ticks(plot), x_label, "share of tokens", lambda v: f"{v:.0%}")
    bottom = np.zeros(len(x))
    for index, (name, share) in enumerate(shares.items()):
        top = bottom + np.asarray(share, dtype=np.float64)
        upper = " ".join(f"L{plot.x(a):.1f},{plot.y(b):.1f}" for a, b in zip(x, top))
        lower = " ".join(f"L{plot.x(a):.1f},{plot.y(b):.1f}" for a, b in zip(x[::-1], bottom[::-1]))
        path = "M" + upper[1:] + " " + lower + " Z"
        mean = float(np.mean(share)) if len(share) else 0.0
        body.append(
            f'<path d="{path}" fill="{colour(index)}" fill-opacity="0.85">'
            f"<title>{esc(name)}: {mean:.1%} on average</title></path>"
        )
        bottom = top
    for start, end, wanted in targets:
        boundary = 0.0
        for name in list(shares)[:-1]:  # the last band's top is always 100%
            boundary += wanted.get(name, 0.0)
            y = plot.y(boundary)
            body.append(
                f'<line x1="{plot.x(start):.1f}" y1="{y:.1f}" x2="{plot.x(end):.1f}" y2="{y:.1f}" stroke="#000" '
                f'stroke-width="1.5" stroke-dasharray="5 3"><title>target share of {esc(name)}: '
                f"{wanted.get(name, 0.0):.1%} (top of its band at {boundary:.1%})</title></line>"
            )
    body += _legend(list(shares), plot.left, 16)
    return _document(WIDTH, plot.height, title, body)


def lines(
    x: np.ndarray,
    series: dict[str, np.ndarray],
    title: str,
    x_label: str,
    y_label: str,
    x_range: tuple[float, float] | None = None,
) -> str:
    """Series as polylines over a shared x; NaN points (bins without data) are skipped and
    their neighbours joined, so a sparse series still shows its trend."""
    x = np.asarray(x, dtype=np.float64)
    ys = {name: np.asarray(y, dtype=np.float64) for name, y in series.items()}
    finite = np.concatenate([y[np.isfinite(y)] for y in ys.values()] or [np.zeros(0)])
    low = min(float(finite.min()), 0.0) if len(finite) else 0.0
    high = float(finite.max()) if len(finite) else 1.0
    plot = _Plot(x_range or (float(x[0]), float(x[-1])), high - low)
    body = plot.axes(_linear_ticks(plot), x_label, y_label, lambda v: fmt(v + low))
    for index, (name, y) in enumerate(ys.items()):
        keep = np.isfinite(y)
        points = " ".join(f"{plot.x(a):.1f},{plot.y(b - low):.1f}" for a, b in zip(x[keep], y[keep]))
        body.append(
            f'<polyline points="{points}" fill="none" stroke="{colour(index)}" stroke-width="1.5">'
            f"<title>{esc(name)}</title></polyline>"
        )
    if len(ys) > 1:
        body += _legend(list(ys), plot.left, 16)
    return _document(WIDTH, plot.height, title, body)


def _linear_ticks(plot: _Plot) -> list[tuple[float, str]]:
    span = plot.x1 - plot.x0
    return [(plot.x0 + t, fmt(plot.x0 + t)) for t in nice_ticks(span) if t <= span * (1 + 1e-9)]
