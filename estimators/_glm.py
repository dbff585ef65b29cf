"""Generalized linear models (Poisson, Gamma, Tweedie) fitted on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import GammaRegressor as SkGammaRegressor
from sklearn.linear_model import PoissonRegressor as SkPoissonRegressor
from sklearn.linear_model import TweedieRegressor as SkTweedieRegressor
from sklearn.metrics import d2_tweedie_score
from sklearn.utils.validation import check_is_fitted

from daskabsp.programs import GLMNewton, LinearNewton, hessian_limit
from daskabsp.programs.glm import check_targets, y_range

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._least_squares import PASS_ROUNDS, moments_fit, narrow, warm_coefficients
from ._linear import LinearPredictMixin, split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    StrOptions,
    reject,
    validate_params,
)

_IGNORED_SOLVER = ("both minimise the same objective; the engine takes trust-region Newton "
                   "steps (L-BFGS steps from Hessian-vector products for large models).")


class _GLMRegressor(LinearPredictMixin, RegressorMixin, EngineMixin, BaseEstimator):
    """What the GLM estimators share: the objective, the fit, prediction and D^2."""

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0.0, None, closed="left")],
        "fit_intercept": BOOLEAN,
        "solver": [StrOptions({"lbfgs", "newton-cholesky"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="neither")],
        "warm_start": BOOLEAN,
        **ENGINE_CONSTRAINTS,
    }
    _ignored: dict = {"solver": _IGNORED_SOLVER}
    _rejected: dict = {}

    def _power(self) -> float:
        raise NotImplementedError

    def _max_rounds(self) -> int:
        """``max_iter``; with the identity link, at least the one-pass fit's rounds."""
        return int(self.max_iter) if self._log_link() else max(PASS_ROUNDS, int(self.max_iter))

    def _log_link(self) -> bool:
        return True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:
            low, _closed = y_range(self._power()) if self._log_link() else (-np.inf, False)
        except (TypeError, ValueError):  # an invalid power is reported by fit
            return tags
        tags.target_tags.positive_only = low >= 0
        return tags

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : array-like or dask array of shape (n_samples,)
            Target values.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        self : object
            Fitted model.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight, y_numeric=True)
        y = data.y.astype(np.float64) if data.lazy else np.asarray(data.y, dtype=np.float64)
        sw = data.sample_weight
        d = data.X.shape[1]
        power, log = self._power(), self._log_link()
        with self._client().as_current():  # lazy targets are computed where the fit runs
            if log:
                low = y.min().compute() if data.lazy else None
                check_targets(y, power, low)
            mean_y = _weighted_mean(y, sw, data.lazy)
        start = warm_coefficients(self, d)
        if not log:  # Tweedie power 0 with the identity link: ridge regression
            if narrow(d):
                res = moments_fit(self, data, y, sw, l2=self.alpha, start=None)
            else:
                program = LinearNewton(loss="squared", l2=self.alpha,
                                       fit_intercept=self.fit_intercept, tol=self.tol,
                                       max_hessian=hessian_limit(data.n_samples),
                                       start=start)
                res = self._run_engine(program, data, y, sw, max_iter=self.max_iter,
                                       attributes=self._attributes(d))
        else:
            if start is None and self.fit_intercept and mean_y > 0:
                start = np.zeros(d + 1)
                start[-1] = np.log(mean_y)
            program = GLMNewton(power=power, l2=self.alpha, fit_intercept=self.fit_intercept,
                                tol=self.tol, max_hessian=hessian_limit(data.n_samples),
                                start=start)
            res = self._run_engine(program, data, y, sw, max_iter=self.max_iter,
                                   attributes=self._attributes(d))
        for name, value in self._attributes(d)(res.coef).items():
            setattr(self, name, value)
        self.n_iter_ = int(res.n_iter)
        self._base_loss = self._get_loss()
        return self

    def _get_loss(self, xp=None, device=None):
        """scikit-learn's loss object of this model (its private ``_get_loss``, which its
        own tests and tools call on a fitted GLM): the counterpart's, for the same
        parameters."""
        theirs = self._counterpart().get_params()
        params = {k: v for k, v in self.get_params(deep=False).items() if k in theirs}
        return self._counterpart(**params)._get_loss()

    def _attributes(self, d: int):
        def attributes(theta):
            coef, intercept = split_theta(theta, d, self.fit_intercept)
            return {"coef_": coef[0], "intercept_": float(intercept[0])}

        return attributes

    def _mean(self, X) -> np.ndarray:
        z = np.asarray(X @ self.coef_).ravel() + self.intercept_
        return np.exp(z) if self._log_link() else z

    def predict(self, X):
        """Predict the expected target: the inverse link of ``X @ coef_ + intercept_``.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
            Predicted values (a lazy dask array when ``X`` is dask-backed).
        """
        return self._apply(X, self._mean, None)

    def score(self, X, y, sample_weight=None):
        """D^2, the share of the deviance explained (scikit-learn's GLM score).

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,)
            True values of the target.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            ``1 - deviance / null deviance``, the null model predicting the (weighted) mean.
        """
        check_is_fitted(self)
        pred = self.predict(X)
        if hasattr(pred, "compute"):
            pred = pred.compute()
        y = np.asarray(y.compute() if hasattr(y, "compute") else y, dtype=np.float64)
        if self._log_link():
            check_targets(y, self._power())
        return float(d2_tweedie_score(y, pred, sample_weight=sample_weight,
                                      power=self._power()))


