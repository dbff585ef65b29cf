"""Ridge regression solved iteratively on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from daskabsp.programs import LinearNewton, hessian_limit

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._linear import LinearPredictMixin, split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    NONE,
    RANDOM_STATE,
    Interval,
    validate_params,
)


class Ridge(LinearPredictMixin, RegressorMixin, EngineMixin, BaseEstimator):
    """Ridge regression whose fit runs on a Dask cluster (A-BSP by default).

    Minimises scikit-learn's objective ``||y - X w - b||^2 + alpha ||w||^2`` (weighted by
    ``sample_weight``; the intercept is not penalised) by Newton steps on the engine, not in
    closed form, so that it runs under every synchronisation model. The loss is quadratic, so
    the Newton step on statistics that cover every row once is exact: under BSP the fit takes
    one step (plus one round that confirms it); under A-BSP the steps use the harvested
    statistics until every partition has completed a pass, then the exact pass statistics.

    Parameters
    ----------
    alpha : float, default=1.0
        Regularisation strength (non-negative).
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    max_iter : int, default=None
        Maximum number of rounds (None: 100).
    tol : float, default=1e-4
        Stop when the gradient of the objective divided by ``2 * sum(sample_weight)`` has no
        entry above ``tol`` and its Newton decrement ``d`` has ``d^2 / 2 <= tol``.
    random_state : int, RandomState instance or None, default=None
        Unused; kept for compatibility with scikit-learn.
    sync, n_partitions, quota, chunk_target
        Engine options, see :class:`~daskabsp.estimators.LogisticRegression`.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds, see
        :class:`~daskabsp.estimators.LogisticRegression`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_iter_ : ndarray of shape (1,)
        Rounds run.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
    history_ : xarray.Dataset
        The engine's record of the fit.
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, "left")],
        "fit_intercept": [BOOLEAN],
        "max_iter": [Interval(Integral, 1, None, "left"), NONE],
        "tol": [Interval(Real, 0, None, "left")],
        "random_state": [RANDOM_STATE],
        **ENGINE_CONSTRAINTS,
    }

    def __init__(self, alpha=1.0, *, fit_intercept=True, max_iter=None, tol=1e-4,
                 random_state=None, sync="absp", n_partitions=None, quota=None,
                 chunk_target=None, verbose=0):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def _callback_max_rounds(self) -> int:
        return 100 if self.max_iter is None else int(self.max_iter)

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
        sample_weight : array-like or dask array of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight, y_numeric=True)
        y = data.y if data.lazy else np.asarray(data.y, dtype=np.float64)
        if data.lazy:
            y = y.astype(np.float64)
        sw = data.sample_weight
        if sw is None:
            total = float(data.n_samples)
        else:
            total = float(sw.sum().compute() if data.lazy else sw.sum())
        d = data.X.shape[1]
        program = LinearNewton(loss="squared", l2=self.alpha / max(total, 1e-300),
                               fit_intercept=self.fit_intercept, tol=self.tol,
                               max_hessian=hessian_limit(data.n_samples))

        def attributes(theta):
            coef, intercept = split_theta(theta, d, self.fit_intercept)
            return {"coef_": coef[0], "intercept_": float(intercept[0])}

        res = self._run_engine(program, data, y, sw, max_iter=self._callback_max_rounds(),
                               attributes=attributes)
        for name, value in attributes(res.coef).items():
            setattr(self, name, value)
        self.n_iter_ = np.array([res.n_iter], dtype=np.int32)
        return self

    def _decision(self, X) -> np.ndarray:
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

    def predict(self, X):
        """Predict with the fitted linear model.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
            A dask array (lazy) when ``X`` is dask-backed.
        """
        return self._apply(X, self._decision, None)
