"""From weights and a budget to per-phase, per-source token targets and epochs.

A weight is a share of the mixture's tokens. Sources not named share what is left in
proportion to their tokens, or ``rest`` gives it all to one source. Each source's epochs
are the tokens it must supply divided by the tokens it has; a plan that would repeat a
source more than ``max_epochs`` times is refused (returns from repeated data fall off
after about four epochs, Muennighoff et al. 2023).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.mix.inventory import Inventory, MixError
from pipeline.util.numbers import finite, parse_finite
from pipeline.util.suggest import nearest_hint

WEIGHT_TOLERANCE = 1e-9
SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_tokens(text: str) -> int:
    """``10B`` -> 10_000_000_000 (suffixes K, M, B, T; decimals and exponents allowed:
    ``2.5M``, ``7e9``); also model sizes. A count is at least 1: ``0``, ``nan``, ``inf`` and
    ``1e999`` (which ``float`` reads as infinity) are refused."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:E[+-]?[0-9]+)?)\s*([KMBT]?)\s*", text.upper())
    if not match:
        raise MixError(f"{text!r}: expected a count, a number with an optional K, M, B or T suffix (e.g. 10B, 7e9)")
    count = float(match.group(1)) * SUFFIXES[match.group(2)]
    if not math.isfinite(count) or round(count) < 1:
        raise MixError(f"{text!r}: expected a finite count of at least 1")
    return int(round(count))


def parse_weight(text: str, name: str) -> float:
    """A source's weight, a share of the mixture: a finite number, at least 0."""
    return _number(parse_finite, text, name, at_least=0.0)


def _number(check: Callable[..., float], value: str | float, name: str, **bounds: float) -> float:
    """``check(value, name, **bounds)`` (``finite`` or ``parse_finite``) with its error a
    ``MixError``: a NaN passes every comparison, so it would slip past the checks after it."""
    try:
        return check(value, name, **bounds)
    except ValueError as error:
        raise MixError(str(error)) from None


def parse_phase_weights(text: str) -> list[dict[str, float]]:
    """``"code=0.2,math=0.05;code=0.3,math=0.2"``: one group of weights per phase."""
    phases = []
    for group in text.split(";"):
        weights = {}
        for item in filter(None, (part.strip() for part in group.split(","))):
            name, sep, value = item.partition("=")
            if not sep:
                raise MixError(f"--phase-weights: {item!r} is not SOURCE=WEIGHT")
            weights[name.strip()] = parse_weight(value, f"--phase-weights {name.strip()}")
        phases.append(weights)
    return phases


@dataclass
class Plan:
    budget: int  # tokens in the whole mixture
    phase_budgets: list[int]
    weights: list[dict[str, float]]  # per phase, every source (0 for sources not mixed in)
    targets: list[dict[str, int]]  # per phase, tokens each source supplies
    epochs: dict[str, float]


def _check_source(name: str, inventory: Inventory, where: str) -> None:
    if name not in inventory.sources:
        known = sorted(inventory.sources)
        raise MixError(
            f"{where}: unknown source {name!r}{nearest_hint(name, known)} (the runs have: {', '.join(known)})"
        )


def resolve_weights(named: dict[str, float], inventory: Inventory, rest: str | None, where: str) -> dict[str, float]:
    """Every source's weight: the named ones, and the remainder spread as asked."""
    for name, weight in named.items():
        _check_source(name, inventory, where)
        if _number(finite, weight, f"{where}: weight of {name!r}") < 0:
            raise MixError(f"{where}: weight of {name!r} is negative ({weight})")
    total = sum(named.values())
    if total > 1 + WEIGHT_TOLERANCE:
        raise MixError(f"{where}: weights sum to {total:.4g}, above 1")
    weights = {name: float(named.get(name, 0.0)) for name in inventory.sources}
    remainder = max(0.0, 1.0 - total)
    if remainder <= WEIGHT_TOLERANCE:
        return weights
    if rest is not None:
        _check_source(rest, inventory, "--rest")
        weights[rest] += remainder
        return weights
    unnamed = [n for n in inventory.sources if n not in named and inventory.sources[n].tokens > 0]
    if not unnamed:
        raise MixError(
            f"{where}: weights sum to {total:.4g} and no other source with tokens is left to take the remaining "
            f"{remainder:.4g}; name every source's weight so they sum to 1, or use --rest SOURCE"
        )
    pool = sum(inventory.sources[n].tokens for n in unnamed)
    for name in unnamed:
        weights[name] = remainder * inventory.sources[name].tokens / pool
    return weights


# Far past any curriculum (a handful of phases); bounds the per-phase lists a plan holds.
MAX_PHASES = 10_000


def make_plan(
    inventory: Inventory,
    weights: dict[str, float],
    budget: int | None,
    phases: int = 1,
    phase_weights: list[dict[str, float]] | None = None,
    rest: str | None = None,
    max_epochs: float = 4.0,
) -> Plan:
    _number(finite, max_epochs, "--max-epochs", above=0.0)
    if phase_weights:
        if phases not in (1, len(phase_weights)):
            raise MixError(f"--phases {phases} but --phase-weights gives {len(phase_weights)} phases")
        per_phase = [
            resolve_weights({**weights, **pw}, inventory, rest, f"phase {i + 1}") for i, pw in enumerate(phase_weights)
        ]
    else:
        if phases < 1:
            raise MixError("--phases must be at least 1")
        if phases > MAX_PHASES:  # each phase holds its own weights and targets: 10^8 of them never end
            raise MixError(f"--phases {phases}: at most {MAX_PHASES:,}")
        per_phase = [resolve_weights(weights, inventory, rest, "weights")] * phases
    count = len(per_phase)
    mean_weight = {name: sum(w[name] for w in per_phase) / count for name in inventory.sources}
    for name, weight in mean_weight.items():
        if weight > 0 and inventory.sources[name].tokens == 0:
            raise MixError(f"source {name!r} has weight {weight:.4g} but no tokens (all its documents were dropped?)")
    if budget is None:
        # The largest mixture that uses no source more than once.
        budget = int(min(inventory.sources[n].tokens / w for n, w in mean_weight.items() if w > 0))
    if budget <= 0:
        raise MixError("the token budget must be positive")
    phase_budgets = [budget // count] * count
    phase_budgets[-1] += budget - sum(phase_budgets)
    targets = [{n: int(round(w[n] * b)) for n in inventory.sources} for w, b in zip(per_phase, phase_budgets)]
    epochs = {}
    for name, source in inventory.sources.items():
        needed = sum(t[name] for t in targets)
        epochs[name] = needed / source.tokens if source.tokens else 0.0
        if epochs[name] > max_epochs + 1e-9:
            limit = max_epochs * source.tokens
            raise MixError(
                f"source {name!r} would be repeated {epochs[name]:.2f} times (over --max-epochs {max_epochs:g}) by "
                f"{needed:,} tokens out of {source.tokens:,}: "
                f"lower its weight to <= {mean_weight[name] * limit / needed:.4g}, "
                f"the budget to <= {int(budget * limit / needed):,} tokens, or raise --max-epochs"
            )
    return Plan(budget=budget, phase_budgets=phase_budgets, weights=per_phase, targets=targets, epochs=epochs)
