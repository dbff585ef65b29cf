"""Ordinary least squares fitted on the daskabsp engine, and what the least-squares estimators
share: the one-pass moments fit and warm starts."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import LinearRegression as SkLinearRegression

import daskabsp
from daskabsp.programs import LeastSquaresMoments, LinearNewton, ProximalLinear, hessian_limit
from daskabsp.programs.gram import GRAM_LIMIT

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import FitInput, validate_fit
from ._linear import LinearPredictMixin, split_theta, stack_fits, target_columns
from ._validation import BOOLEAN, ENGINE_CONSTRAINTS, Interval, validate_params

#: Rows whose mean is the rough centre of dense rows (see daskabsp.programs.gram).
CENTRE_ROWS = 1000

#: The most rounds a one-pass fit may take. A pass is complete once every partition has been
#: counted, within a few rounds (resumed cursors, helpers); ``max_iter`` bounds the iterative
#: fits only: a pass cut short has no solution at all.
PASS_ROUNDS = 100


def narrow(n_features: int) -> bool:
    """Whether the data's moments (a Gram matrix) are small enough for a one-pass fit."""
    return n_features <= GRAM_LIMIT


def rough_centre(data: FitInput) -> np.ndarray | None:
    """The mean of the first rows of dense input (None for sparse rows), to shift rows by
    before their products are summed (see :mod:`daskabsp.programs.gram`)."""
    X = data.X
    if data.lazy:
        if isinstance(X._meta, sp.spmatrix) or sp.issparse(X._meta):
            return None
        return np.asarray(X[:CENTRE_ROWS].mean(axis=0).compute(), dtype=np.float64)
    if sp.issparse(X):
        return None
    return np.asarray(X[:CENTRE_ROWS].mean(axis=0), dtype=np.float64)


def warm_coefficients(est, n_features: int, n_blocks: int = 1) -> np.ndarray | None:
    """``[coef, intercept]`` rows of the previous fit, to start from, when ``warm_start`` is
    set and the previous fit had the same features and blocks (else None: a cold start)."""
    if not getattr(est, "warm_start", False) or not hasattr(est, "coef_"):
        return None
    coef = np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))
    if coef.shape != (n_blocks, n_features):
        return None
    intercept = np.atleast_1d(np.asarray(est.intercept_, dtype=np.float64))
    theta = np.column_stack([coef, intercept]) if est.fit_intercept else coef
    return theta.ravel() if n_blocks == 1 else theta


def moments_fit(est, data: FitInput, y, sw, *, l1: float = 0.0, l2: float = 0.0,
                positive: bool = False, start=None,
                rcond: float | None = None) -> daskabsp.FitResult:
    """Fit least squares with elastic-net penalties from one pass of moments (see
    :class:`daskabsp.programs.LeastSquaresMoments`); within ``est``'s client context.

    Raises
    ------
    RuntimeError
        When the pass did not count every row within :data:`PASS_ROUNDS` rounds.
    """
    with est._client().as_current():
        shift = rough_centre(data) if est.fit_intercept else None
    program = LeastSquaresMoments(l1=l1, l2=l2, positive=positive, start=start, shift=shift,
                                  centred=bool(est.fit_intercept), rcond=rcond)
    d = data.X.shape[1]

    def attributes(theta):
        coef, intercept = split_theta(theta, d, True)
        return {"coef_": coef[0], "intercept_": float(intercept[0])}

    res = est._run_engine(program, data, y, sw, max_iter=PASS_ROUNDS, attributes=attributes)
    if res.state.solution is None:
        raise RuntimeError(
            f"{type(est).__name__}'s pass over the rows did not count every row within "
            f"{PASS_ROUNDS} rounds; its history (est.history_) shows where rows were lost.")
    return res


def float_target(data: FitInput):
    """The target as float64 (lazily for dask input)."""
    return data.y.astype(np.float64) if data.lazy else np.asarray(data.y, dtype=np.float64)


