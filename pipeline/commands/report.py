"""``prep report``: the command line over ``pipeline.report``."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(short_help="Write one HTML page about a run, mixture, ablation or search.")
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
    """Write one self-contained HTML page about RUN_DIR (and the mixture MIX_DIR, if given),
    or about the trials of `prep ablate` or `prep mix search`.

    \b
      prep report RUN_DIR [MIX_DIR]   a prep run (and its mixture)
      prep report ABLATE_OUT          the trials `prep ablate --out ABLATE_OUT` recorded
      prep report SEARCH_OUT          the search `prep mix search --out SEARCH_OUT` ran

    For a run: charts of what was dropped and why, length distributions before and after,
    languages, classifier scores, duplicate clusters, PII, tokens, CPU time, the mixture
    over training position, and a few rejected documents per rule.

    For an ablation (ABLATE_OUT, its ledger/ folder, or any folder of *.trial.json
    records): a table of every trial with its final losses, and per experiment the final
    loss per data and the loss curves over tokens trained, one chart per evaluation set
    and one of the training loss.

    For a search (a folder with search.json): each fit's leave-one-out prediction against
    the measured loss of every trial, each source's share against loss, the proposed
    mixture against the natural one with their predicted losses, and a table of trials.

    The page has no scripts and loads nothing: open it anywhere, or attach it to a ticket.
    """
    from pipeline.formats.experiments import SearchFolder
    from pipeline.formats.unreadable import UnreadableFile
    from pipeline.mix.inventory import MixError
    from pipeline.report.experiments import LedgerError, find_ledger, write_experiments_report
    from pipeline.report.html import ReportError, write_report
    from pipeline.report.mixture import MixtureError
    from pipeline.report.search import is_search, write_search_report
    from pipeline.util.records import RecordError

    search = is_search(run_dir)  # checked first: a search folder also holds its trials' ledger
    ledger = None if search else find_ledger(run_dir)
    if (search or ledger is not None) and mix_dir is not None:
        kind = "a mixture search" if search else "ablation trials"
        raise click.UsageError(f"{run_dir} holds {kind}; MIX_DIR goes with a prep run only")
    try:
        if search:
            path = write_search_report(run_dir, out)
        elif ledger is not None:
            path = write_experiments_report(ledger, out)
        else:
            path = write_report(run_dir, out, mix_dir)
    # A folder or record that is not what the report reads, or a page that cannot be written.
    except (ReportError, MixtureError, MixError, LedgerError, RecordError, UnreadableFile) as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:  # a file of the run or mixture that cannot be read
        raise click.ClickException(f"cannot read {error.filename or run_dir}: {error.strerror or error}") from None
    click.echo(f"wrote {path}")
    if ledger is not None and SearchFolder(run_dir).trial("key").parent.is_dir():
        click.echo(f"{run_dir}: a mix search cut short (no search.json): its finished trials drawn; run it again")
