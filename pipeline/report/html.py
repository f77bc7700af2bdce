"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no URL).

Self-contained so it can be mailed, attached to a ticket or opened from a cluster's
shared disk with nothing else beside it, and render the same in any browser.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline import __version__
from pipeline.formats.layout import Layout
from pipeline.report.collect import COST, MANIFEST, load_json
from pipeline.report.ledger import clip
from pipeline.report.sections import Context, Section, build_sections
from pipeline.report.svg import esc
from pipeline.util.atomic import atomic_path
from pipeline.util.numbers import counted

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:820px;color:#222;line-height:1.4}
h1{margin-bottom:.2em} h2{margin-top:2em;border-bottom:1px solid #ccc} h3{margin:1.2em 0 .3em;font-size:1em}
.meta,.caption,.missing{color:#555;font-size:.9em} nav{display:flex;flex-wrap:wrap;gap:.3em 1em} \
nav a{white-space:nowrap}
svg{display:block;margin:.6em 0;max-width:100%;height:auto}
table{border-collapse:collapse;font-size:.9em;margin:.6em 0} \
th,td{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}
summary{cursor:pointer;margin:.3em 0}
.example{margin:.4em 0 .8em} .where{font-size:.8em;color:#555;word-break:break-all}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.5em;margin:.2em 0;font-size:.85em}
"""


class ReportError(ValueError):
    """RUN_DIR or MIX_DIR is not what the report reads, or the page cannot be written."""


def render_report(run_dir: Path, mix_dir: Path | None = None) -> str:
    layout = Layout(Path(run_dir))
    manifest = load_json(layout.manifest, MANIFEST)
    if manifest is None:
        raise ReportError(f"{run_dir}: not a finished prep run (no manifest.json)")
    ctx = Context(layout, manifest, load_json(layout.cost_summary, COST), Path(mix_dir) if mix_dir else None)
    return page(ctx, build_sections(ctx))


def page(ctx: Context, sections: list[Section]) -> str:
    b = ctx.manifest["balance"]
    meta = (
        f"{esc(ctx.layout.out.resolve())} · config {esc(clip(ctx.manifest.get('config_file', '?'), 300))} · "
        f"prep {esc(__version__)} · "
        f"{counted(b['input'], 'document')} in, {b['output']:,} kept, {b['rejected']:,} rejected"
    )
    if ctx.manifest.get("sample", 1.0) < 1.0:
        meta += f" · a {ctx.manifest['sample']:g} sample of the inputs"
    if ctx.mix_dir is not None:
        meta += f" · mixture {esc(ctx.mix_dir.resolve())}"
    nav = "".join(f'<a href="#{s.id}">{esc(s.title)}</a>' for s in sections)
    body = "".join(
        f'<section id="{s.id}"><h2>{esc(s.title)}</h2><p class="caption">{esc(s.caption)}</p>{s.body}</section>'
        for s in sections
    )
    missing = "".join(f"<li>{esc(m)}</li>" for m in ctx.missing)
    missing = f'<section class="missing"><h2>Not in this run</h2><ul>{missing}</ul></section>' if missing else ""
    return page_shell("prep report", ctx.layout.out.name, STYLE, meta, nav, body + missing)


def write_report(run_dir: Path, out: Path, mix_dir: Path | None = None) -> Path:
    """Render and write atomically (a half-written page is never left under ``out``).

    A page that cannot be written (a read-only folder, ``out`` a directory, a parent that
    cannot be created, a full disk) raises ``ReportError`` naming ``out`` and the OS reason,
    so the command line says so in one line instead of a traceback."""
    return write_page(render_report(run_dir, mix_dir), out)


def page_shell(heading: str, name: str, style: str, meta: str, nav: str, body: str) -> str:
    """A self-contained page of every kind (a run, experiments, a search): ``heading`` is
    its ``<h1>``, and with ``name`` (escaped here) its title."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width"><title>{heading}: {esc(name)}</title>'
        f'<style>{style}</style></head><body><h1>{heading}</h1><p class="meta">{meta}</p>'
        f"<nav>{nav}</nav>{body}</body></html>\n"
    )


def write_page(text: str, out: Path) -> Path:
    """Write a rendered page atomically; ``ReportError`` naming ``out`` when it cannot be."""
    out = Path(out)
    try:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as error:
        raise ReportError(f"cannot write {out}: {_write_failure(out, error)}") from error
    return out


def _write_failure(out: Path, error: OSError) -> str:
    """The OS reason, with the folder it tripped on when that is a parent of ``out`` (the
    temporary file beside ``out`` is an implementation detail and not named)."""
    reason = error.strerror or str(error) or type(error).__name__
    where = error.filename
    if where is None or Path(os.path.abspath(where)) not in Path(os.path.abspath(out)).parents:
        return reason
    if isinstance(error, FileExistsError):  # mkdir met a file where a folder has to be
        return f"{where} is not a directory"
    return f"{reason}: {where}"
