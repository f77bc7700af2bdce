"""Mixtures to try: Dirichlet samples around a centre, inside bounds and the epoch limit.

A mixture is a vector of per-source shares summing to 1. The centre is the natural token
shares (each source's tokens over all) or a user prior; ``concentration`` scales it into
the Dirichlet's parameters, so a large value samples close to the centre and a small one
spreads samples towards the corners. A sample is kept only when every share lies inside
its bounds and no source would be repeated more than ``max_epochs`` times in a run of
``target_tokens``: share x target <= max_epochs x the source's tokens. Rejection keeps the
samples Dirichlet-distributed on the allowed region; the generator is seeded, so the same
arguments always give the same mixtures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.util.numbers import parse_finite

# Proposals drawn per round of rejection sampling, and the rounds allowed before giving up.
BATCH = 4096
ROUNDS = 256
FLOOR = 1e-3  # the smallest Dirichlet parameter: lower ones give shares that underflow to 0


class SamplingError(ValueError):
    """Constraints no mixture meets, or a bound that cannot be read."""


@dataclass(frozen=True)
class Space:
    """The allowed mixtures: sources (sorted), their tokens, the share bounds and centre."""

    sources: list[str]
    tokens: np.ndarray  # int64 tokens per source
    low: np.ndarray
    high: np.ndarray  # the bounds, tightened by the epoch limit
    centre: np.ndarray  # shares, summing to 1
    empty: tuple[str, ...] = ()  # sources with no tokens, left out (their share is 0)

    @property
    def natural(self) -> np.ndarray:
        return self.tokens / self.tokens.sum()

    def allowed(self, shares: np.ndarray) -> np.ndarray:
        """Per row of ``shares``: inside every bound (with rounding slack)."""
        return np.all((shares >= self.low - 1e-12) & (shares <= self.high + 1e-12), axis=-1)


def parse_bound(text: str) -> tuple[str, float, float]:
    """``code=0.05:0.5`` -> ("code", 0.05, 0.5); either side may be empty (``code=:0.3``)."""
    name, sep, span = text.partition("=")
    low, colon, high = span.partition(":")
    if not sep or not colon or not name.strip():
        raise SamplingError(f"--bound {text!r}: expected SOURCE=MIN:MAX, e.g. code=0.05:0.5")
    try:
        lo = parse_finite(low, f"--bound {name} minimum", at_least=0.0) if low.strip() else 0.0
        hi = parse_finite(high, f"--bound {name} maximum", at_least=0.0) if high.strip() else 1.0
    except ValueError as error:
        raise SamplingError(str(error)) from None
    if lo > hi or hi > 1:
        raise SamplingError(f"--bound {text!r}: need 0 <= MIN <= MAX <= 1")
    return name.strip(), lo, hi


def make_space(
    tokens: dict[str, int],
    bounds: dict[str, tuple[float, float]],
    target_tokens: int,
    max_epochs: float,
    prior: dict[str, float] | None = None,
) -> Space:
    """The allowed region; ``SamplingError`` names the constraint that leaves no mixture.

    A source with no tokens (every document dropped) is left out: no mixture can draw from
    it, and ``prep mix`` refuses any share of it above 0."""
    for name in [*bounds, *(prior or {})]:
        if name not in tokens:
            raise SamplingError(f"unknown source {name!r} (the runs have: {', '.join(sorted(tokens))})")
    empty = tuple(sorted(name for name, count in tokens.items() if count <= 0))
    for name in empty:
        if bounds.get(name, (0.0, 1.0))[0] > 0:
            raise SamplingError(f"--bound {name}: source {name!r} has no tokens, so it cannot have a share above 0")
    sources = sorted(name for name in tokens if name not in empty)
    if not sources:
        raise SamplingError("the runs hold no tokens")
    if len(sources) == 1:
        raise SamplingError(
            f"the runs hold one source with tokens ({sources[0]}): there is no mixture to search; "
            "give runs of two or more sources"
        )
    counts = np.array([tokens[name] for name in sources], dtype=np.int64)
    low = np.array([bounds.get(name, (0.0, 1.0))[0] for name in sources])
    high = np.array([bounds.get(name, (0.0, 1.0))[1] for name in sources])
    high = np.minimum(high, max_epochs * counts / target_tokens)  # the repetition limit
    for name, lo, hi in zip(sources, low, high, strict=True):
        if lo > hi + 1e-12:
            raise SamplingError(
                f"source {name!r} needs a share of at least {lo:g}, but {max_epochs:g} epochs of its "
                f"{tokens[name]:,} tokens allow at most {hi:.4g} of --target-tokens {target_tokens:,}"
            )
    if low.sum() > 1 + 1e-9 or high.sum() < 1 - 1e-9:
        raise SamplingError(
            f"no mixture fits: the minimum shares sum to {low.sum():.4g} and the maximum shares (after "
            f"--max-epochs at --target-tokens) to {high.sum():.4g}; a mixture's shares sum to 1: loosen --bound, "
            "raise --max-epochs or lower --target-tokens"
        )
    centre = counts / counts.sum()
    if prior:
        missing = [name for name in sources if name not in prior]
        if missing:  # a Dirichlet parameter of FLOOR: every trial would give them shares near 0
            raise SamplingError(
                f"--prior names no share for {', '.join(missing)}, so every trial would give it almost none: "
                f"give each source a share (relative weights), e.g. --{missing[0]} 1"
            )
        named = np.array([prior[name] for name in sources])
        if named.sum() <= 0:
            raise SamplingError("--prior: the shares sum to 0")
        centre = named / named.sum()
    return Space(sources, counts, low, high, centre, empty)


def sample(space: Space, count: int, concentration: float, seed: int, around: np.ndarray | None = None) -> np.ndarray:
    """``count`` allowed mixtures (rows), Dirichlet around ``around`` (default: the centre)."""
    rng = np.random.default_rng(seed)
    alpha = np.maximum(concentration * (space.centre if around is None else around), FLOOR)
    kept: list[np.ndarray] = []
    found = 0
    for _ in range(ROUNDS):
        draws = rng.dirichlet(alpha, size=BATCH)
        good = draws[space.allowed(draws)]
        kept.append(good)
        found += len(good)
        if found >= count:
            return np.concatenate(kept)[:count]
    raise SamplingError(
        f"only {found} of {ROUNDS * BATCH:,} Dirichlet samples met the bounds and --max-epochs; "
        "loosen them, lower --concentration, or give a --prior inside them"
    )
