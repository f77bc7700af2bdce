"""``prep ablate``: the command line over ``pipeline.ablate``."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.ablate.presets import PRESETS
from pipeline.commands.options import Count, Finite, WeightedFile, training_device_options
from pipeline.util.extras import require
from pipeline.util.numbers import counted


@click.command(short_help="Train a small model on each DATA and compare held-out losses.")
@click.argument("data", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tokens", type=Count(), default="20M", show_default=True, help="Training tokens per trial.")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), help="Folder for the ablation.")
@click.option(
    "--model",
    "preset",
    type=click.Choice(list(PRESETS)),
    default="tiny",
    show_default=True,
    help="Model size: tiny trains millions of tokens in minutes on a CPU; gpt2-124m wants a GPU.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True, help="Trials per DATA.")
@click.option(
    "--eval",
    "eval_files",
    multiple=True,
    type=WeightedFile(),
    help="Also evaluate on this JSON lines or Parquet file of texts; FILE:WEIGHT weighs it in the objective "
    "(default 1; repeatable).",
)
@click.option(
    "--eval-mc",
    "choice_files",
    multiple=True,
    type=WeightedFile(),
    help="Also score this JSON lines file of multiple-choice questions (HellaSwag, ARC, PIQA shapes: docs/ablate.md); "
    "FILE:WEIGHT as for --eval (repeatable).",
)
@click.option(
    "--held-out-weight",
    type=Finite(min=0),
    default=1.0,
    show_default=True,
    help="Weight of each held-out set in the objective.",
)
@click.option(
    "--held-out",
    type=Finite(0, 0.5, min_open=True),
    default=0.02,
    show_default=True,
    help="Share of each DATA's documents (by id hash) kept out of training for evaluation.",
)
@click.option(
    "--eval-tokens", type=click.IntRange(min=1), default=65_536, show_default=True, help="Tokens per eval set, at most."
)
@click.option(
    "--eval-points", type=click.IntRange(min=1), default=8, show_default=True, help="Evaluations during training."
)
@click.option("--seq-len", type=click.IntRange(min=8), help="Context length [default: the model preset's].")
@click.option("--batch-size", type=click.IntRange(min=1), help="Windows per step [default: the preset's].")
@click.option("--lr", type=Finite(min=0, min_open=True), help="Peak learning rate [default: the preset's].")
@click.option("--workers", type=click.IntRange(min=0), default=1, show_default=True, help="Loader worker processes.")
@training_device_options
@click.option("--full-vocab", is_flag=True, help="Keep every id of the tokenizer instead of those that occur.")
@click.option("--ledger", type=click.Path(file_okay=False, path_type=Path), help="Ledger folder [default: OUT/ledger].")
@click.option("--target-params", type=Count(), default="1B", show_default=True, help="Full run's model size.")
@click.option("--target-tokens", type=Count(), help="Full run's tokens [default: each DATA's, full input].")
@click.option("--history", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Print a ledger.")
def ablate(data, tokens, out, preset, seeds, eval_files, choice_files, held_out_weight, held_out, eval_tokens,
           eval_points, seq_len, batch_size, lr, workers, device, threads, full_vocab, ledger, target_params,
           target_tokens, history) -> None:  # fmt: skip
    """Train the same small model on each DATA and compare them on held-out text.

    Each DATA is a run folder, a token-shard folder or a prep mix folder. Every trial
    starts from the same initialization (per seed) and trains the same token budget
    through prep's loader; each is evaluated during training on every DATA's held-out
    documents (chosen by id hash) and on each --eval file (JSON lines or Parquet with a
    text field), in nats per token and bits per byte of the text. The verdict says which
    DATA wins each eval set and whether the difference exceeds the seed spread (--seeds 3
    or more to know); DATA tokenized differently are compared on bits per byte. Each
    --eval-mc file is scored as accuracy and the right answer's log-likelihood per
    character, and the DATA on the objective (the eval losses weighted by FILE:WEIGHT).
    Every trial is recorded in the ledger (OUT/ledger); running the same command again
    skips finished trials.

    \b
      prep ablate out/raw out/filtered --tokens 5M --seeds 3 --eval speeches.jsonl:2 \\
          --eval-mc hellaswag.jsonl --out ablation
      prep ablate --history ablation/ledger
      prep report ablation            # loss curves as an HTML page

    Needs torch: pip install -e ".[ablate]".
    """
    from pipeline.formats.experiments import LedgerError, find_ledger, read_ledger

    if history is not None:
        from pipeline.ablate.history import history_table

        try:
            click.echo(history_table(read_ledger(find_ledger(history) or history)))
        except LedgerError as error:
            raise click.ClickException(str(error)) from None
        return
    if len(data) < 1 or out is None:
        raise click.UsageError("give one or more DATA folders and --out (or --history LEDGER)")
    require("prep ablate", "ablate", "torch")
    from pipeline.ablate.ablation import AblationOptions

    options = AblationOptions(
        data=list(data),
        out=out,
        tokens=tokens,
        preset=preset,
        seq_len=seq_len,
        batch_size=batch_size,
        lr=lr,
        seeds=seeds,
        eval_files=[path for path, _ in eval_files],
        choice_files=[path for path, _ in choice_files],
        weights={
            **{f"eval:{path.name}": weight for path, weight in eval_files},
            **{f"mc:{path.name}": weight for path, weight in choice_files},
        },
        held_out_weight=held_out_weight,
        held_out=held_out,
        eval_tokens=eval_tokens,
        eval_points=eval_points,
        workers=workers,
        device=device,
        threads=threads,
        ledger=ledger,
        remap_vocab=not full_vocab,
        target_params=float(target_params),
        target_tokens=target_tokens,
    )
    _run(options)


def _run(options) -> None:
    from pipeline.ablate.ablation import run_ablation
    from pipeline.ablate.data import AblationDataError
    from pipeline.ablate.evalsets import EvalSetError
    from pipeline.ablate.evaltexts import EvalTextError
    from pipeline.ablate.multiple_choice import MultipleChoiceError
    from pipeline.ablate.projection import describe
    from pipeline.ablate.trial import TrialError
    from pipeline.formats.experiments import LedgerError

    def progress(line: str) -> None:
        click.echo(line, err=True)

    try:
        result = run_ablation(options, progress)
    except (AblationDataError, EvalSetError, EvalTextError, MultipleChoiceError, TrialError, LedgerError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"experiment {result.experiment}: {counted(len(result.records), 'trial')}, {result.trained} trained now")
    for record in result.records:
        health = record["health"]
        rate = f"{record['tokens_per_s']:,.0f} tokens/s" if record["tokens_per_s"] else "no timed steps"
        click.echo(
            f"  {record['data']['name']} seed {record['seed']}: {record['tokens']:,} tokens, {rate}, "
            f"data wait {record['data_wait_share']:.1%}; {health['message']}"
        )
    click.echo("verdict:")
    for line in result.verdict:
        click.echo(f"  {line}" if line else "")
    seen = set()
    for record in result.records:
        if record["data"]["name"] not in seen:
            seen.add(record["data"]["name"])
            click.echo(f"{record['data']['name']}: {describe(record['projection'])}")
    ledger = options.ledger_dir
    click.echo(f"ledger: {ledger} (prep ablate --history {ledger}; prep report {options.out} -o ablation.html)")
