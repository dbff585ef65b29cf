"""Principal component analysis fitted on the daskabsp engine."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.decomposition import PCA as SkPCA
from sklearn.decomposition._pca import _infer_dimension
from sklearn.utils import check_random_state
from sklearn.utils.extmath import fast_logdet, svd_flip
from sklearn.utils.validation import check_is_fitted

from daskabsp.programs import CovarianceMoments, SubspacePCA
from daskabsp.programs.gram import GRAM_LIMIT

from ._callbacks import fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import map_rows, validate_fit, validate_predict
from ._least_squares import rough_centre
from ._linear import keep_float32
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    RealNotInt,
    StrOptions,
    validate_params,
)

#: Most rounds of a fit (a one-pass fit takes one).
MAX_ROUNDS = 1000
#: Relative Ritz residual the subspace iteration stops at when ``tol=0`` (scikit-learn's
#: "machine precision" for ARPACK): eigenvalues are then exact to about its square.
SUBSPACE_TOL = 1e-9


def _is_sparse(data) -> bool:
    X = data.X
    return sp.issparse(X) or (data.lazy and sp.issparse(getattr(X, "_meta", None)))


class PCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, EngineMixin, BaseEstimator):
    """Principal component analysis whose fit runs on a Dask cluster.

    A drop-in for :class:`sklearn.decomposition.PCA`: the same components, explained
    variances and methods, computed over the partitions of the data in one of two ways.

    * **One pass** (``svd_solver`` ``"covariance_eigh"`` and ``"full"``, and ``"auto"`` for
      data of at most 1 000 features and ten times as many rows, scikit-learn's rule, sparse
      rows included, for which scikit-learn takes ARPACK): every
      partition sums its rows and their Gram matrix, the driver takes the eigenvectors of
      the covariance (:class:`daskabsp.programs.CovarianceMoments`). The pass is a full
      round under every sync model (stopping it early saves nothing; the default A-BSP lends
      the straggler helpers); SSP and ASP end once every partition has reported.
    * **Subspace iteration** (``"arpack"``, ``"randomized"``, and ``"auto"`` for wider or
      sparse data): a block power iteration over the partitions with a Rayleigh-Ritz step
      (:class:`daskabsp.programs.SubspacePCA`). Under A-BSP its first rounds are partial (a
      sample's covariance moves the basis as well while it is far), the last ones full;
      under SSP and ASP the basis advances once per sweep of every partition. ``"arpack"``
      runs until the residuals are within ``tol``; ``"randomized"`` runs ``iterated_power``
      power iterations, as scikit-learn's randomized solver (approximate, as it is).

    Rows are never centred in place: the covariance is formed from sums (sparse rows stay
    sparse).

    Parameters
    ----------
    n_components : int, float or "mle", default=None
        Components kept: a number; the share of the variance to explain (a float in (0,
        1), one-pass solvers only); ``"mle"`` (Minka's estimate, one-pass solvers only); None:
        ``min(n_samples, n_features)`` (minus one for ``"arpack"``).
    copy : bool, default=True
        Ignored: ``X`` is never modified (the fit only reads it).
    whiten : bool, default=False
        Scale the projections to unit variance.
    svd_solver : {"auto", "covariance_eigh", "full", "arpack", "randomized"}, default="auto"
        How the components are found (see above). ``"full"`` above 1 024 features with an
        integer ``n_components`` uses subspace iteration to ``tol`` (a Gram matrix of that
        size is too large for a task); with another ``n_components`` it raises.
    tol : float, default=0.0
        ``"arpack"`` (and the subspace fallback of ``"full"``): the relative Ritz residual to
        stop at (0: 1e-9, about what a Gram matrix resolves).
    iterated_power : int or "auto", default="auto"
        ``"randomized"``: the power iterations run (``"auto"``: 7, or 4 when
        ``n_components`` is at least a tenth of ``min(n_samples, n_features)``).
    n_oversamples : int, default=10
        Subspace iteration: extra basis vectors beyond ``n_components``.
    power_iteration_normalizer : {"auto", "QR", "LU", "none"}, default="auto"
        Ignored: the basis is orthonormalised with a QR factorisation every iteration (the
        other choices trade accuracy for speed in scikit-learn's in-memory loop).
    random_state : int, RandomState instance or None, default=None
        Seeds the starting basis of subspace iteration.
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the rounds.
    n_partitions : int, default=None
        Partitions of in-memory input, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the fit's rounds.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Principal axes, by decreasing explained variance; each with its largest entry
        positive (scikit-learn's sign convention).
    explained_variance_ : ndarray of shape (n_components,)
        Variance along each component (divisor ``n_samples - 1``).
    explained_variance_ratio_ : ndarray of shape (n_components,)
        Share of the total variance along each component.
    singular_values_ : ndarray of shape (n_components,)
        Singular values of the centred rows.
    mean_ : ndarray of shape (n_features,)
        Mean of the rows.
    n_components_ : int
        Components kept.
    n_samples_ : int
        Rows seen during fit.
    noise_variance_ : float
        Mean of the variances not explained (probabilistic PCA's noise variance).
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
    sklearn.decomposition.PCA : The in-process estimator this one mirrors.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.estimators import PCA
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((5000, 4)) * [3.0, 2.0, 1.0, 0.5]
    >>> pca = PCA(n_components=2).fit(X)
    >>> pca.explained_variance_.round(1)
    array([8.9, 4. ])
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkPCA

    _parameter_constraints: dict = {
        "n_components": [
            Interval(Integral, 0, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="neither"),
            StrOptions({"mle"}),
            None,
        ],
        "copy": BOOLEAN,
        "whiten": BOOLEAN,
        "svd_solver": [StrOptions({"auto", "covariance_eigh", "full", "arpack",
                                   "randomized"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "iterated_power": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "n_oversamples": [Interval(Integral, 1, None, closed="left")],
        "power_iteration_normalizer": [StrOptions({"auto", "QR", "LU", "none"})],
        "random_state": ["random_state"],
        **ENGINE_CONSTRAINTS,
    }
    _ignored: dict = {
        "copy": "X is never modified: the fit only reads it.",
        "power_iteration_normalizer": "the basis is orthonormalised with QR every "
                                      "iteration.",
    }
    _rejected: dict = {}

    def __init__(self, n_components=None, *, copy=True, whiten=False, svd_solver="auto",
                 tol=0.0, iterated_power="auto", n_oversamples=10,
                 power_iteration_normalizer="auto", random_state=None, sync="absp",
                 n_partitions=None, quota=None, chunk_target=None, verbose=0):
        self.n_components = n_components
        self.copy = copy
        self.whiten = whiten
        self.svd_solver = svd_solver
        self.tol = tol
        self.iterated_power = iterated_power
        self.n_oversamples = n_oversamples
        self.power_iteration_normalizer = power_iteration_normalizer
        self.random_state = random_state
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target
        self.verbose = verbose

    def _max_rounds(self) -> int:
        return MAX_ROUNDS

    # -- fit ----------------------------------------------------------------------------------

    def _solver(self, n: int, d: int, sparse: bool, n_components) -> str:
        """scikit-learn's choice of solver for ``svd_solver="auto"``, except that sparse
        rows of at most 1 000 features and ten times as many rows get the one-pass solver too
        (scikit-learn takes ARPACK for every sparse input: its covariance would be dense; here
        the Gram matrix is summed from the sparse rows, and one pass is exact)."""
        solver = self.svd_solver
        if solver != "auto":
            return solver
        if d <= 1_000 and n >= 10 * d:
            return "covariance_eigh"
        if sparse:
            return "arpack"
        if d <= 1_000 and n >= 10 * d:
            return "covariance_eigh"
        if max(n, d) <= 500 or n_components == "mle":
            return "full"
        if 1 <= n_components < 0.8 * min(n, d):
            return "randomized"
        return "full"

    def _check_components(self, n: int, d: int, solver: str, n_components) -> None:
        """scikit-learn's checks of ``n_components`` against the data and the solver."""
        low = min(n, d)
        if solver in ("full", "covariance_eigh"):
            if n_components == "mle":
                if n < d:
                    raise ValueError(
                        "n_components='mle' is only supported if n_samples >= n_features")
            elif not 0 <= n_components <= low:
                raise ValueError(
                    f"n_components={n_components} must be between 0 and "
                    f"min(n_samples, n_features)={low} with svd_solver={solver!r}")
            return
        if isinstance(n_components, str):
            raise ValueError(f"n_components={n_components!r} cannot be a string with "
                             f"svd_solver='{solver}'")
        if not 1 <= n_components <= low:
            raise ValueError(f"n_components={n_components!r} must be between 1 and "
                             f"min(n_samples, n_features)={low!r} with svd_solver='{solver}'")
        if solver == "arpack" and n_components == low:
            raise ValueError(f"n_components={n_components!r} must be strictly less than "
                             f"min(n_samples, n_features)={low!r} with svd_solver='{solver}'")

    def _passes(self, n_components: int, n: int, d: int) -> int | None:
        if self.iterated_power != "auto":
            return int(self.iterated_power)
        return 7 if n_components < 0.1 * min(n, d) else 4

    @fit_with_callbacks
    def fit(self, X, y=None):
        """Fit the model on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, None, needs_y=False)
        n, d = data.X.shape
        sparse = _is_sparse(data)
        solver = self._solver(n, d, sparse, self.n_components)
        n_components = self.n_components
        if n_components is None:
            n_components = min(n, d) - (1 if solver == "arpack" else 0)
        self._check_components(n, d, solver, n_components)
        with self._client().as_current():
            shift = rough_centre(data)
        one_pass = solver in ("full", "covariance_eigh") and d <= GRAM_LIMIT
        if solver in ("full", "covariance_eigh") and not one_pass and (
                isinstance(n_components, str) or not float(n_components).is_integer()):
            raise ValueError(
                f"n_components={n_components!r} needs every eigenvalue, which the engine "
                f"takes from a Gram matrix of at most {GRAM_LIMIT} features; X has {d}. "
                "Give an integer n_components (found by subspace iteration).")
        if one_pass:
            res = self._run_engine(CovarianceMoments(shift=shift), data, None, None,
                                   max_iter=MAX_ROUNDS, attributes=lambda c: {})
            self._set_full(res.state.solution, n, d, solver, n_components)
        else:
            k = int(n_components)
            seed = int(check_random_state(self.random_state).randint(2**31 - 1))
            passes = self._passes(k, n, d) if solver == "randomized" else None
            program = SubspacePCA(n_components=k, n_oversamples=int(self.n_oversamples),
                                  tol=self.tol or SUBSPACE_TOL, max_passes=passes,
                                  seed=seed, shift=shift)
            res = self._run_engine(program, data, None, None, max_iter=MAX_ROUNDS,
                                   attributes=lambda c: {})
            self._set_truncated(res.state, n, d, k)
        self.n_samples_ = n
        self.n_iter_ = int(res.n_iter)
        self._fit_svd_solver = solver
        keep_float32(self, data.X.dtype, ("components_", "mean_", "explained_variance_",
                                          "explained_variance_ratio_", "singular_values_"))
        return self

    def _set_full(self, sol, n: int, d: int, solver: str, n_components) -> None:
        ev = sol.eigenvalues if solver == "covariance_eigh" else sol.eigenvalues[:min(n, d)]
        _, Vt = svd_flip(None, sol.eigenvectors[:, :ev.shape[0]].T, u_based_decision=False)
        total = float(ev.sum())
        ratio = ev / total if total > 0 else np.zeros_like(ev)
        if n_components == "mle":
            n_components = int(_infer_dimension(ev, n))
        elif 0 < n_components < 1.0:
            n_components = int(np.searchsorted(np.cumsum(ratio), n_components,
                                               side="right") + 1)
        k = int(n_components)
        self.noise_variance_ = float(ev[k:].mean()) if k < min(n, d) else 0.0
        self.n_components_ = k
        self.mean_ = sol.mean
        self.components_ = Vt[:k].copy()
        self.explained_variance_ = ev[:k].copy()
        self.explained_variance_ratio_ = ratio[:k].copy()
        self.singular_values_ = np.sqrt(ev[:k] * max(n - 1, 0))

    def _set_truncated(self, state, n: int, d: int, k: int) -> None:
        ev = state.values[:k]
        _, Vt = svd_flip(None, state.vectors[:, :k].T, u_based_decision=False)
        total = state.total_variance
        self.n_components_ = k
        self.mean_ = state.mean
        self.components_ = Vt
        self.explained_variance_ = ev.copy()
        self.explained_variance_ratio_ = ev / total if total > 0 else np.zeros_like(ev)
        self.singular_values_ = np.sqrt(ev * max(n - 1, 0))
        rest = min(n, d) - k
        self.noise_variance_ = float((total - ev.sum()) / rest) if rest > 0 else 0.0

    # -- use ----------------------------------------------------------------------------------

    @property
    def _n_features_out(self) -> int:
        return self.components_.shape[0]

    def _project(self, X) -> np.ndarray:
        Z = np.asarray(X @ self.components_.T) - self.mean_ @ self.components_.T
        if self.whiten:
            Z /= np.sqrt(np.maximum(self.explained_variance_, 1e-300))
        return Z

    def transform(self, X):
        """Project rows onto the principal components.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)
            Rows to project.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            Projections (lazy for dask input), whitened if ``whiten``.
        """
        check_is_fitted(self)
        Xv, lazy = validate_predict(self, X)
        if lazy:
            return map_rows(Xv, self._project, n_out=self.n_components_, dtype=np.float64)
        return self._project(Xv)

    def fit_transform(self, X, y=None):
        """Fit the model and project ``X`` onto its components.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            The projections of the training rows.
        """
        return self.fit(X).transform(X)

    def inverse_transform(self, X):
        """Map projections back to the space of the rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)
            Projections (whitened if ``whiten``).

        Returns
        -------
        ndarray of shape (n_samples, n_features)
            The rows the projections stand for (exact for rows in the span of the
            components).
        """
        check_is_fitted(self)
        Z = np.asarray(X, dtype=np.float64)
        if self.whiten:
            Z = Z * np.sqrt(self.explained_variance_)
        return Z @ self.components_ + self.mean_

    def _scaled(self):
        C = self.components_
        ev = self.explained_variance_
        if self.whiten:
            C = C * np.sqrt(ev[:, None])
        diff = np.where(ev > self.noise_variance_, ev - self.noise_variance_, 0.0)
        return C, diff

    def get_covariance(self):
        """The covariance of the rows under the probabilistic PCA model.

        Returns
        -------
        cov : ndarray of shape (n_features, n_features)
            ``components_.T @ diag(explained_variance_ - noise) @ components_ + noise * I``.
        """
        check_is_fitted(self)
        C, diff = self._scaled()
        cov = (C.T * diff) @ C
        cov.flat[::cov.shape[0] + 1] += self.noise_variance_
        return cov

    def get_precision(self):
        """The inverse of :meth:`get_covariance`, by the matrix inversion lemma.

        Returns
        -------
        precision : ndarray of shape (n_features, n_features)
            The precision matrix of the probabilistic PCA model.
        """
        check_is_fitted(self)
        d = self.components_.shape[1]
        noise = self.noise_variance_
        if self.n_components_ == 0:
            return np.eye(d) / noise
        if noise == 0.0:
            return np.linalg.inv(self.get_covariance())
        C, diff = self._scaled()
        inner = C @ C.T / noise
        inner.flat[::inner.shape[0] + 1] += 1.0 / np.where(diff > 0, diff, math.inf)
        P = C.T @ np.linalg.solve(inner, C)
        P /= -(noise ** 2)
        P.flat[::d + 1] += 1.0 / noise
        return P

    def score_samples(self, X):
        """Log-likelihood of each row under the probabilistic PCA model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        ll : ndarray of shape (n_samples,)
            The log-likelihood of each row.
        """
        check_is_fitted(self)
        Xv, lazy = validate_predict(self, X)
        if lazy:
            Xv = Xv.compute()
        Xr = (Xv.toarray() if sp.issparse(Xv) else np.asarray(Xv)) - self.mean_
        d = Xr.shape[1]
        precision = self.get_precision()
        ll = -0.5 * (Xr * (Xr @ precision)).sum(axis=1)
        ll -= 0.5 * (d * np.log(2.0 * np.pi) - fast_logdet(precision))
        return ll

    def score(self, X, y=None):
        """Average log-likelihood of the rows under the probabilistic PCA model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        ll : float
            The mean of :meth:`score_samples`.
        """
        return float(np.mean(self.score_samples(X)))