def _weighted_mean(y, sw, lazy: bool) -> float:
    m = y.mean() if sw is None else (y * sw).sum() / sw.sum()
    return float(m.compute() if lazy else m)


_GLM_DOC = """
    Parameters
    ----------
{power}    alpha : float, default=1.0
        Constant of the L2 penalty on the coefficients (not the intercept); ``alpha=0``
        fits without a penalty.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
{link}    solver : {{"lbfgs", "newton-cholesky"}}, default="lbfgs"
        Ignored: {ignored}
    max_iter : int, default=100
        Maximum number of rounds.
    tol : float, default=1e-4
        Stop when ``max |gradient| <= tol`` and the Newton decrement ``d`` has ``d^2 / 2
        <= tol / 100`` (scikit-learn's Newton solver's rule, a little tighter), on
        statistics covering every row once.
    warm_start : bool, default=False
        Start from the ``coef_`` and ``intercept_`` of the previous fit (when it had the
        same features); else from zero coefficients and the intercept at the link of the
        target's (weighted) mean, as scikit-learn starts.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    sync : {{"absp", "bsp"}} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds (any of ``daskabsp.SYNC_NAMES`` or a policy:
        BSP, A-BSP, SSP, ASP).
    n_partitions : int, default=None
        Partitions of in-memory input, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round. Default: the
        whole partition.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Coefficients of the linear predictor.
    intercept_ : float
        Intercept of the linear predictor (0.0 without ``fit_intercept``).
    n_iter_ : int
        Rounds run.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when the input has string feature names.
    history_ : xarray.Dataset
        The engine's record of the fit.
"""


class PoissonRegressor(_GLMRegressor):
    __doc__ = """Poisson regression (log link) whose fit runs on a Dask cluster (A-BSP by
    default).

    A drop-in for :class:`sklearn.linear_model.PoissonRegressor`: it minimises the same
    objective, ``sum_i s_i d(y_i, exp(x_i.w + b)) / (2 sum_i s_i) + alpha / 2 ||w||^2``
    with ``d`` the Poisson deviance, by trust-region Newton steps on the engine (see
    :class:`daskabsp.programs.GLMNewton`). Targets are counts or rates (``y >= 0``).
""" + _GLM_DOC.format(power="", link="", ignored=_IGNORED_SOLVER) + """
    See Also
    --------
    sklearn.linear_model.PoissonRegressor : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import PoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 3))
    >>> y = rng.poisson(np.exp(X @ [0.3, -0.2, 0.1] + 1.0))
    >>> reg = PoissonRegressor(alpha=1e-3).fit(X, y)
    >>> reg.coef_.round(1)
    array([ 0.3, -0.2,  0.1])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkPoissonRegressor

    def __init__(self, *, alpha=1.0, fit_intercept=True, solver="lbfgs", max_iter=100,
                 tol=1e-4, warm_start=False, verbose=0, sync="absp", n_partitions=None,
                 quota=None, chunk_target=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target

    def _power(self) -> float:
        return 1.0


class GammaRegressor(_GLMRegressor):
    __doc__ = """Gamma regression (log link) whose fit runs on a Dask cluster (A-BSP by
    default).

    A drop-in for :class:`sklearn.linear_model.GammaRegressor`: the same objective with the
    Gamma deviance ``d(y, mu) = 2 (log(mu / y) + y / mu - 1)``, fitted by trust-region Newton
    steps on the engine (see :class:`daskabsp.programs.GLMNewton`). Targets are positive
    (costs, durations).
