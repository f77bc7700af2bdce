"""The proposal: the allowed mixture of least predicted objective, and its ``prep mix`` line.

The fitted objective is smooth and cheap, so the search is by sampling: many broad
Dirichlet samples over the allowed region (the trials among them), then rounds of samples
ever closer around the best so far (local refinement). Every candidate comes from
``sampling.sample``, so every one meets the bounds and the epoch limit.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

from pipeline.mix.inventory import Inventory
from pipeline.mix.plan import make_plan
from pipeline.mixsearch.sampling import Space, sample

BROAD = 1.0  # concentration of the broad candidates (times the centre)
ROUNDS = 5  # rounds of local refinement
LOCAL = 512  # candidates per round
TIGHTEN = 4.0  # each round's concentration, times the last (starting at 50)
DECIMALS = 4  # shares printed in the prep mix command


def propose(space: Space, predict, trials: np.ndarray, candidates: int, seed: int) -> np.ndarray:
    pool = np.vstack([trials, sample(space, candidates, BROAD * len(space.sources), seed)])
    best = pool[int(np.argmin(predict(pool)))]
    concentration = 50.0
    for round_ in range(ROUNDS):
        local = np.vstack([best, sample(space, LOCAL, concentration, seed + 1 + round_, around=best)])
        best = local[int(np.argmin(predict(local)))]
        concentration *= TIGHTEN
    return best


def command_weights(sources: list[str], shares: np.ndarray) -> dict[str, float]:
    """Shares for ``prep mix``: every source but the largest, rounded down to ``DECIMALS``
    (so they never sum above 1); the largest takes what is left, as ``prep mix`` gives the
    unnamed source."""
    largest = int(np.argmax(shares))
    scale = 10**DECIMALS
    return {
        name: np.floor(share * scale) / scale for i, (name, share) in enumerate(zip(sources, shares)) if i != largest
    }


def mix_command(
    runs: list[Path], inventory: Inventory, weights: dict[str, float], target: int, max_epochs: float
) -> str:
    """The ``prep mix`` line for ``weights`` at the big run's size; planned here first, so a
    line that ``prep mix`` would refuse is never printed."""
    make_plan(inventory, weights, target, max_epochs=max_epochs)
    words = ["prep", "mix", *(str(run) for run in runs)]
    for name, share in weights.items():
        words += [f"--{name}", f"{share:.{DECIMALS}f}".rstrip("0").rstrip(".") or "0"]
    words += ["--tokens", str(target), "--max-epochs", f"{max_epochs:g}", "--out", "MIX_DIR"]
    return shlex.join(words)
