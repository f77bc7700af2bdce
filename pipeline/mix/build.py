"""The whole of ``prep mix`` short of printing: inventory, plan, order, description."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.mix.inventory import MixError, take_inventory
from pipeline.mix.order import MixOrder, build_order
from pipeline.mix.output import describe
from pipeline.mix.plan import make_plan, parse_phase_weights, parse_tokens

# Names of the quality score column, in order of preference, for --curriculum quality.
QUALITY_COLUMNS = ("quality_score", "quality")


def plan_mixture(
    runs: list[Path],
    weights: dict[str, float],
    budget: str | int | None = None,
    rest: str | None = None,
    max_epochs: float = 4.0,
    curriculum: str = "none",
    phases: int = 1,
    phase_weights: str | None = None,
    seed: int = 0,
) -> tuple[dict, MixOrder]:
    inventory = take_inventory(runs)
    if not any(source.tokens for source in inventory.sources.values()):  # it said "weights sum to 0"
        names = ", ".join(map(str, runs))
        raise MixError(f"{names}: no tokens in any source (was every document dropped?): nothing to mix")
    tokens = _budget(budget) if isinstance(budget, str) else budget
    plan = make_plan(
        inventory,
        weights,
        tokens,
        phases=phases,
        phase_weights=parse_phase_weights(phase_weights) if phase_weights else None,
        rest=rest,
        max_epochs=max_epochs,
    )
    keys = {name: _curriculum_key(source, curriculum) for name, source in inventory.sources.items()}
    order = build_order(inventory, plan, seed, keys)
    return describe(inventory, plan, order, seed, curriculum, runs), order


def _budget(text: str) -> int:
    try:
        return parse_tokens(text)
    except MixError as error:
        raise MixError(f"--tokens {error}") from None


def _curriculum_key(source, curriculum: str) -> np.ndarray | None:
    if curriculum == "none":
        return None
    if curriculum == "length":
        return source.lengths.astype(np.float64)
    if curriculum == "quality":
        for column in QUALITY_COLUMNS:
            if column in source.metadata_columns:
                # Easy to hard: the highest quality first.
                return -source.column(column)
        raise MixError(
            f"--curriculum quality: source {source.name!r} has no quality score column "
            f"({' or '.join(QUALITY_COLUMNS)}), which a classify stage with a model named 'quality' adds "
            f"(the quality stage's rules add signals, not a score); or name a column: "
            f"{', '.join(source.metadata_columns) or 'none available'}"
        )
    return source.column(curriculum)
