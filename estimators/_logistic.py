"""Logistic regression (binary and multinomial) fitted on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.special import expit, log_softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from daskabsp.programs import LinearNewton, MultinomialNewton, hessian_limit

from ._callbacks import fit_with_callbacks
from ._classes import encode_targets
from ._classifier import LinearClassifierPredictMixin
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._linear import split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    NONE,
    RANDOM_STATE,
    InstanceOf,
    Interval,
    Options,
    validate_params,
)

CLASS_WEIGHT = [InstanceOf((dict,), "dict"), Options(str, frozenset({"balanced"})), NONE]


class LogisticRegression(LinearClassifierPredictMixin, ClassifierMixin, EngineMixin,
                         BaseEstimator):
    """L2-regularised logistic regression whose fit runs on a Dask cluster (A-BSP by default).

    A drop-in for :class:`sklearn.linear_model.LogisticRegression` with ``penalty="l2"``: it
    minimises the same objective ``C * sum_i s_i log_loss_i + ||w||^2 / 2`` (binomial for
    two classes, multinomial for more; the intercept is not penalised) by trust-region
    Newton over the partitions of the data, each round ending when the fastest partition has
    scanned its rows (see :mod:`daskabsp.programs.newton`).

    Parameters
    ----------
    penalty : {"l2"}, default="l2"
        Only the L2 penalty is supported.
    C : float, default=1.0
        Inverse of the regularisation strength.
    fit_intercept : bool, default=True
        Whether to fit an intercept (not penalised).
    class_weight : dict or "balanced", default=None
        Weights of the classes, multiplied into ``sample_weight``.
    tol : float, default=1e-4
        Stop when ``max |gradient| <= tol`` and the Newton decrement ``d`` has
        ``d^2 / 2 <= tol`` (scikit-learn's Newton solvers' rule, on the objective divided by
        ``C * sum(sample_weight)``), on statistics covering every row once.
    max_iter : int, default=100
        Maximum number of rounds.
    random_state : int, RandomState instance or None, default=None
        Unused (the fit is deterministic given the rows each round sees); kept for
        compatibility with scikit-learn.
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input. Default: one per worker thread, each with at least
        ``max(daskabsp.min-partition-rows, 10 * n_parameters)`` rows. A dask input keeps its
        row chunks as partitions unless this is given.
    quota : int or float, default=None
        Rows a partition scans per round (int), or a fraction of it (float in (0, 1]).
        Default: the whole partition.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal (default:
        ``daskabsp.chunk-target``).
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds (rounds done, objective,
        share of the rows asked for that were used, partitions harvested, elapsed time): a
        widget in a notebook, a text bar elsewhere.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, computed once over the whole target.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Coefficients (one row for two classes).
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Intercepts.
    n_iter_ : ndarray of shape (1,)
        Rounds run.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Feature names (pandas or dask DataFrame columns, or the feature coordinate of a
        DataArray), when they are all strings.
    history_ : xarray.Dataset
        The engine's record of the fit, one entry per round and partition.

    Examples
    --------
    >>> from daskabsp.estimators import LogisticRegression
    >>> from sklearn.datasets import load_breast_cancer
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = LogisticRegression(sync="bsp").fit(X, y)  # doctest: +SKIP
    >>> clf.score(X, y)  # doctest: +SKIP
    0.95...
    """

    _parameter_constraints: dict = {
        "penalty": [Options(str, frozenset({"l2"}))],
        "C": [Interval(Real, 0, None, "neither")],
        "fit_intercept": [BOOLEAN],
        "class_weight": CLASS_WEIGHT,
        "tol": [Interval(Real, 0, None, "left")],
        "max_iter": [Interval(Integral, 1, None, "left")],
        "random_state": [RANDOM_STATE],
        **ENGINE_CONSTRAINTS,
    }

    def __init__(self, penalty="l2", *, C=1.0, fit_intercept=True, class_weight=None,
                 tol=1e-4, max_iter=100, random_state=None, sync="absp", n_partitions=None,
                 quota=None, chunk_target=None, verbose=0):
        self.penalty = penalty
        self.C = C
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    @fit_with_callbacks
    def fit(self, X, y, sample_weight=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : array-like or dask array of shape (n_samples,)
            Target labels.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Row weights.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, y, sample_weight=sample_weight)
        with self._client().as_current():  # a lazy target is computed where the fit runs
            t = encode_targets(self, data, self.class_weight)
        K, d = len(t.classes), data.X.shape[1]
        l2 = 1.0 / (self.C * t.weight_sum)
        if K == 2:
            program = LinearNewton(loss="logistic", l2=l2, fit_intercept=self.fit_intercept,
                                   tol=self.tol, max_hessian=hessian_limit(data.n_samples))
        else:
            program = MultinomialNewton(n_classes=K, l2=l2, fit_intercept=self.fit_intercept,
                                        tol=self.tol, max_hessian=hessian_limit(data.n_samples))

        def attributes(theta):  # theta: one row of parameters per class (one for K = 2)
            coef, intercept = split_theta(theta, d, self.fit_intercept)
            return {"coef_": coef, "intercept_": intercept, "classes_": t.classes}

        res = self._run_engine(program, data, t.codes, t.weights, max_iter=self.max_iter,
                               attributes=attributes)
        for name, value in attributes(res.coef).items():
            setattr(self, name, value)
        self.n_iter_ = np.array([res.n_iter], dtype=np.int32)
        return self

    def _proba(self, X) -> np.ndarray:
        z = self._decision(X)
        if z.ndim == 1:
            p = expit(z)
            return np.column_stack([1.0 - p, p])
        return np.exp(log_softmax(z, axis=1))

    def _log_proba(self, X) -> np.ndarray:
        z = self._decision(X)
        if z.ndim == 1:
            return np.column_stack([-np.logaddexp(0.0, z), -np.logaddexp(0.0, -z)])
        return log_softmax(z, axis=1)

    def predict_proba(self, X):
        """Probability of each class.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        check_is_fitted(self)
        return self._apply(X, self._proba, len(self.classes_))

    def predict_log_proba(self, X):
        """Logarithm of the probability of each class.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        return self._apply(X, self._log_proba, len(self.classes_))
