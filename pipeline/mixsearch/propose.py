"""The proposal: the allowed mixture of least predicted objective, and its ``prep mix`` line.

The fitted objective is smooth and cheap, so the search is by sampling: many broad
Dirichlet samples over the allowed region (the trials among them), then rounds of samples
ever closer around the best so far (local refinement). Every candidate comes from
``sampling.sample``, so every one meets the bounds and the epoch limit.

The region searched is also held to what the trials measured: each source's share between
the least and the most any trial gave it (``trusted``). Outside that box a fit only
extrapolates, and the log-linear form does so without limit: towards a share of 0 its
log(w + EPS) term runs to -6.9, so a slope fit to noise predicts losses far below any
trial's at a corner no trial came near, a gain that the cross-validated error (measured at
the trials) cannot check. Inside the box a proposal is an interpolation the error vouches for.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
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


def trusted(space: Space, trials: np.ndarray) -> Space:
    """``space`` narrowed to the box of the trials' shares (the fit's support)."""
    low, high = np.maximum(space.low, trials.min(axis=0)), np.minimum(space.high, trials.max(axis=0))
    return replace(space, low=low, high=high)


def propose(space: Space, predict, trials: np.ndarray, candidates: int, seed: int) -> np.ndarray:
    box = trusted(space, trials)

    def inside(draws: np.ndarray) -> np.ndarray:  # drawn in the allowed region, kept in the box
        return draws[box.allowed(draws)]

    pool = np.vstack([trials, inside(sample(space, candidates, BROAD * len(space.sources), seed))])
    best = pool[int(np.argmin(predict(pool)))]
    concentration = 50.0
    for round_ in range(ROUNDS):
        local = np.vstack([best, inside(sample(space, LOCAL, concentration, seed + 1 + round_, around=best))])
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