class LinearRegression(LinearPredictMixin, RegressorMixin, EngineMixin, BaseEstimator):
    """Ordinary least squares whose fit runs on a Dask cluster.

    A drop-in for :class:`sklearn.linear_model.LinearRegression`: it minimises
    ``||y - X w - b||^2`` (weighted by ``sample_weight``). Up to 1 024 features the fit is
    one pass over the rows, each partition summing its rows' moments (their sum, Gram matrix
    and products with the target), and an exact solve on the driver: the minimum-norm
    solution when the centred rows are rank-deficient, as scikit-learn's ``lstsq``. A pass
    is a full round under every sync model (nothing is gained by stopping it early; the
    default A-BSP lends the straggler helpers), and SSP and ASP end once every partition
    has reported. Wider data are fitted by L-BFGS steps (:class:`daskabsp.programs.
    LinearNewton` with the squared loss).

    Parameters
    ----------
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    copy_X : bool, default=True
        Ignored: ``X`` is never modified (the fit only reads it).
    tol : float, default=1e-6
        One-pass fit: singular values of the centred rows below ``tol`` times the largest
        count as zero (scikit-learn's ``cond`` of ``lstsq``; at least ``sqrt(10 p eps)``,
        what a Gram matrix resolves). Wide data: the gradient tolerance of the iterative fit.
    n_jobs : int, default=None
        Ignored: the parallelism is the Dask cluster's worker threads.
    positive : bool, default=False
        Constrain the coefficients to be non-negative (non-negative least squares, solved
        from the moments by coordinate descent).
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round; the one-pass
        fit scans every row whatever the quota.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients (one row per target for a 2D target, each fitted on its own; float32
        for float32 ``X``, as scikit-learn).
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept (0.0 without ``fit_intercept``).
    rank_ : int
        Rank of the centred rows (one-pass fit without ``positive`` only).
    singular_ : ndarray of shape (min(n_samples, n_features),)
        Singular values of the centred (weighted) rows, from the eigenvalues of their Gram
        matrix (one-pass fit without ``positive`` only).
    n_iter_ : int
        Rounds run.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when the input has string feature names.
    history_ : xarray.Dataset
        The engine's record of the fit.

    See Also
    --------
    sklearn.linear_model.LinearRegression : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import LinearRegression
    >>> X = np.array([[1.0, 1.0], [1.0, 2.0], [2.0, 2.0], [2.0, 3.0]])
    >>> y = X @ [1.0, 2.0] + 3.0
    >>> reg = LinearRegression().fit(X, y)
    >>> reg.coef_, float(reg.intercept_)
    (array([1., 2.]), 3.0...)
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkLinearRegression

    _parameter_constraints: dict = {
        "fit_intercept": BOOLEAN,
        "copy_X": BOOLEAN,
        "n_jobs": [None, Integral],
        "positive": BOOLEAN,
        "tol": [Interval(Real, 0, None, closed="left")],
        **ENGINE_CONSTRAINTS,
    }
    _ignored: dict = {
        "copy_X": "X is never modified: the fit only reads it.",
        "n_jobs": "the parallelism is the Dask cluster's worker threads.",
    }
    _rejected: dict = {}

    def __init__(self, *, fit_intercept=True, copy_X=True, tol=1e-6, n_jobs=None,
                 positive=False, sync="absp", n_partitions=None, quota=None,
                 chunk_target=None, verbose=0):
        self.fit_intercept = fit_intercept
        self.copy_X = copy_X
        self.tol = tol
        self.n_jobs = n_jobs
        self.positive = positive
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # a 2D target: one fit per column
        return tags

    def _max_rounds(self) -> int:
        return PASS_ROUNDS

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_targets), or dask array of \
(n_samples,)
            Target values.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight, y_numeric=True,
                            multi_output=True)
        if data.lazy:
            columns, multi = [float_target(data)], False
        else:
            columns, multi = target_columns(data.y)
        sw = data.sample_weight
        n, d = data.X.shape
        for name in ("rank_", "singular_"):
            self.__dict__.pop(name, None)
        coefs, intercepts, n_iter = [], [], 0
        for j, y_col in enumerate(columns):
            if narrow(d):
                rcond = max(float(self.tol) ** 2, 10 * d * np.finfo(float).eps)
                res = moments_fit(self, data, y_col, sw, positive=self.positive, rcond=rcond)
                sol = res.state.solution
                if sol.eigenvalues is not None and j == 0:  # the same rows for every target
                    eig = np.maximum(sol.eigenvalues[::-1], 0.0)
                    self.rank_ = int(np.count_nonzero(eig > rcond * max(eig[0], 0.0)))
                    self.singular_ = np.sqrt(eig * sol.moments.weight)[:min(n, d)]
                coefs.append(sol.coef)
                intercepts.append(float(sol.intercept) if self.fit_intercept else 0.0)
            else:
                common = dict(l2=0.0, fit_intercept=self.fit_intercept, tol=self.tol,
                              max_hessian=hessian_limit(n))
                program = (ProximalLinear(loss="squared", positive=True, **common)
                           if self.positive else LinearNewton(loss="squared", **common))

                def attributes(theta):
                    coef, intercept = split_theta(theta, d, self.fit_intercept)
                    return {"coef_": coef[0], "intercept_": float(intercept[0])}

                res = self._run_engine(program, data, y_col, sw, max_iter=100,
                                       attributes=attributes)
                coef, intercept = split_theta(res.coef, d, self.fit_intercept)
                coefs.append(coef[0])
                intercepts.append(intercept[0])
            n_iter = max(n_iter, int(res.n_iter))
        self.coef_, self.intercept_ = stack_fits(coefs, intercepts, multi, data.X.dtype)
        self.n_iter_ = n_iter
        return self

    def predict(self, X):
        """Predict with the fitted linear model.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
            Predicted values (a lazy dask array when ``X`` is dask-backed).
        """
        return self._predict_regression(X)
