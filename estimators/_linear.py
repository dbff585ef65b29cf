"""Shared parts of the linear estimators: scores, lazy prediction, coefficient layout."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._inputs import map_rows, validate_predict


def scores(X, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """``X @ coef.T + intercept`` for a dense or CSR block; 1D when ``coef`` has one row."""
    z = np.asarray(X @ coef.T) + intercept
    return z.ravel() if coef.shape[0] == 1 else z


def split_theta(theta: np.ndarray, n_features: int, fit_intercept: bool):
    """``(coef, intercept)`` of shape (k, n_features) and (k,) from rows of parameters."""
    theta = np.atleast_2d(theta)
    coef = np.ascontiguousarray(theta[:, :n_features])
    intercept = theta[:, n_features].copy() if fit_intercept else np.zeros(theta.shape[0])
    return coef, intercept


class LinearPredictMixin:
    """Row-wise prediction from fitted ``coef_`` and ``intercept_``; lazy on dask input."""

    def _apply(self, X, func, n_out: int | None, dtype=np.float64):
        check_is_fitted(self)
        X, lazy = validate_predict(self, X)
        if lazy:
            return map_rows(X, func, n_out=n_out, dtype=dtype)
        return func(X)

    def _decision(self, X) -> np.ndarray:
        return scores(X, self.coef_, self.intercept_)
