"""``prep estimate``: training GPU-hours on a mixture; the command line over
``pipeline.mix.estimate``."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.commands.options import Count, Finite
from pipeline.mix.estimate import GPU_PEAK_FLOPS, estimate_hours, mixture_tokens
from pipeline.mix.inventory import MixError


@click.command(short_help="Project training GPU-hours on a mixture (6 x params x tokens).")
@click.argument("mix_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--params", type=Count(), required=True, help="Model parameters, e.g. 1B, 350M, 7e9.")
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True, help="GPUs training together.")
@click.option(
    "--mfu",
    type=Finite(min=0, max=1, min_open=True),
    default=0.4,
    show_default=True,
    help="Model FLOPs utilisation you expect.",
)
@click.option(
    "--gpu",
    type=click.Choice(sorted(GPU_PEAK_FLOPS)),
    default="h100",
    show_default=True,
    help="GPU whose dense BF16 peak to use.",
)
@click.option("--peak-flops", type=Finite(min=0, min_open=True), help="Peak FLOP/s per GPU (overrides --gpu).")
def estimate(mix_dir: Path, params: int, gpus: int, mfu: float, gpu: str, peak_flops: float | None) -> None:
    """Project training GPU-hours on a mixture: 6 x params x tokens / (MFU x peak FLOP/s)."""
    try:
        tokens = mixture_tokens(mix_dir)
    except MixError as error:
        raise click.ClickException(str(error)) from None
    peak = peak_flops or GPU_PEAK_FLOPS[gpu]
    result = estimate_hours(tokens, params, gpus, mfu, peak)
    click.echo(
        f"6 x {params:,} parameters x {tokens:,} tokens = {result['flops']:.3e} FLOPs\n"
        f"at MFU {mfu:g} on {gpus} x {'custom' if peak_flops else gpu} ({peak:.3g} FLOP/s each): "
        f"{result['gpu_hours']:,.4g} GPU-hours, {result['wall_hours']:,.4g} hours of wall time"
    )
