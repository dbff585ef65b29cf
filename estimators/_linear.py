"""Shared parts of the linear estimators: scores, lazy prediction, coefficient layout."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from ._inputs import map_rows, validate_predict


def scores(X, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """``X @ coef.T + intercept`` for a dense or CSR block (``coef`` dense or, after
    ``sparsify()``, CSR); 1D when ``coef`` has one row."""
    product = X @ coef.T
    if sp.issparse(product):
        product = product.toarray()
    z = np.asarray(product) + intercept
    return z.ravel() if coef.shape[0] == 1 else z


def split_theta(theta: np.ndarray, n_features: int, fit_intercept: bool):
    """``(coef, intercept)`` of shape (k, n_features) and (k,) from rows of parameters."""
    theta = np.atleast_2d(theta)
    coef = np.ascontiguousarray(theta[:, :n_features])
    intercept = theta[:, n_features].copy() if fit_intercept else np.zeros(theta.shape[0])
    return coef, intercept


def target_columns(y) -> tuple[list, bool]:
    """The columns of an in-memory regression target as contiguous float64 vectors (one for
    a 1D target), and whether the target was 2D (multi-output: one model per column, as
    scikit-learn's least-squares estimators fit)."""
    Y = np.asarray(y, dtype=np.float64)
    if Y.ndim == 1:
        return [Y], False
    return [np.ascontiguousarray(Y[:, j]) for j in range(Y.shape[1])], True


def stack_fits(coefs: list, intercepts: list, multi: bool, dtype=np.float64, *,
               ravel_one: bool = False):
    """``(coef_, intercept_)`` in scikit-learn's layout: ``(n_features,)`` and a numpy
    scalar for a 1D target, ``(n_targets, n_features)`` and ``(n_targets,)`` for a 2D one
    (``ravel_one``: ``(n_features,)`` and ``(1,)`` for a single column, as scikit-learn's
    Ridge); float32 when the training rows were (as scikit-learn keeps them)."""
    dtype = np.float32 if dtype == np.float32 else np.float64
    if multi and ravel_one and len(coefs) == 1:
        return np.asarray(coefs[0], dtype=dtype), np.asarray(intercepts, dtype=dtype)
    if multi:
        return (np.asarray(np.vstack(coefs), dtype=dtype),
                np.asarray(intercepts, dtype=dtype))
    return np.asarray(coefs[0], dtype=dtype), dtype(intercepts[0])


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

    def _regression(self, X) -> np.ndarray:
        """``X @ coef_.T + intercept_``: a vector for one target, one column per target
        for a 2D ``coef_``."""
        coef = np.asarray(self.coef_)
        if coef.ndim == 1:
            return np.asarray(X @ coef).ravel() + self.intercept_
        return np.asarray(X @ coef.T) + self.intercept_

    def _fits_per_target(self, y) -> int:
        """Engine fits a ``fit(X, y)`` runs: one per column of a 2D target."""
        # read off the shape: y is the caller's object as given (a list, or an array-like
        # that refuses numpy functions), not yet validated
        shape = getattr(y, "shape", None)
        if shape is None and isinstance(y, list | tuple) and y and isinstance(y[0], list | tuple):
            shape = (len(y), len(y[0]))
        return int(shape[1]) if shape is not None and len(shape) == 2 else 1

    def _predict_regression(self, X):
        check_is_fitted(self)
        coef = np.asarray(self.coef_)
        return self._apply(X, self._regression, None if coef.ndim == 1 else coef.shape[0])


def keep_float32(est, dtype, names=("coef_", "intercept_")) -> None:
    """Fitted arrays in float32 when the training rows were float32, as scikit-learn keeps
    them (the engine computes in float64)."""
    if dtype == np.float32:
        for name in names:
            setattr(est, name, np.asarray(getattr(est, name), dtype=np.float32))


class SparseCoefMixin:
    """scikit-learn's ``densify`` and ``sparsify`` of a linear classifier's ``coef_``."""

    def densify(self):
        """Convert the coefficient matrix to a dense array (the format of a fit).

        Returns
        -------
        self : object
            The estimator, ``coef_`` dense.
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before densifying.")
        if sp.issparse(self.coef_):
            self.coef_ = self.coef_.toarray()
        return self

    def sparsify(self):
        """Convert the coefficient matrix to a CSR array, for models with many zeros (an L1
        penalty); ``predict`` and ``decision_function`` take it as it is.

        Returns
        -------
        self : object
            The estimator, ``coef_`` a ``scipy.sparse.csr_array``.
        """
        check_is_fitted(self, msg="Estimator, %(name)s, must be fitted before sparsifying.")
        self.coef_ = sp.csr_array(self.coef_)
        return self
