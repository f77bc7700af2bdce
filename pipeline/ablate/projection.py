"""From the small trial to the full run: what the target model and token count would cost.

Two figures, both from ``prep estimate``'s 6·N·D rule (``pipeline.mix.estimate``):

- **on this device**: the trial's measured rate (tokens/s of a model whose matrix
  products hold N parameters is 6·N·tokens/s FLOP/s achieved) applied to the target's
  6·N·D FLOPs. A small model uses a device less well than a large one, so this is an
  upper bound on the time;
- **by the formula**: GPU-hours at an assumed MFU on a named GPU, as ``prep estimate``
  prints them.

The target token count defaults to the DATA's tokens, or for a ``prep run --sample`` run
the full input's as the run projects them (``AblationData.full_input``; ``note`` says which).
"""

from __future__ import annotations

from pipeline.mix.estimate import GPU_PEAK_FLOPS, estimate_hours


def project(
    *,
    trial_params: int,
    tokens_per_s: float,
    target_params: float,
    target_tokens: int,
    note: str,
    gpu: str = "h100",
    gpus: int = 8,
    mfu: float = 0.4,
) -> dict:
    achieved = 6.0 * trial_params * tokens_per_s
    flops = 6.0 * target_params * target_tokens
    formula = estimate_hours(target_tokens, target_params, gpus, mfu, GPU_PEAK_FLOPS[gpu])
    return {
        "target_params": target_params,
        "target_tokens": target_tokens,
        "target_flops": flops,
        "achieved_flops_per_s": achieved,
        "device_hours_at_measured_rate": flops / achieved / 3600 if achieved else None,
        "formula": {"gpu": gpu, "gpus": gpus, "mfu": mfu, **formula},
        "note": note,
    }


def describe(projection: dict) -> str:
    """One line for the end of an ablation."""
    formula = projection["formula"]
    measured = projection["device_hours_at_measured_rate"]
    at_rate = f"{measured:,.4g} hours on this device at the trial's rate (an upper bound); " if measured else ""
    return (
        f"full run: {projection['target_params']:,.0f} parameters x {projection['target_tokens']:,} tokens = "
        f"{projection['target_flops']:.3g} FLOPs: {at_rate}{formula['gpu_hours']:,.4g} GPU-hours on "
        f"{formula['gpus']} x {formula['gpu']} at MFU {formula['mfu']:g} ({projection['note']})"
    )
