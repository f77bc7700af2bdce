"""``prep report``: the command line over ``pipeline.report``."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("mix_dir", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML page to write.",
)
def report(run_dir: Path, mix_dir: Path | None, out: Path) -> None:
    """Write one self-contained HTML page about RUN_DIR (and the mixture MIX_DIR, if given).

    Charts of what was dropped and why, length distributions before and after, languages,
    classifier scores, duplicate clusters, PII, tokens, CPU time, the mixture over training
    position, and a few rejected documents per rule. The page has no scripts and loads nothing: open it
    anywhere, or attach it to a ticket.
    """
    from pipeline.mix.inventory import MixError
    from pipeline.report.html import ReportError, write_report
    from pipeline.report.mixture import MixtureError

    try:
        path = write_report(run_dir, out, mix_dir)
    except (ReportError, MixtureError, MixError) as error:  # a page that cannot be written too
        raise click.ClickException(str(error)) from None
    except OSError as error:  # a file of the run or mixture that cannot be read
        raise click.ClickException(f"cannot read {error.filename or run_dir}: {error.strerror or error}") from None
    click.echo(f"wrote {path}")
