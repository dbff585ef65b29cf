"""Ridge regression solved iteratively on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge as SkRidge

from daskabsp.programs import LinearNewton, ProximalLinear, hessian_limit

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._least_squares import moments_fit, narrow
from ._linear import LinearPredictMixin, split_theta, stack_fits, target_columns
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    StrOptions,
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
    problem). A 2D target is fitted one column at a time (one engine fit per target), each
    with its own ``alpha`` when an array of them is given.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Regularisation strength (non-negative); an array gives each target its own.
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
        Constrain the coefficients to be non-negative (projected proximal Newton steps,
        :class:`daskabsp.programs.ProximalLinear`). As in scikit-learn, only with ``solver``
        ``"auto"`` or ``"lbfgs"``, and ``"lbfgs"`` only with it.
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
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients (float32 for float32 ``X``, as scikit-learn).
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept (0.0 without ``fit_intercept``).
    n_iter_ : ndarray of shape (n_targets,)
        Rounds run for each target.
    solver_ : str
        The solver scikit-learn's Ridge would report (``solver``, or what its ``"auto"``
        picks for this input). daskabsp's own steps are the same whatever it says.
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
        "positive": BOOLEAN,
        "random_state": ["random_state"],
        **ENGINE_CONSTRAINTS,
    }
    _rejected: dict = {}

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
        """scikit-learn's rules for ``solver`` with ``positive`` (called by
        ``validate_params`` after the constraints), so that code written for its Ridge meets
        the same errors."""
        if self.solver == "lbfgs" and not self.positive:
            raise ValueError("'lbfgs' solver can be used only when positive=True. "
                             "Please use another solver.")
        if self.positive and self.solver not in ("auto", "lbfgs"):
            raise ValueError(
                f"solver='{self.solver}' does not support positive fitting. Please set the "
                "solver to 'auto' or 'lbfgs', or set `positive=False`")

    def _solver(self, sparse: bool) -> str:
        """``solver_``: the solver scikit-learn's Ridge would report for this input (the
        given one, or what its ``"auto"`` resolves to); daskabsp minimises the same
        objective by its own steps whatever it says."""
        if sparse and self.fit_intercept and not self.positive and self.solver not in (
                "auto", "lbfgs", "lsqr", "sag", "sparse_cg"):
            raise ValueError(
                f"solver='{self.solver}' does not support fitting the intercept on sparse "
                "data. Please set the solver to 'auto' or 'lsqr', 'sparse_cg', 'sag', "
                "'lbfgs' or set `fit_intercept=False`")
        if self.solver != "auto":
            return self.solver
        if self.positive:
            return "lbfgs"
        return "sparse_cg" if sparse else "cholesky"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # a 2D target: one fit per column
        return tags

    def _max_rounds(self) -> int:
        return 100 if self.max_iter is None else int(self.max_iter)

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets), or dask array of \
(n_samples,)
        sample_weight : array-like or dask array of shape (n_samples,), default=None

        Returns
        -------
        self : object
            The fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight, y_numeric=True,
                            multi_output=True)
        if data.lazy:
            columns, multi = [data.y.astype(np.float64)], False
        else:
            columns, multi = target_columns(data.y)
        alpha = np.asarray(self.alpha, dtype=np.float64).ravel()
        if alpha.shape[0] not in (1, len(columns)):
            raise ValueError("Number of targets and number of penalties do not correspond: "
                             f"{alpha.shape[0]} != {len(columns)}")
        alphas = np.broadcast_to(alpha, (len(columns),))
        solver = self._solver(sp.issparse(data.X) or (
            data.lazy and sp.issparse(getattr(data.X, "_meta", None))))
        sw = data.sample_weight
        if sw is None:
            total = float(data.n_samples)
        else:
            total = float(sw.sum().compute() if data.lazy else sw.sum())
        d = data.X.shape[1]
        coefs, intercepts, n_iter = [], [], []
        for y_col, a in zip(columns, alphas, strict=True):
            common = dict(loss="squared", l2=float(a) / max(total, 1e-300),
                          fit_intercept=self.fit_intercept, tol=self.tol,
                          max_hessian=hessian_limit(data.n_samples))
            if self.positive and narrow(d):
                # non-negative least squares from one pass of moments (coordinate descent
                # on the driver; the intercept from the centring, unconstrained)
                res = moments_fit(self, data, y_col, sw, l2=common["l2"], positive=True)
                sol = res.state.solution
                coefs.append(sol.coef)
                intercepts.append(sol.intercept if self.fit_intercept else 0.0)
                n_iter.append(res.n_iter)
                continue
            program = (ProximalLinear(positive=True, **common) if self.positive
                       else LinearNewton(**common))

            def attributes(theta):
                coef, intercept = split_theta(theta, d, self.fit_intercept)
                return {"coef_": coef[0], "intercept_": float(intercept[0])}

            res = self._run_engine(program, data, y_col, sw, max_iter=self._max_rounds(),
                                   attributes=attributes)
            coef, intercept = split_theta(res.coef, d, self.fit_intercept)
            coefs.append(coef[0])
            intercepts.append(intercept[0])
            n_iter.append(res.n_iter)
        self.coef_, self.intercept_ = stack_fits(coefs, intercepts, multi, data.X.dtype,
                                                 ravel_one=True)
        self.n_iter_ = np.array(n_iter, dtype=np.int32)
        self.solver_ = solver
        return self

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
        return self._predict_regression(X)
