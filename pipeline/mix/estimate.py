"""Training compute on a mixture, behind ``prep estimate``: GPU-hours by the 6·N·D rule.

Next to the mixture code rather than in ``engine/cost.py``: its input is a mixture (the
token count ``prep mix`` writes into ``mix.json``) and its subject is the training run that
will read it, while ``engine/cost.py`` accounts for the CPU time of the preprocessing run
that made the shards.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.formats.mix import MIX_JSON, MixLayout
from pipeline.mix.inventory import MixError
from pipeline.util.records import COUNT, RecordError, read_record

# Dense BF16 peak FLOP/s per GPU (vendor data sheets, without sparsity).
GPU_PEAK_FLOPS = {
    "a100": 312e12,
    "h100": 989e12,
    "h200": 989e12,
    "b200": 2250e12,
    "l40s": 362e12,
    "mi300x": 1307e12,
}


def mixture_tokens(mix_dir: Path) -> int:
    """The tokens of the mixture in ``mix_dir``, from its ``mix.json``; ``MixError`` without one."""
    mix_json = MixLayout(mix_dir).manifest
    if not mix_json.exists():
        raise MixError(f"{mix_dir} has no {MIX_JSON} (make one with prep mix)")
    try:
        return read_record(mix_json, {"tokens": COUNT})["tokens"]  # all an estimate needs of it
    except RecordError as error:
        raise MixError(str(error)) from None


def estimate_hours(tokens: int, params: float, gpus: int, mfu: float, peak: float) -> dict:
    """Training compute by the 6·N·D rule (forward + backward, dense transformer)."""
    flops = 6.0 * params * tokens
    gpu_hours = flops / (mfu * peak) / 3600
    return {"tokens": tokens, "flops": flops, "gpu_hours": gpu_hours, "wall_hours": gpu_hours / gpus}
