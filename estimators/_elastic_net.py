"""Lasso and elastic net fitted on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import ElasticNet as SkElasticNet
from sklearn.linear_model import Lasso as SkLasso
from sklearn.utils.validation import check_is_fitted

from daskabsp.programs import ProximalLinear, hessian_limit
from daskabsp.programs.gram import dual_gap

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._least_squares import PASS_ROUNDS, float_target, moments_fit, narrow, warm_coefficients
from ._linear import LinearPredictMixin, split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    StrOptions,
    validate_params,
)


class ElasticNet(LinearPredictMixin, RegressorMixin, EngineMixin, BaseEstimator):
    """Linear regression with combined L1 and L2 penalties, fitted on a Dask cluster.

    A drop-in for :class:`sklearn.linear_model.ElasticNet` (one target): it minimises
    scikit-learn's objective::

        1 / (2 sum(s)) * ||y - X w - b||^2_s + alpha * l1_ratio * ||w||_1
            + 0.5 * alpha * (1 - l1_ratio) * ||w||^2

    ``s`` the sample weights. Up to 1 024 features the fit is one pass over the rows (each
    partition sums its rows' moments) and an exact solve on the driver by coordinate
    descent on the Gram matrix, finished on the support by its linear system: the
    coefficients scikit-learn's coordinate descent converges to, exact zeros included. A
    pass is a full round under every sync model (the default A-BSP lends the straggler
    helpers); SSP and ASP end once every partition has reported. Wider data are fitted by
    orthant-wise quasi-Newton rounds (:class:`daskabsp.programs.ProximalLinear`), partial
    under A-BSP while far from the optimum and full rounds to settle the support.

    Parameters
    ----------
    alpha : float, default=1.0
        Constant multiplying the penalty terms.
    l1_ratio : float, default=0.5
        Mix of the penalties: 1 is the lasso, 0 ridge regression.
    fit_intercept : bool, default=True
        Whether to fit an intercept (not penalised).
    precompute : bool, default=False
        ``True`` and ``False`` are accepted and ignored: the one-pass fit always sums the
        Gram matrix (its partitions' part of the pass). A Gram matrix given as an array is
        rejected: the rows' products with the target and their means are summed in the same
        pass, so a Gram matrix alone saves nothing.
    max_iter : int, default=1000
        Wide data: maximum number of rounds (None: 1000). The one-pass fit takes the rounds
        its pass needs (a few) whatever ``max_iter``.
    copy_X : bool, default=True
        Ignored: ``X`` is never modified (the fit only reads it).
    tol : float, default=1e-4
        Wide data: stop when no coefficient violates the optimality conditions by more than
        ``tol`` (mean scale) on a full round. The one-pass fit is solved exactly.
    warm_start : bool, default=False
        Start from the previous fit's ``coef_`` (when it had the same features). A
        one-pass fit is one round either way; the iterative fit of wide data starts where
        the last one ended, with the curvature (L-BFGS pairs) it had gathered (a
        regularisation path costs a fraction of its cold fits).
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    random_state : int, RandomState instance or None, default=None
        Ignored: the fit draws nothing at random (scikit-learn: the order of its coordinate
        descent with ``selection="random"``).
    selection : {"cyclic", "random"}, default="cyclic"
        Ignored: the order in which scikit-learn updates coefficients; the solution is the
        same.
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round (the one-pass
        fit scans every row).
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Coefficients.
    sparse_coef_ : scipy.sparse.csr_matrix of shape (1, n_features)
        ``coef_`` as a sparse matrix.
    intercept_ : float
        Intercept (0.0 without ``fit_intercept``).
    n_iter_ : int
        Rounds run.
    dual_gap_ : float
        The duality gap at the solution (scikit-learn's, on the mean scale); for wide data
        at the parameters of the last full round.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when the input has string feature names.
    history_ : xarray.Dataset
        The engine's record of the fit.

    See Also
    --------
    sklearn.linear_model.ElasticNet : The in-process estimator this one mirrors.
    Lasso : The L1 penalty alone.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import ElasticNet
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((2000, 10))
    >>> y = X[:, 0] * 3 + rng.standard_normal(2000)
    >>> enet = ElasticNet(alpha=0.1).fit(X, y)
    >>> np.flatnonzero(enet.coef_)
    array([0])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkElasticNet

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "fit_intercept": BOOLEAN,
        "precompute": BOOLEAN,
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "copy_X": BOOLEAN,
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": BOOLEAN,
        "positive": BOOLEAN,
        "random_state": ["random_state"],
        "selection": [StrOptions({"cyclic", "random"})],
        **ENGINE_CONSTRAINTS,
    }
    _ignored: dict = {
        "precompute": "the one-pass fit always sums the Gram matrix (True and False are "
                      "accepted and ignored).",
        "copy_X": "X is never modified: the fit only reads it.",
        "random_state": "the fit draws nothing at random.",
        "selection": "the order of scikit-learn's coordinate updates; the solution is the "
                     "same.",
    }
    _rejected: dict = {
        "precompute": "A precomputed Gram matrix is not used: the engine sums the rows' "
                      "products with the target and their means in the same pass, so the "
                      "Gram matrix alone saves nothing.",
    }

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, precompute=False,
                 max_iter=1000, copy_X=True, tol=1e-4, warm_start=False, positive=False,
                 random_state=None, selection="cyclic", sync="absp", n_partitions=None,
                 quota=None, chunk_target=None, verbose=0):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.precompute = precompute
        self.max_iter = max_iter
        self.copy_X = copy_X
        self.tol = tol
        self.warm_start = warm_start
        self.positive = positive
        self.random_state = random_state
        self.selection = selection
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def _l1_ratio(self) -> float:
        return float(self.l1_ratio)

    def _max_rounds(self) -> int:
        """The iterative fit's ``max_iter``; at least the one-pass fit's rounds."""
        return max(PASS_ROUNDS, 1000 if self.max_iter is None else int(self.max_iter))

    def _iterations(self) -> int:
        return 1000 if self.max_iter is None else int(self.max_iter)

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None, check_input=True):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : array-like or dask array of shape (n_samples,)
            Target values.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Sample weights (scikit-learn's meaning: the objective weights each row's squared
            residual, divided by their sum).
        check_input : bool, default=True
            Ignored: the input is always checked (it is converted to float64 anyway).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight, y_numeric=True)
        y = float_target(data)
        sw = data.sample_weight
        n, d = data.X.shape
        r = self._l1_ratio()
        l1, l2 = self.alpha * r, self.alpha * (1.0 - r)
        warm = warm_coefficients(self, d)
        if narrow(d):
            start = None if warm is None else warm[:d]
            res = moments_fit(self, data, y, sw, l1=l1, l2=l2, positive=self.positive,
                              start=start)
            sol = res.state.solution
            self.coef_, self.intercept_ = sol.coef, float(sol.intercept)
            self.dual_gap_ = dual_gap(sol, l1, l2, self.positive)
        else:
            memory, gradient = (getattr(self, "_curvature", None), getattr(
                self, "_gradient", None)) if warm is not None else (None, None)
            program = ProximalLinear(loss="squared", l1=l1, l2=l2, positive=self.positive,
                                     fit_intercept=self.fit_intercept, tol=self.tol,
                                     max_hessian=hessian_limit(n), start=warm,
                                     start_memory=memory, start_gradient=gradient)

            def attributes(theta):
                coef, intercept = split_theta(theta, d, self.fit_intercept)
                return {"coef_": coef[0], "intercept_": float(intercept[0])}

            res = self._run_engine(program, data, y, sw, max_iter=self._iterations(),
                                   attributes=attributes)
            for name, value in attributes(res.coef).items():
                setattr(self, name, value)
            self.dual_gap_ = _gap_from_round(res.state, d, l1, l2, self.positive)
            # The curvature a warm start resumes with: the squared loss's Hessian does not
            # depend on alpha, so the pairs stay exact along a path on the same rows.
            self._curvature = res.state.memory or None
            # and the loss's gradient (no penalty), which the next alpha's first round
            # takes its support block from
            last = res.state.last_exact
            self._gradient = None if last is None else last[1][0][1]
        self.n_iter_ = int(res.n_iter)
        return self

    @property
    def sparse_coef_(self):
        """``coef_`` as a sparse matrix of shape (1, n_features)."""
        check_is_fitted(self)
        return sp.csr_matrix(np.atleast_2d(self.coef_))

    def _decision_1d(self, X) -> np.ndarray:
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

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
        return self._apply(X, self._decision_1d, None)


