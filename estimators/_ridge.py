"""Ridge regression solved iteratively on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge as SkRidge

from daskabsp.programs import LinearNewton, hessian_limit

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._linear import LinearPredictMixin, split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    FALSE_ONLY,
    Interval,
    StrOptions,
    reject,
    validate_params,
)

#: scikit-learn's Ridge solvers: all minimise the objective below, so all are accepted and
#: ignored (the engine runs Newton or L-BFGS steps).
RIDGE_SOLVERS = {"auto", "svd", "cholesky", "lsqr", "sparse_cg", "sag", "saga", "lbfgs"}


class Ridge(LinearPredictMixin, RegressorMixin, EngineMixin, BaseEstimator):
    """Ridge regression whose fit runs on a Dask cluster (A-BSP by default).

    Minimises scikit-learn's objective ``||y - X w - b||^2 + alpha ||w||^2`` (weighted by
    ``sample_weight``; the intercept is not penalised) by Newton steps on the engine, not in
    closed form, so that it runs under every synchronisation model. The loss is quadratic, so
    the Newton step on statistics that cover every row once is exact: under BSP the fit takes
    one step (plus one round that confirms it); under A-BSP the steps use the harvested
    statistics until every partition has completed a pass, then the exact pass statistics.

    Every parameter of scikit-learn's class is accepted with its default: ``copy_X``,
    ``solver`` and ``random_state`` are ignored (they choose how scikit-learn solves the same
    problem), ``positive=True`` and an array of ``alpha`` (several targets) are rejected
    with the reason.

    Parameters
    ----------
    alpha : float, default=1.0
        Regularisation strength (non-negative). One value: several targets (an array of
        alphas) are not implemented.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    copy_X : bool, default=True
        Ignored: ``X`` is never modified (the fit only reads it).
    max_iter : int, default=None
        Maximum number of rounds (None: 100).
    tol : float, default=1e-4
        Stop when the gradient of the objective divided by ``2 * sum(sample_weight)`` has no
        entry above ``tol`` and its Newton decrement ``d`` has ``d^2 / 2 <= tol / 100``.
    solver : {"auto", "svd", "cholesky", "lsqr", "sparse_cg", "sag", "saga", "lbfgs"}, \
default="auto"
        Ignored: all minimise the same objective; the engine takes Newton steps (L-BFGS
        steps from Hessian-vector products for many features).
    positive : bool, default=False
        Only ``False``: bound-constrained coefficients are not implemented.
    random_state : int, RandomState instance or None, default=None
        Ignored: the fit draws nothing at random.
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round. Default: the
        whole partition.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds, see
        :class:`~daskabsp.estimators.LogisticRegression`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Coefficients.
    intercept_ : float
        Intercept (0.0 without ``fit_intercept``).
    n_iter_ : ndarray of shape (1,)
        Rounds run.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when the input has string feature names.
    history_ : xarray.Dataset
        The engine's record of the fit.

    See Also
    --------
    sklearn.linear_model.Ridge : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import Ridge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((2_000, 4))
    >>> y = X @ [1.0, -2.0, 0.5, 0.0] + 3.0 + 0.1 * rng.standard_normal(2_000)
    >>> reg = Ridge(alpha=1.0).fit(X, y)
    >>> np.round(reg.coef_, 1) + 0.0, round(float(reg.intercept_), 1)
    (array([ 1. , -2. ,  0.5,  0. ]), 3.0)
    >>> reg.predict(X[:2]).shape, reg.score(X, y) > 0.99
    ((2,), True)
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkRidge

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "fit_intercept": BOOLEAN,
        "copy_X": BOOLEAN,
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "solver": [StrOptions(RIDGE_SOLVERS)],
        "positive": FALSE_ONLY,
        "random_state": ["random_state"],
        **ENGINE_CONSTRAINTS,
    }
    _rejected: dict = {
        "alpha": "daskabsp's Ridge fits one target, with one alpha.",
        "positive": "Bound-constrained (positive) coefficients are not implemented.",
    }

    #: scikit-learn's parameters accepted but without effect here, and why.
    _ignored: dict = {
        "copy_X": "X is never modified: the fit only reads it.",
        "solver": "all minimise the same objective; the engine takes Newton steps (L-BFGS "
                  "steps from Hessian-vector products for many features).",
        "random_state": "the fit draws nothing at random.",
    }

    def __init__(self, alpha=1.0, *, fit_intercept=True, copy_X=True, max_iter=None,
                 tol=1e-4, solver="auto", positive=False, random_state=None, sync="absp",
                 n_partitions=None, quota=None, chunk_target=None, verbose=0):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.positive = positive
        self.random_state = random_state
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def _check_param_combinations(self) -> None:
        """An array of alphas (one per target) passes scikit-learn's constraints; daskabsp's
        Ridge fits one target (called by ``validate_params`` after the constraints)."""
        if not isinstance(self.alpha, Real):
            raise reject(self, "alpha", "a float in the range [0.0, inf)",
                         self._rejected["alpha"])

    def _max_rounds(self) -> int:
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
            The fitted estimator.
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

        res = self._run_engine(program, data, y, sw, max_iter=self._max_rounds(),
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
