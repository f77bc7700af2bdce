"""``prep tokenizer train``: the command line over ``pipeline.text.tokenizer_training``.

``tokenizer_group`` is a click group that the main ``prep`` command attaches.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.commands.options import Finite
from pipeline.text.tokenizer_training import TrainingError, train_sentencepiece


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Train tokenizers on a run's kept documents."""


@tokenizer_group.command("train")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--vocab-size",
    type=click.IntRange(min=1, max=2**31 - 1),  # SentencePiece holds it in an int32
    required=True,
    help="Pieces in the model (at least 259: 256 bytes, unk, bos, eos; plus the sample's characters).",
)
@click.option(
    "--model-type",
    type=click.Choice(["bpe", "unigram"]),
    default="bpe",
    show_default=True,
    help="SentencePiece's algorithm.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the .model (use it as a tokenizer spec).",
)
@click.option(
    "--sample",
    "fraction",
    type=Finite(0, 1, min_open=True),
    default=1.0,
    show_default=True,
    help="Fraction of documents, chosen by a hash of their id.",
)
@click.option(
    "--max-chars",
    type=click.IntRange(min=1),
    default=100_000_000,
    show_default=True,
    help="Stop the sample at about this many bytes of text.",
)
@click.option("--source", "sources", multiple=True, help="Train on these sources only (repeatable).")
@click.option(
    "--threads",
    type=click.IntRange(min=0, max=1024),  # SentencePiece refuses more
    default=0,
    help="Training threads (0: CPUs, at most 8).",
)
def train_command(
    run_dir: Path,
    vocab_size: int,
    model_type: str,
    out: Path,
    fraction: float,
    max_chars: int,
    sources: tuple[str, ...],
    threads: int,
) -> None:
    """Train a SentencePiece model on a hash-sampled slice of RUN_DIR's kept documents."""
    try:
        result = train_sentencepiece(
            run_dir,
            out,
            vocab_size,
            model_type,
            fraction=fraction,
            max_chars=max_chars,
            sources=sources,
            threads=threads,
        )
    except TrainingError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f'wrote {result["model"]} (sha256 {result["sha256"]}); use it as: tokenizer = "{result["model"]}"')
