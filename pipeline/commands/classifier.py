"""``prep classifier train`` and ``prep classifier eval``: the command line over
``pipeline.classifier``, whose errors become one-line click errors here.

``classifier_group`` is a click group that the main ``prep`` command attaches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from pipeline.classifier import (
    Hyperparameters,
    default_threads,
    evaluate,
    labeled_files,
    labeled_source,
    metrics_lines,
    train,
)
from pipeline.commands.options import Finite
from pipeline.util.printable import printable_path

DEFAULTS = Hyperparameters(threads=1)


def _progress(line: str) -> None:
    click.echo(line, err=True)


@click.group("classifier", short_help="Train and measure fastText classifiers for the classify stage.")
def classifier_group() -> None:
    """Train and measure fastText document classifiers (for the classify stage)."""


@classifier_group.command("train")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="The model to write.")
@click.option(
    "--data",
    multiple=True,
    metavar="FILE",
    help="Labeled JSON lines or Parquet (fields text, label, optional id); a file or a quoted glob. Repeatable.",
)
@click.option(
    "--positive",
    multiple=True,
    metavar="SRC",
    help="Documents of the positive label: a quoted glob of JSON lines/Parquet files, or a prep run folder "
    "(its kept documents). Repeatable.",
)
@click.option("--negative", multiple=True, metavar="SRC", help="Documents of the negative label, as --positive.")
@click.option(
    "--positive-label",
    help="Label of the --positive documents [default: positive]; with --data, the label whose probability "
    "AUC and calibration are of [default: positive if a label, else the first in sorted order].",
)
@click.option("--negative-label", default="negative", show_default=True, help="Label of the --negative documents.")
@click.option(
    "--max-per-label",
    type=click.IntRange(min=1),
    help="Keep at most N documents of each label: those with the smallest hash of their id (the same on every run).",
)
@click.option(
    "--holdout",
    type=Finite(0, 1, max_open=True),
    default=0.1,
    show_default=True,
    help="Share of documents held out by a hash of their id, never trained on; the metrics are measured on them.",
)
@click.option(
    "--epoch", type=click.IntRange(min=1), default=DEFAULTS.epoch, show_default=True, help="Passes over the documents."
)
@click.option("--lr", type=Finite(min=0, min_open=True), default=DEFAULTS.lr, show_default=True, help="Learning rate.")
@click.option(
    "--word-ngrams",
    type=click.IntRange(min=1),
    default=DEFAULTS.word_ngrams,
    show_default=True,
    help="Longest word n-gram (2: bigrams, as DCLM's released classifier).",
)
@click.option(
    "--dim", type=click.IntRange(min=1), default=DEFAULTS.dim, show_default=True, help="Size of the word vectors."
)
@click.option("--ws", type=click.IntRange(min=1), default=DEFAULTS.ws, show_default=True, help="Context window.")
@click.option(
    "--min-count",
    type=click.IntRange(min=1),
    default=DEFAULTS.min_count,
    show_default=True,
    help="Words seen fewer times are left out.",
)
@click.option(
    "--bucket", type=click.IntRange(min=0), default=DEFAULTS.bucket, show_default=True, help="N-gram buckets."
)
@click.option(
    "--loss",
    type=click.Choice(["softmax", "ova", "hs", "ns"]),
    default=DEFAULTS.loss,
    show_default=True,
    help="fastText's loss: softmax, one-vs-all, hierarchical softmax, negative sampling.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="fastText threads [default: CPUs, at most 4]; with more than 1 the model differs run to run "
    "(fastText's lock-free updates); the sample and split never do.",
)
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="fastText's seed.")
def train_command(
    out: Path,
    data: tuple[str, ...],
    positive: tuple[str, ...],
    negative: tuple[str, ...],
    positive_label: str | None,
    negative_label: str,
    max_per_label: int | None,
    holdout: float,
    threads: int | None,
    **options,
) -> None:
    """Train a fastText classifier on labeled documents and measure it on a held-out split.

    Either --data FILE (records with text and label) or --positive SRC and --negative SRC.
    Documents are preprocessed as DCLM's fastText classifier does (strip, lines joined by
    spaces, case kept). The defaults are those of DCLM's training script (lr 0.1, dim 100,
    ws 5, epoch 5, minCount 1, softmax) with word bigrams, as its released classifier.

    Writes MODEL and MODEL.json (prep version, preprocessing, hyper-parameters, inputs
    with sha256, counts per label, held-out metrics); prints the held-out metrics.
    """
    try:
        if data and (positive or negative):
            raise ValueError("use either --data or --positive and --negative, not both")
        if data:
            sources = labeled_files(data)
        elif positive and negative:
            positive_label = positive_label or "positive"
            if positive_label == negative_label:
                raise ValueError(f"--positive-label and --negative-label are both {positive_label!r}")
            sources = [labeled_source(s, positive_label) for s in positive]
            sources += [labeled_source(s, negative_label) for s in negative]
        else:
            raise ValueError("name the documents: --data FILE, or both --positive SRC and --negative SRC")
        hyper = Hyperparameters(threads=threads or default_threads(), **options)
        sidecar = train(
            sources,
            out,
            hyper,
            max_per_label=max_per_label,
            holdout=holdout,
            positive=positive_label,
            log=_progress,
            verbose=2 if sys.stderr.isatty() else 0,
        )
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    metrics = sidecar["heldout_metrics"]
    if metrics is None:
        click.echo("no held-out documents: no metrics (raise --holdout, or add documents)")
    else:
        click.echo("\n".join(metrics_lines(metrics, "held-out")))


@classifier_group.command("eval")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("data", nargs=-1, required=True)
@click.option(
    "--positive-label",
    help="The label whose probability AUC and calibration are of "
    "[default: the sidecar's, else positive if a label, else the first in sorted order].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def eval_command(model: Path, data: tuple[str, ...], positive_label: str | None, as_json: bool) -> None:
    """Measure MODEL on labeled DATA (JSON lines or Parquet with text and label; files or quoted globs)."""
    try:
        sources = labeled_files(data)
        metrics = evaluate(model, sources, positive_label, log=_progress)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
    else:
        click.echo("\n".join(metrics_lines(metrics, printable_path(model))))