def _gap_from_round(state, d: int, l1: float, l2: float, positive: bool) -> float:
    """The duality gap (scikit-learn's formulation, mean scale) at the parameters of the
    last full round of an iterative fit, from its loss and gradient: with residuals ``R``,
    ``|R|^2 / W`` is twice the mean loss and ``X^T R / W`` minus the loss gradient."""
    last = state.last_exact
    if last is None:
        return float("nan")
    theta, ((loss, grad),) = last[0][0], last[1]
    w = theta[:d]
    b = theta[d] if theta.shape[0] > d else 0.0
    rr = 2.0 * loss
    xtr = -grad[:d]
    sum_r = -grad[d] if grad.shape[0] > d else 0.0
    ry = rr + w @ xtr + b * sum_r
    xta = xtr - l2 * w
    dual_norm = float(np.max(xta, initial=0.0) if positive
                      else np.max(np.abs(xta), initial=0.0))
    w2 = float(w @ w)
    primal = 0.5 * (rr + l2 * w2) + l1 * np.abs(w).sum()
    scale = l1 / dual_norm if dual_norm > l1 else 1.0
    dual = -0.5 * scale ** 2 * (rr + l2 * w2) + scale * ry
    return float(primal - dual)


class Lasso(ElasticNet):
    """Linear regression with an L1 penalty (the lasso), fitted on a Dask cluster.

    A drop-in for :class:`sklearn.linear_model.Lasso` (one target): scikit-learn's objective
    ``1 / (2 sum(s)) * ||y - X w - b||^2_s + alpha * ||w||_1``, fitted as
    :class:`ElasticNet` with ``l1_ratio=1``: from one pass of moments and an exact solve up
    to 1 024 features, by orthant-wise quasi-Newton rounds beyond.

    Parameters
    ----------
    alpha : float, default=1.0
        Constant multiplying the L1 term.
    fit_intercept : bool, default=True
        Whether to fit an intercept (not penalised).
    precompute : bool, default=False
        Accepted and ignored (see :class:`ElasticNet`); an array is rejected.
    copy_X : bool, default=True
        Ignored: ``X`` is never modified.
    max_iter : int, default=1000
        Wide data: maximum number of rounds (see :class:`ElasticNet`).
    tol : float, default=1e-4
        Wide data: the optimality tolerance of the iterative fit (see :class:`ElasticNet`).
    warm_start : bool, default=False
        Start from the previous fit's ``coef_`` (see :class:`ElasticNet`).
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    random_state : int, RandomState instance or None, default=None
        Ignored: the fit draws nothing at random.
    selection : {"cyclic", "random"}, default="cyclic"
        Ignored: the order of scikit-learn's coordinate updates; the solution is the same.
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Coefficients.
    sparse_coef_ : scipy.sparse.csr_matrix of shape (1, n_features)
        ``coef_`` as a sparse matrix.
    intercept_ : float
        Intercept.
    n_iter_ : int
        Rounds run.
    dual_gap_ : float
        The duality gap at the solution (mean scale).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when the input has string feature names.
    history_ : xarray.Dataset
        The engine's record of the fit.

    See Also
    --------
    sklearn.linear_model.Lasso : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import Lasso
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((2000, 10))
    >>> y = X[:, :2] @ [3.0, -2.0] + rng.standard_normal(2000)
    >>> np.flatnonzero(Lasso(alpha=0.1).fit(X, y).coef_)
    array([0, 1])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkLasso

    _parameter_constraints: dict = {
        k: v for k, v in ElasticNet._parameter_constraints.items() if k != "l1_ratio"}

    def __init__(self, alpha=1.0, *, fit_intercept=True, precompute=False, copy_X=True,
                 max_iter=1000, tol=1e-4, warm_start=False, positive=False,
                 random_state=None, selection="cyclic", sync="absp", n_partitions=None,
                 quota=None, chunk_target=None, verbose=0):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.precompute = precompute
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.positive = positive
        self.random_state = random_state
        self.selection = selection
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def _l1_ratio(self) -> float:
        return 1.0

