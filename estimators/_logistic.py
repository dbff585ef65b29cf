"""Logistic regression (binary and multinomial) fitted on the daskabsp engine."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import sklearn
from scipy.special import expit, log_softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.utils.validation import check_is_fitted

from daskabsp.programs import (
    LinearNewton,
    MultinomialNewton,
    ProximalLinear,
    ProximalMultinomial,
    hessian_limit,
)

from ._callbacks import caller_stacklevel, fit_with_callbacks
from ._classes import encode_targets
from ._classifier import LinearClassifierPredictMixin
from ._engine import EngineMixin
from ._inputs import validate_fit
from ._least_squares import warm_coefficients
from ._linear import SparseCoefMixin, keep_float32, split_theta
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Hidden,
    Interval,
    InvalidParameterError,
    StrOptions,
    reject,
    validate_params,
)

#: scikit-learn 1.8 deprecated ``penalty`` (default ``"deprecated"``: the penalty follows
#: ``l1_ratio`` and ``C``) and changed ``l1_ratio``'s default from None to 0.0. The defaults
#: here are those of the installed scikit-learn, so that ``get_params()`` matches it.
SKLEARN_18 = tuple(int(p) for p in sklearn.__version__.split(".")[:2]) >= (1, 8)
PENALTY_DEFAULT = "deprecated" if SKLEARN_18 else "l2"
L1_RATIO_DEFAULT = 0.0 if SKLEARN_18 else None

#: scikit-learn's solvers whose objective daskabsp minimises too (``liblinear`` penalises the
#: intercept and fits several classes one-vs-rest: another objective).
SAME_OBJECTIVE_SOLVERS = {"lbfgs", "newton-cg", "newton-cholesky", "sag", "saga"}

CLASS_WEIGHT = [dict, StrOptions({"balanced"}), None]


class LogisticRegression(SparseCoefMixin, LinearClassifierPredictMixin, ClassifierMixin,
                         EngineMixin, BaseEstimator):
    """Logistic regression whose fit runs on a Dask cluster (A-BSP by default).

    A drop-in for :class:`sklearn.linear_model.LogisticRegression`: it minimises the same
    objective ``C * sum_i s_i log_loss_i + r ||w||_1 + (1 - r) ||w||^2 / 2`` (``r`` the
    ``l1_ratio``; binomial for two classes, multinomial for more; the intercept is not
    penalised). With the L2 penalty (or none): by trust-region Newton, or L-BFGS steps from
    Hessian-vector products for large models (see :class:`daskabsp.programs.LinearNewton`).
    With an L1 part: by proximal Newton steps, the L1 term applied on the driver to the
    rows' Newton model (orthant-wise L-BFGS steps for large models), the support settled on
    full rounds (see :class:`daskabsp.programs.ProximalLinear`). Under the default
    ``sync="absp"`` a round with a straggler ends when the fastest worker has scanned its
    partitions (see :class:`daskabsp.ABSP`).

    Every parameter of scikit-learn's class is accepted, with its default; those that choose
    how scikit-learn solves the problem (``solver``, ``intercept_scaling``, ``n_jobs``) are
    ignored, except ``solver="liblinear"``, whose own objective (a penalised intercept, two
    classes, as scikit-learn 1.8+) is minimised then; liblinear with an L1 penalty is
    rejected with the reason. The section "Differences from scikit-learn" of the
    :doc:`estimators guide </user-guide/estimators>` lists what else differs.

    Parameters
    ----------
    penalty : {"l1", "l2", "elasticnet", None}, default="deprecated"
        scikit-learn's deprecated way of choosing the penalty (its default, ``"deprecated"``,
        means: from ``l1_ratio`` and ``C``). ``None``: no penalty (as ``C=np.inf``);
        ``"l1"``: ``l1_ratio=1``; ``"elasticnet"``: the given ``l1_ratio``. (With
        scikit-learn older than 1.8 the default is ``"l2"``.)
    C : float, default=1.0
        Inverse of the regularisation strength; ``np.inf``: no penalty. Without a penalty
        the optimum may not be unique (collinear features) or not exist (separable
        classes); the fit then stops where the gradient test passes.
    l1_ratio : float, default=0.0
        The share of the L1 penalty: 0 the L2 penalty, 1 the L1 penalty (a sparse model),
        between the elastic net. ``None`` (the default before scikit-learn 1.8) means 0.
        Any solver value works with it (scikit-learn asks for ``"saga"``).
    dual : bool, default=False
        ``True`` with ``solver="liblinear"`` only (scikit-learn's rule): daskabsp then
        solves the primal, which has the same optimum.
    tol : float, default=1e-4
        Stop when ``max |gradient| <= tol`` and the Newton decrement ``d`` has
        ``d^2 / 2 <= tol / 100`` (scikit-learn's Newton solvers' rule, a little tighter), on
        the objective divided by ``C * sum(sample_weight)``, on statistics covering every row
        once. With an L1 part the gradient test is on the optimality conditions (the
        gradient against the L1 term's subdifferential).
    fit_intercept : bool, default=True
        Whether to fit an intercept (not penalised).
    intercept_scaling : float, default=1
        Ignored, as scikit-learn ignores it, for every solver but liblinear: with
        ``solver="liblinear"`` the intercept is the weight of a constant feature of this
        value, penalised as the others (liblinear's objective).
    class_weight : dict or "balanced", default=None
        Weights of the classes, multiplied into ``sample_weight``.
    random_state : int, RandomState instance or None, default=None
        Ignored: the fit draws nothing at random (scikit-learn uses it for sag, saga and
        liblinear only).
    solver : {"lbfgs", "liblinear", "newton-cg", "newton-cholesky", "sag", "saga"}, \
default="lbfgs"
        Ignored but for ``"liblinear"``: the others minimise the objective above, and the
        engine chooses its own way (Newton while the Hessian is cheap, L-BFGS steps
        beyond); any of them takes an L1 part (scikit-learn: ``"saga"`` only).
        ``"liblinear"`` (two classes, as in scikit-learn) minimises liblinear's objective,
        the intercept penalised as a feature of value ``intercept_scaling``, with the L2
        penalty (with an L1 part it is rejected).
    max_iter : int, default=100
        Maximum number of rounds. 0, as in scikit-learn: no round, the coefficients are
        the starting point (zeros, or the previous fit's with ``warm_start``).
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds (rounds done, objective,
        share of the rows asked for that were used, partitions harvested, elapsed time): a
        widget in a notebook, a text bar elsewhere.
    warm_start : bool, default=False
        Start from the ``coef_`` and ``intercept_`` of the previous fit (when it had the
        same features and number of classes); else from zero.
    n_jobs : int, default=None
        Ignored: the parallelism is the Dask cluster's worker threads (deprecated in
        scikit-learn 1.8 too).
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
        Seconds of work between two checks of the stop signal. Default: the largest of
        ``daskabsp.chunk-target``, the program's floor (10 ms for this estimator and the
        other iterative fits; 50 ms for the one-pass fits of ``LinearRegression``,
        ``Lasso``, ``ElasticNet`` and ``PCA`` up to 1 024 features), and 3e-8 s per float
        of a partition's statistics.

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
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names (pandas or dask DataFrame columns, or the feature coordinate of a
        DataArray), when they are all strings.
    history_ : xarray.Dataset
        The engine's record of the fit, one entry per round and partition.

    See Also
    --------
    sklearn.linear_model.LogisticRegression : The in-process estimator this one mirrors.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> from daskabsp.estimators import LogisticRegression
    >>> clf = LogisticRegression().fit(X, y)      # A-BSP, on the embedded cluster
    >>> clf.coef_.shape, clf.classes_
    ((1, 5), array([0, 1]))
    >>> clf.predict_proba(X[:2]).shape, clf.predict(X[:2]).shape
    ((2, 2), (2,))
    >>> clf.score(X, y) > 0.8
    True

    The fit's record, one entry per round and partition:

    >>> h = clf.history_
    >>> h.sizes["round"] == int(clf.n_iter_[0])
    True
    >>> int(h.quota.sum("partition")[0])         # rows asked for in the first round
    2000
    >>> bool((h.rows <= h.quota).all())          # counted: fewer where a partition was cut
    True

    The same fit under BSP gives the same model (A-BSP's rounds may count fewer rows; both stop
    at the tolerance):

    >>> bsp = LogisticRegression(sync="bsp").fit(X, y)
    >>> bool(abs(bsp.coef_ - clf.coef_).max() < 1e-2)
    True
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkLogisticRegression

    _parameter_constraints: dict = {
        "penalty": [StrOptions({"l1", "l2", "elasticnet"}), None,
                    Hidden(StrOptions({"deprecated"}))],
        "C": [Interval(Real, 0, None, closed="right")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both"), None],
        "dual": BOOLEAN,
        "tol": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": BOOLEAN,
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": CLASS_WEIGHT,
        "random_state": ["random_state"],
        "solver": [StrOptions(SAME_OBJECTIVE_SOLVERS | {"liblinear"})],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "warm_start": BOOLEAN,
        "n_jobs": [None, Integral],
        **ENGINE_CONSTRAINTS,
    }
    _rejected: dict = {
        "solver": "'liblinear' with an L1 penalty penalises the intercept by L1 too, which "
                  "daskabsp's proximal steps do not; solver='saga' is the same model with "
                  "the intercept unpenalised.",
        "dual": "scikit-learn's dual formulation is liblinear's; with solver='liblinear' "
                "daskabsp solves its primal (the same optimum).",
    }

    #: scikit-learn's parameters accepted but without effect here, and why.
    _ignored: dict = {
        "intercept_scaling": "scikit-learn uses it with liblinear only; the intercept is not "
                             "penalised here.",
        "random_state": "the fit draws nothing at random (scikit-learn: sag, saga and "
                        "liblinear only).",
        "solver": "all accepted solvers minimise the same objective; the engine takes Newton "
                  "steps, or L-BFGS steps from Hessian-vector products for large models.",
        "n_jobs": "the parallelism is the Dask cluster's worker threads (deprecated in "
                  "scikit-learn 1.8).",
    }

    def __init__(self, penalty=PENALTY_DEFAULT, *, C=1.0, l1_ratio=L1_RATIO_DEFAULT,
                 dual=False, tol=1e-4, fit_intercept=True, intercept_scaling=1,
                 class_weight=None, random_state=None, solver="lbfgs", max_iter=100,
                 verbose=0, warm_start=False, n_jobs=None, sync="absp", n_partitions=None,
                 quota=None, chunk_target=None):
        self.penalty = penalty
        self.C = C
        self.l1_ratio = l1_ratio
        self.dual = dual
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.random_state = random_state
        self.solver = solver
        self.max_iter = max_iter
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target

    def _check_param_combinations(self) -> None:
        """``dual=True`` is liblinear's, as in scikit-learn; liblinear with an L1 part is
        not done (called by ``validate_params`` after the constraints)."""
        if self.dual and self.solver != "liblinear":
            raise InvalidParameterError(
                f"Solver {self.solver} supports only dual=False, got dual={self.dual}. "
                + self._rejected["dual"])
        if self.solver == "liblinear":
            if self.penalty is None or np.isinf(self.C):
                raise ValueError("C=np.inf as well as penalty=None is not supported for the "
                                 "liblinear solver")
            if self._l1_ratio() > 0:
                raise reject(self, "solver", "one of the solvers other than 'liblinear' "
                             "with an L1 penalty", self._rejected["solver"])

    def _l1_ratio(self) -> float:
        """The share of the L1 penalty, resolved as scikit-learn resolves ``penalty`` and
        ``l1_ratio``."""
        if self.penalty == "l1":
            return 1.0
        if self.penalty == "elasticnet":
            if self.l1_ratio is None:
                raise ValueError("l1_ratio must be specified when penalty is elasticnet.")
            return float(self.l1_ratio)
        if self.penalty == "deprecated" and self.l1_ratio is not None:
            return float(self.l1_ratio)
        return 0.0

    def _penalty_scales(self) -> tuple[float, float]:
        """``(L1, L2)`` penalty constants of the objective divided by ``C``: ``(r / C, (1 -
        r) / C)``, 0 without a penalty (``penalty=None`` or ``C=np.inf``)."""
        r = self._l1_ratio()
        if self.penalty is None or np.isinf(self.C):
            return 0.0, 0.0
        return r / self.C, (1.0 - r) / self.C

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
        self._warn_as_sklearn()
        data = validate_fit(self, X, y, sample_weight=sample_weight)
        with self._client().as_current():  # a lazy target is computed where the fit runs
            t = encode_targets(self, data, self.class_weight)
        K, d = len(t.classes), data.X.shape[1]
        liblinear = self.solver == "liblinear"
        if liblinear and K > 2:
            raise ValueError(
                "The 'liblinear' solver does not support multiclass classification (n_classes "
                ">= 3). Either use another solver or wrap the estimator in a "
                "OneVsRestClassifier to keep applying a one-versus-rest scheme.")
        l1, l2 = (s / t.weight_sum for s in self._penalty_scales())
        start = warm_coefficients(self, d, 1 if K == 2 else K)
        if start is not None:
            start = start.reshape(1, -1)
        common = dict(l2=l2, fit_intercept=self.fit_intercept, tol=self.tol,
                      max_hessian=hessian_limit(data.n_samples), start=start)
        if liblinear:
            # liblinear's objective: the intercept is the weight of a constant feature
            # intercept_scaling, penalised as the others: (b / intercept_scaling)^2 / 2 C
            program = LinearNewton(loss="logistic",
                                   l2_intercept=l2 / float(self.intercept_scaling) ** 2,
                                   **common)
        elif K == 2:
            program = (ProximalLinear(loss="logistic", l1=l1, **common) if l1 > 0
                       else LinearNewton(loss="logistic", **common))
        else:
            program = (ProximalMultinomial(n_classes=K, l1=l1, **common) if l1 > 0
                       else MultinomialNewton(n_classes=K, **common))

        def attributes(theta):  # theta: one row of parameters per class (one for K = 2)
            coef, intercept = split_theta(theta, d, self.fit_intercept)
            return {"coef_": coef, "intercept_": intercept, "classes_": t.classes}

        if self.max_iter == 0:  # scikit-learn's way to see the starting point
            rows = 1 if K == 2 else K
            theta = (start if start is not None
                     else np.zeros((rows, d + int(bool(self.fit_intercept)))))
            n_iter = 0
            warnings.warn(f"{type(self).__name__} did not converge: max_iter=0, the "
                          "coefficients are the starting point.", ConvergenceWarning,
                          stacklevel=caller_stacklevel())
        else:
            res = self._run_engine(program, data, t.codes, t.weights,
                                   max_iter=self.max_iter, attributes=attributes)
            theta, n_iter = res.coef, res.n_iter
        for name, value in attributes(theta).items():
            setattr(self, name, value)
        if not liblinear:  # scikit-learn's liblinear returns float64 whatever the rows
            keep_float32(self, data.X.dtype)
        self.n_iter_ = np.array([n_iter], dtype=np.int32)
        return self

    def _warn_as_sklearn(self) -> None:
        """scikit-learn's warnings about ``penalty``, ``l1_ratio``, ``C`` and ``n_jobs``
        (its deprecations of 1.8, and values that have no effect), with its wording."""
        level = caller_stacklevel()
        if SKLEARN_18:
            if self.penalty == "deprecated" and self.l1_ratio is None:
                warnings.warn("'l1_ratio=None' was deprecated in version 1.8 and will trigger "
                              "an error in 1.10. Use 0<=l1_ratio<=1 instead.", FutureWarning,
                              stacklevel=level)
            if self.penalty != "deprecated":
                warnings.warn(
                    "'penalty' was deprecated in version 1.8 and will be removed in 1.10. To "
                    "avoid this warning, leave 'penalty' set to its default value and use "
                    "'l1_ratio' or 'C' instead. Use l1_ratio=0 instead of penalty='l2', "
                    "l1_ratio=1 instead of penalty='l1', l1_ratio set to a float between 0 "
                    "and 1 instead of penalty='elasticnet', and C=np.inf instead of "
                    "penalty=None.", FutureWarning, stacklevel=level)
            if self.n_jobs is not None:
                warnings.warn("'n_jobs' has no effect since 1.8 and will be removed in 1.10. "
                              f"You provided 'n_jobs={self.n_jobs}', please leave it "
                              "unspecified.", FutureWarning, stacklevel=level)
        r = self.l1_ratio
        penalty = self.penalty
        if penalty == "deprecated":
            penalty = ("l2" if r in (0, None) else "l1" if r == 1 else "elasticnet")
            if np.isinf(self.C):
                penalty = None
        if penalty != "elasticnet" and r is not None and 0 < r < 1:
            warnings.warn("l1_ratio parameter is only used when penalty is 'elasticnet'. "
                          f"Got (penalty={penalty})", UserWarning, stacklevel=level)
        if (self.penalty == "l2" and r != 0) or (self.penalty == "l1" and r != 1):
            warnings.warn(f"Inconsistent values: penalty={self.penalty} with l1_ratio={r}. "
                          "penalty is deprecated. Please use l1_ratio only.", UserWarning,
                          stacklevel=level)
        if self.penalty is None and self.C != 1.0:
            warnings.warn("Setting penalty=None will ignore the C and l1_ratio parameters",
                          UserWarning, stacklevel=level)

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
            Logarithms of the probabilities, columns in the order of ``classes_``.
        """
        check_is_fitted(self)
        return self._apply(X, self._log_proba, len(self.classes_))
