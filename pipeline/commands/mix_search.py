"""``prep mix search``: the command line over ``pipeline.mixsearch``."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from pipeline.ablate.presets import PRESETS
from pipeline.commands.options import Count, Finite, WeightedFile, training_device_options
from pipeline.util.extras import require
from pipeline.util.numbers import counted


def _shares(text: str, where: str) -> dict[str, float]:
    """``"--code 0.25 --math 0.08"`` (``prep mix``'s own syntax) -> {"code": 0.25, "math": 0.08}."""
    from pipeline.mix.inventory import MixError
    from pipeline.mix.plan import parse_weight

    words, shares = shlex.split(text), {}
    while words:
        word = words.pop(0)
        name, sep, value = word[2:].partition("=")
        if not word.startswith("--") or not name or (not sep and not words):
            raise MixError(f'{where} {text!r}: expected prep mix shares, e.g. "--code 0.25 --math 0.08"')
        shares[name] = parse_weight(value if sep else words.pop(0), f"{where} --{name}")
    return shares


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--trials", type=click.IntRange(min=4), default=16, show_default=True, help="Mixtures to train.")
@click.option("--tokens", type=Count(), default="1M", show_default=True, help="Training tokens per trial.")
@click.option(
    "--eval",
    "eval_files",
    multiple=True,
    required=True,
    type=WeightedFile(),
    help="Eval text (JSON lines or Parquet); FILE:WEIGHT weighs it in the objective (default 1; repeatable).",
)
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False, path_type=Path), help="Search folder.")
@click.option("--target-tokens", type=Count(), help="The big run's tokens [default: every token of the runs].")
@click.option("--max-epochs", type=Finite(min=0, min_open=True), default=4.0, show_default=True,
              help="No proposal repeats a source more at --target-tokens.")  # fmt: skip
@click.option("--bound", "bounds", multiple=True, help="A source's share range, e.g. code=0.05:0.5 (repeatable).")
@click.option("--prior", help='Centre of the sampling instead of the natural shares, relative weights of every '
              'source, e.g. "--code 0.3 --web 0.6 --math 0.1".')  # fmt: skip
@click.option("--concentration", type=Finite(min=0, min_open=True), default=3.0, show_default=True,
              help="Dirichlet concentration: higher samples closer to the centre.")  # fmt: skip
@click.option("--model", "preset", type=click.Choice(list(PRESETS)), default="tiny", show_default=True,
              help="The proxy model, as prep ablate --model.")  # fmt: skip
@click.option(
    "--eval-tokens", type=click.IntRange(min=1), default=16_384, show_default=True, help="Tokens per eval set."
)
@click.option("--eval-points", type=click.IntRange(min=1), default=1, show_default=True,
              help="Evaluations during each trial (for its loss curve); the fits read the last.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling, mixture and initialization seed.")
@click.option("--seeds", type=click.IntRange(min=0), default=0, show_default=True,
              help="Validate: train the proposed and natural mixtures with this many seeds each (3+).")  # fmt: skip
@click.option("--baseline", help='Also validate this mixture, in prep mix shares: "--code 0.25 --math 0.08".')
@training_device_options
def mix_search(runs, trials, tokens, eval_files, out, target_tokens, max_epochs, bounds, prior, concentration,
               preset, eval_tokens, eval_points, seed, seeds, baseline, device, threads) -> None:  # fmt: skip
    """Find the mixture: train the ablate proxy on sampled mixtures, fit, propose.

    Samples --trials mixtures (Dirichlet around the natural token shares, inside --bound
    and --max-epochs at --target-tokens), trains the proxy (--model) on each (one ledger under
    --out: run again to resume), fits each eval set's loss with a log-linear regression
    (RegMix) and a Gaussian process, reports their leave-one-out errors, and proposes the
    mixture of least predicted weighted loss. Ends with the prep mix command for it.

    \b
      prep mix search out/web out/code out/math --trials 16 --tokens 1M \\
          --eval speeches.jsonl:2 --eval code_eval.jsonl --out search --seeds 3
    """
    require("prep mix search", "ablate", "torch", "sklearn")
    from pipeline.mix.inventory import MixError
    from pipeline.mixsearch.sampling import SamplingError, parse_bound
    from pipeline.mixsearch.search import SearchOptions
    from pipeline.mixsearch.trials import TrialSettings

    try:
        parsed = {}
        for text in bounds:
            name, low, high = parse_bound(text)
            parsed[name] = (low, high)
        options = SearchOptions(
            trials=trials,
            settings=TrialSettings(
                runs=list(runs),
                out=out,
                tokens=tokens,
                eval_files=[path for path, _ in eval_files],
                weights={f"eval:{path.name}": weight for path, weight in eval_files},
                preset=preset,
                seed=seed,
                eval_tokens=eval_tokens,
                eval_points=eval_points,
                device=device,
                threads=threads,
            ),
            target_tokens=target_tokens,
            max_epochs=max_epochs,
            bounds=parsed,
            prior=_shares(prior, "--prior") if prior else None,
            concentration=concentration,
            seeds=seeds,
            baseline=_shares(baseline, "--baseline") if baseline else None,
        )
    except (MixError, SamplingError) as error:
        raise click.ClickException(str(error)) from None
    _run(options)


def _run(options) -> None:
    from pipeline.ablate.data import AblationDataError
    from pipeline.ablate.evalsets import EvalSetError
    from pipeline.ablate.evaltexts import EvalTextError
    from pipeline.ablate.trial import TrialError
    from pipeline.formats.experiments import LedgerError
    from pipeline.mix.inventory import MixError
    from pipeline.mixsearch.output import result_lines
    from pipeline.mixsearch.sampling import SamplingError
    from pipeline.mixsearch.search import SearchError, run_search

    def progress(line: str) -> None:
        click.echo(line, err=True)

    errors = (AblationDataError, EvalSetError, EvalTextError, TrialError, LedgerError, MixError, SamplingError)
    try:
        result = run_search(options, progress)
    except (*errors, SearchError) as error:
        raise click.ClickException(str(error)) from None
    out = options.settings.out
    trials, trained = counted(len(result.records), "trial"), counted(result.trained, "training")
    click.echo(f"{trials}; {trained} run now, the rest read from {out}/ledger")
    for line in result_lines(result):
        click.echo(line)
