"""From mixture weights to an eval set's loss: two regressions and their held-out errors.

``LogLinear`` is RegMix's log-linear form (not its linear-on-weights one): loss = a +
sum_i b_i log(w_i + EPS), fit by ridge least squares in numpy. Loss tends to fall like a
power of a source's share, which is linear in its logarithm; EPS keeps a source at share 0
finite. The ridge penalty (not on the intercept) keeps the fit defined when there are
fewer trials than sources. ``GaussianProcess`` is scikit-learn's regressor on the shares
themselves (an RBF kernel plus white noise, hyperparameters by marginal likelihood): no
assumed form, so it shows whether the log-linear form is the limit.

``loo_errors`` refits each model without each trial in turn and predicts it: the root mean
square of those errors is the figure to compare a predicted difference with.

A known limit of the log-linear form: a source whose eval loss turns up steeply as its share
nears 0 (an eval set only that source covers, e.g. code at a share of 1-3%) rises faster than
log(share) can follow, and with few trials the misfit leaks into the other sources' slopes
(on the simplex the shares are correlated), even with the wrong sign. The leave-one-out
error shows it (large on that eval set); a lower ``--bound`` on such a source keeps the
trials out of that region.
"""

from __future__ import annotations

import warnings

import numpy as np

EPS = 1e-3
RIDGE = 1e-3


class LogLinear:
    name = "log-linear"

    def __init__(self, ridge: float = RIDGE):
        self.ridge = ridge

    @staticmethod
    def _features(shares: np.ndarray) -> np.ndarray:
        logs = np.log(np.asarray(shares, dtype=np.float64) + EPS)
        return np.hstack([np.ones((len(logs), 1)), logs])

    def fit(self, shares: np.ndarray, losses: np.ndarray) -> LogLinear:
        x = self._features(shares)
        penalty = self.ridge * np.eye(x.shape[1])
        penalty[0, 0] = 0.0  # the intercept is not shrunk
        # Ridge as an augmented least-squares problem: [X; sqrt(P)] c = [y; 0].
        stacked = np.vstack([x, np.sqrt(penalty)])
        target = np.concatenate([np.asarray(losses, dtype=np.float64), np.zeros(x.shape[1])])
        self.coef, *_ = np.linalg.lstsq(stacked, target, rcond=None)
        return self

    def predict(self, shares: np.ndarray) -> np.ndarray:
        return self._features(np.atleast_2d(shares)) @ self.coef


class GaussianProcess:
    name = "gaussian process"

    def fit(self, shares: np.ndarray, losses: np.ndarray) -> GaussianProcess:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(0.3, (1e-2, 1e2)) + WhiteKernel(1e-3, (1e-8, 1.0))
        self.model = GaussianProcessRegressor(kernel, normalize_y=True, random_state=0, n_restarts_optimizer=2)
        with warnings.catch_warnings():  # a hyperparameter at its bound (no noise, say) is a fit, not a fault
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model.fit(np.asarray(shares, dtype=np.float64), np.asarray(losses, dtype=np.float64))
        return self

    def predict(self, shares: np.ndarray) -> np.ndarray:
        return self.model.predict(np.atleast_2d(shares))


MODELS = (LogLinear, GaussianProcess)


def loo_predictions(model_class, shares: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """Each trial's loss as predicted by the model fit on all the other trials."""
    predictions = np.empty(len(losses))
    for left_out in range(len(losses)):
        keep = np.arange(len(losses)) != left_out
        predictions[left_out] = model_class().fit(shares[keep], losses[keep]).predict(shares[left_out])[0]
    return predictions


def rmse(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(predicted) - np.asarray(measured)) ** 2)))


class Objective:
    """One model class fit per eval set, combined into the weighted loss the search minimizes."""

    def __init__(self, model_class, shares: np.ndarray, losses: dict[str, np.ndarray], weights: dict[str, float]):
        self.name = model_class.name
        self.weights = {name: weights.get(name, 1.0) for name in losses}
        total = sum(self.weights.values())
        if total <= 0:
            raise ValueError("every eval set has weight 0: nothing to minimize")
        self.weights = {name: w / total for name, w in self.weights.items()}
        self.models = {name: model_class().fit(shares, values) for name, values in losses.items()}
        self.loo = {name: loo_predictions(model_class, shares, values) for name, values in losses.items()}
        self.errors = {name: rmse(self.loo[name], losses[name]) for name in losses}
        measured = sum(self.weights[name] * losses[name] for name in losses)
        self.loo_objective = sum(self.weights[name] * self.loo[name] for name in losses)
        self.error = rmse(self.loo_objective, measured)  # the objective's leave-one-out error

    def predict(self, shares: np.ndarray) -> np.ndarray:
        return sum(self.weights[name] * model.predict(shares) for name, model in self.models.items())
