"""Linear support vector classification fitted on the daskabsp engine."""

from __future__ import annotations

from numbers import Integral, Real

from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.svm import LinearSVC as SkLinearSVC

from daskabsp.programs import LinearNewton, hessian_limit

from ._callbacks import fit_with_callbacks
from ._classes import encode_targets
from ._classifier import LinearClassifierPredictMixin
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._linear import SparseCoefMixin, keep_float32, split_theta
from ._logistic import CLASS_WEIGHT
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    StrOptions,
    validate_params,
)


class LinearSVC(SparseCoefMixin, LinearClassifierPredictMixin, ClassifierMixin, EngineMixin,
                BaseEstimator):
    """Linear support vector classifier whose fit runs on a Dask cluster (A-BSP by default).

    A drop-in for :class:`sklearn.svm.LinearSVC` with the L2 penalty: it minimises
    LIBLINEAR's primal objective ``||w||^2 / 2 + C * sum_i s_i loss_i`` where the intercept is
    the weight of an extra feature of value ``intercept_scaling`` (so it is penalised, as in
    scikit-learn). Several classes are fitted one-vs-rest, all from the same scans.

    ``loss="squared_hinge"`` is smooth enough for (generalised) Newton steps.
    ``loss="hinge"`` is not differentiable at the margin: it is fitted through a sequence of
    softplus-smoothed hinges ``w * log(1 + exp((1 - m) / w))`` whose width ``w`` shrinks from
    1 to ``3e-4`` (each stage warm-started; every stage is smooth, so Newton applies). The
    smoothed objective is above the hinge objective by at most ``w log 2`` per unit weight,
    and by far less in practice (rows away from the margin contribute almost nothing): the
    result is within about 1e-4 (relative) of the hinge optimum, measured 3e-7 to 4e-5. It
    takes more rounds than ``"squared_hinge"`` (tens), and many more under A-BSP with several
    partitions.

    Parameters
    ----------
    penalty : {"l2"}, default="l2"
        Only the L2 penalty: ``"l1"`` is rejected (not differentiable, and the engine takes
        Newton steps).
    loss : {"hinge", "squared_hinge"}, default="squared_hinge"
        The loss.
    dual : {"auto", True, False}, default="auto"
        Ignored: the dual and the primal have the same optimum, and the engine solves the
        primal.
    tol : float, default=1e-4
        Stopping tolerance (see :class:`~daskabsp.estimators.LogisticRegression`).
    C : float, default=1.0
        Inverse of the regularisation strength.
    multi_class : {"ovr"}, default="ovr"
        One-vs-rest for more than two classes; ``"crammer_singer"`` is rejected (not
        implemented).
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    intercept_scaling : float, default=1
        Value of the synthetic feature whose weight is the intercept (divided by it); a
        larger value penalises the intercept less.
    class_weight : dict or "balanced", default=None
        Weights of the classes (multiplied into ``sample_weight``, i.e. into ``C``).
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    random_state : int, RandomState instance or None, default=None
        Ignored: the fit draws nothing at random (scikit-learn's liblinear shuffles with it
        in the dual).
    max_iter : int, default=1000
        Maximum number of rounds.
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

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : int
        Rounds run.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
    history_ : xarray.Dataset
        The engine's record of the fit.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> from daskabsp.estimators import LinearSVC
    >>> svc = LinearSVC(sync="bsp").fit(X, y)
    >>> svc.coef_.shape, svc.predict(X[:3]).shape
    ((1, 5), (3,))
    >>> svc.decision_function(X[:3]).shape
    (3,)
    >>> svc.score(X, y) > 0.8
    True
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkLinearSVC

    _parameter_constraints: dict = {
        "penalty": [StrOptions({"l2"})],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "dual": [*BOOLEAN, StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "C": [Interval(Real, 0, None, closed="neither")],
        "multi_class": [StrOptions({"ovr"})],
        "fit_intercept": BOOLEAN,
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": CLASS_WEIGHT,
        "random_state": ["random_state"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        **ENGINE_CONSTRAINTS,
    }
    _rejected: dict = {
        "penalty": "daskabsp fits the L2 penalty only: the L1 penalty is not differentiable, "
                   "and its Newton steps need a twice-differentiable objective.",
        "multi_class": "Crammer-Singer's joint multi-class objective is not implemented; "
                       "several classes are fitted one-vs-rest.",
    }

    #: scikit-learn's parameters accepted but without effect here, and why.
    _ignored: dict = {
        "dual": "the dual and the primal have the same optimum; the engine solves the "
                "primal.",
        "random_state": "the fit draws nothing at random (liblinear shuffles with it in the "
                        "dual).",
    }

    def __init__(self, penalty="l2", loss="squared_hinge", *, dual="auto", tol=1e-4, C=1.0,
                 multi_class="ovr", fit_intercept=True, intercept_scaling=1,
                 class_weight=None, verbose=0, random_state=None, max_iter=1000, sync="absp",
                 n_partitions=None, quota=None, chunk_target=None):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.tol = tol
        self.C = C
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.random_state = random_state
        self.max_iter = max_iter
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
        y : array-like or dask array of shape (n_samples,)
        sample_weight : array-like or dask array of shape (n_samples,), default=None

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
        program = LinearNewton(
            loss=self.loss, n_blocks=1 if K == 2 else K, l2=l2,
            l2_intercept=l2 / self.intercept_scaling ** 2, fit_intercept=self.fit_intercept,
            tol=self.tol, max_hessian=hessian_limit(data.n_samples),
        )

        def attributes(theta):  # theta: one row of parameters per one-vs-rest block
            coef, intercept = split_theta(theta, d, self.fit_intercept)
            return {"coef_": coef, "intercept_": intercept, "classes_": t.classes}

        res = self._run_engine(program, data, t.codes, t.weights, max_iter=self.max_iter,
                               attributes=attributes)
        for name, value in attributes(res.coef).items():
            setattr(self, name, value)
        keep_float32(self, data.X.dtype)
        self.n_iter_ = int(res.n_iter)
        return self