""" + _GLM_DOC.format(power="", link="", ignored=_IGNORED_SOLVER) + """
    See Also
    --------
    sklearn.linear_model.GammaRegressor : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import GammaRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 2))
    >>> y = rng.gamma(2.0, np.exp(X @ [0.5, -0.5]) / 2.0)
    >>> GammaRegressor(alpha=1e-3).fit(X, y).coef_.round(1)
    array([ 0.5, -0.5])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkGammaRegressor

    def __init__(self, *, alpha=1.0, fit_intercept=True, solver="lbfgs", max_iter=100,
                 tol=1e-4, warm_start=False, verbose=0, sync="absp", n_partitions=None,
                 quota=None, chunk_target=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target

    def _power(self) -> float:
        return 2.0


_POWER_DOC = """    power : float, default=0
        The Tweedie power: 0 normal, 1 Poisson, (1, 2) compound Poisson-Gamma, 2 Gamma, 3
        inverse Gaussian. Outside [1, 2] the deviance is not convex in the linear predictor;
        the Newton steps then use each row's curvature clipped at zero.
"""
_LINK_DOC = """    link : {"auto", "identity", "log"}, default="auto"
        ``"auto"``: the identity link for ``power <= 0``, the log link above. The identity
        link is supported for ``power=0`` (least squares, fitted from one pass of the data's
        moments when it has at most 1 024 features, in the rounds its pass needs whatever
        ``max_iter``); with another power it is rejected: its
        predictions must stay positive, a constrained fit that the engine's Newton steps do
        not do.
"""


class TweedieRegressor(_GLMRegressor):
    __doc__ = """Generalized linear model with a Tweedie distribution, fitted on a Dask cluster
    (A-BSP by default).

    A drop-in for :class:`sklearn.linear_model.TweedieRegressor`: the same objective with
    the unit deviance of the Tweedie ``power``; with the log link fitted by trust-region
    Newton steps (:class:`daskabsp.programs.GLMNewton`), with the identity link and
    ``power=0`` (the default: least squares with an L2 penalty) solved exactly from one
    pass of moments.
""" + _GLM_DOC.format(power=_POWER_DOC, link=_LINK_DOC, ignored=_IGNORED_SOLVER) + """
    See Also
    --------
    sklearn.linear_model.TweedieRegressor : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import TweedieRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 2))
    >>> y = rng.poisson(np.exp(X @ [0.5, -0.5])) * rng.gamma(2.0, 0.5, 1000)
    >>> TweedieRegressor(power=1.5, alpha=1e-3).fit(X, y).coef_.round(1)
    array([ 0.5, -0.6])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkTweedieRegressor

    _parameter_constraints: dict = {
        **_GLMRegressor._parameter_constraints,
        "power": [Interval(Real, None, None, closed="neither")],
        "link": [StrOptions({"auto", "identity", "log"})],
    }
    _rejected: dict = {
        "link": "The identity link is supported with power=0 only: with another power its "
                "predictions must stay positive, a constrained fit that the engine's Newton "
                "steps do not do; use link='log'.",
    }

    def __init__(self, *, power=0.0, alpha=1.0, fit_intercept=True, link="auto",
                 solver="lbfgs", max_iter=100, tol=1e-4, warm_start=False, verbose=0,
                 sync="absp", n_partitions=None, quota=None, chunk_target=None):
        self.power = power
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.link = link
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target

    def _power(self) -> float:
        return float(self.power)

    def _log_link(self) -> bool:
        if self.link == "auto":
            return float(self.power) > 0
        return self.link == "log"

    def _check_param_combinations(self) -> None:
        """The identity link with a power other than 0 (called by ``validate_params``)."""
        if not self._log_link() and self.power != 0:
            raise reject(self, "link", "'log' (or 'auto' with power > 0) when power != 0",
                         self._rejected["link"])
