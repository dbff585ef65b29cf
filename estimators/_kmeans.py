"""K-means clustering fitted on the daskabsp engine."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.cluster import KMeans as SkKMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import check_is_fitted

import daskabsp
from daskabsp.programs import LloydKMeans, squared_distances

from ._callbacks import caller_stacklevel, fit_with_callbacks
from ._engine import EngineMixin
from ._inputs import map_rows, validate_fit, validate_predict
from ._kmeans_init import BlockDraws, kmeans_parallel, random_rows
from ._validation import (
    BOOLEAN,
    ENGINE_CONSTRAINTS,
    Interval,
    StrOptions,
    check_sample_weight,
    validate_params,
)

#: Initialisations tried for ``n_init="auto"``, as in scikit-learn: 1 for k-means++, 10 for
#: ``"random"`` and a callable.
AUTO_N_INIT = {"k-means++": 1, "random": 10, "callable": 10}
#: k-means|| sampling rounds for ``init_max_iter=None``.
DEFAULT_INIT_ROUNDS = 5


def _labels(X, centers):
    return squared_distances(X, centers).argmin(axis=1).astype(np.int32)


def _distances(X, centers):
    return np.sqrt(squared_distances(X, centers))


def _inertia(X, w, centers):
    d = squared_distances(X, centers).min(axis=1)
    return np.array([d.sum() if w is None else d @ w])


def _inertia_total(Xd, wd, centers) -> float:
    """The (weighted) inertia of dask rows ``Xd`` with ``centers``, block by block."""
    blocks = list(Xd.to_delayed().ravel())
    weights = list(wd.to_delayed().ravel()) if wd is not None else [None] * len(blocks)
    f = dask.delayed(_inertia, pure=True)
    return float(np.sum(dask.compute(*[f(b, w, centers)
                                       for b, w in zip(blocks, weights, strict=True)])))


def _moments(X, w) -> np.ndarray:
    """Total weight, weighted means and weighted sums of squared deviations of the columns
    of ``X`` (one row of ``[W, mean..., m2...]``), for :func:`_merge_moments`."""
    w = np.ones(X.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
    W = float(w.sum())
    d = X.shape[1]
    if W <= 0:
        return np.zeros(1 + 2 * d)
    if sp.issparse(X):
        mean = np.asarray(X.T @ w).ravel() / W
        m2 = np.asarray(X.multiply(X).T @ w).ravel() - W * mean**2
    else:
        mean = w @ X / W
        m2 = w @ (X - mean) ** 2
    return np.concatenate(([W], mean, np.maximum(m2, 0.0)))


def _merge_moments(parts) -> float:
    """Mean of the weighted variances of the features from per-block :func:`_moments`
    (Chan et al.'s pairwise update)."""
    W, mean, m2 = 0.0, 0.0, 0.0
    for p in parts:
        Wb = p[0]
        if Wb <= 0:
            continue
        d = (len(p) - 1) // 2
        mb, m2b = p[1:1 + d], p[1 + d:]
        delta = mb - mean
        total = W + Wb
        mean = mean + delta * (Wb / total)
        m2 = m2 + m2b + delta**2 * (W * Wb / total)
        W = total
    if W == 0:  # lazy weights are not checked up front
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return float(np.mean(m2 / W))


def _mean_variance(X, w=None) -> float:
    """Mean of the features' (weighted) variances: scikit-learn's scale for ``tol``, with
    the weights counted as repetitions of the rows (a fit with weights stops where the fit
    on the repeated rows stops)."""
    if w is None and not sp.issparse(X):
        return float(np.mean(np.var(X, axis=0)))
    return _merge_moments([_moments(X, w)])


def _lazy_mean_variance(Xd, wd) -> float:
    """:func:`_mean_variance` of dask rows, block by block in one pass."""
    blocks = list(Xd.to_delayed().ravel())
    weights = list(wd.to_delayed().ravel()) if wd is not None else [None] * len(blocks)
    f = dask.delayed(_moments, pure=True)
    return _merge_moments(dask.compute(*[f(b, w) for b, w in
                                         zip(blocks, weights, strict=True)]))


def _seeds(rng: np.random.RandomState) -> tuple[int, int]:
    """The seed of the content-decided draws (64 bits) and of the local k-means++."""
    hi, lo, local = (int(v) for v in rng.randint(0, 2**32, size=3, dtype=np.int64))
    return (hi << 32) | lo, local


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, EngineMixin,
             BaseEstimator):
    """K-means clustering whose Lloyd iterations run on a Dask cluster (A-BSP by default).

    A drop-in for :class:`sklearn.cluster.KMeans` (Lloyd's algorithm). Each round, every
    partition assigns the rows it scans to their nearest center and returns the per-cluster
    sums and counts; the new centers are the means (see
    :class:`daskabsp.programs.LloydKMeans` for how partial rounds are combined so that the
    fixed point is Lloyd's on all the rows). ``labels_`` and ``inertia_`` come from one more
    pass over all rows with the final centers.

    ``init="k-means++"`` runs the scalable k-means|| over the partitions (a few passes with
    Dask, waiting for every partition), then k-means++ on the weighted candidates locally.
    ``n_init`` counts initialisations, of which the best is kept (scikit-learn runs Lloyd
    from each and keeps the best result; here Lloyd runs once, from the best start, since
    every Lloyd run costs rounds on the cluster). ``"auto"`` means what it means in
    scikit-learn: 1 for ``"k-means++"``, 10 for ``"random"`` or a callable.

    ``sample_weight`` counts as repetition: a row of weight 2 gives the fit of the same row
    twice (up to rounding, under ``sync="bsp"``). The initialisation draws distinct rows, and
    a row's random number is a function of its values and ``random_state``, not of its
    position; equal rows are one candidate whose weight is their total weight, also when they
    are in different partitions (a one-off pass hashes the rows and totals the weights of
    equal rows).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    init : {"k-means++", "random"}, callable or array-like of shape \
(n_clusters, n_features), default="k-means++"
        Initial centers: k-means|| (scalable k-means++), distinct rows drawn at random
        with probabilities proportional to their weights, ``init(X, n_clusters,
        random_state=rng)`` as in scikit-learn (``X`` as given to ``fit``; a dask
        array for dask input), or the given centers.
    n_init : "auto" or int, default="auto"
        Initialisations tried, the best kept: local k-means++ restarts over the k-means||
        candidates; random draws or calls of ``init`` of which the one with the lowest
        inertia over the data is kept (one pass over the data each). ``"auto"``: 1 for
        ``"k-means++"``, 10 otherwise (scikit-learn's meaning). Ignored for given centers.
    max_iter : int, default=300
        Maximum number of Lloyd rounds.
    tol : float, default=1e-4
        Converged when the squared Frobenius norm of the change of the centers, divided by
        the mean (weighted) variance of the features, is at most ``tol`` (scikit-learn's
        rule), on statistics covering every row once.
    verbose : int, default=0
        0: silent. 1 or more: a progress bar of the Lloyd rounds (the k-means||
        initialisation is not shown), see :class:`~daskabsp.estimators.LogisticRegression`.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialisation (with the rows' values: the same rows and seed give the
        same initial centers whatever the rows' order and partitioning).
    copy_x : bool, default=True
        Ignored: ``X`` is never modified (scikit-learn may centre it in place when
        ``copy_x=False``; daskabsp only reads the rows and never centres them).
    algorithm : {"lloyd", "elkan"}, default="lloyd"
        Lloyd's iteration in both cases: Elkan's is an exact acceleration of Lloyd's (the
        same iterates), which the engine does not implement, so ``"elkan"`` is accepted and
        runs Lloyd.
    oversampling_factor : float, default=2.0
        k-means|| candidates drawn per round and per cluster.
    init_max_iter : int, default=None
        k-means|| sampling rounds (None: 5).
    sync : {"absp", "bsp"} or daskabsp.Policy, default="absp"
        Synchronisation model of the Lloyd rounds.
    n_partitions : int, default=None
        Partitions of in-memory input. Default: one per worker thread, each with at least
        ``daskabsp.min-partition-rows`` rows.
    quota : int or float, default=None
        Rows (int) or share (float in (0, 1]) of a partition scanned per round. Default: the
        whole partition.
    chunk_target : float, default=None
        Seconds of work between two checks of the stop signal, see
        :class:`~daskabsp.estimators.LogisticRegression`.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray or dask array of shape (n_samples,)
        Nearest center of each training row (a lazy dask array for dask input).
    inertia_ : float
        Sum of the (weighted) squared distances of the rows to their nearest center.
    n_iter_ : int
        Lloyd rounds run.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
    history_ : xarray.Dataset
        The engine's record of the Lloyd rounds.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from daskabsp.estimators import KMeans
    >>> X, _ = make_blobs(n_samples=3_000, centers=3, n_features=2, random_state=0)
    >>> km = KMeans(n_clusters=3, random_state=0).fit(X)   # on the embedded cluster
    >>> km.cluster_centers_.shape, km.labels_.shape
    ((3, 2), (3000,))
    >>> km.predict(X[:4]).shape, km.transform(X[:4]).shape
    ((4,), (4, 3))
    >>> float(km.score(X)) == -float(km.inertia_)
    True
    """

    #: scikit-learn's estimator this one mirrors (its parameters, defaults and constraints).
    _counterpart = SkKMeans

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"k-means++", "random"}), callable, "array-like"],
        "n_init": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ENGINE_CONSTRAINTS["verbose"],
        "random_state": ["random_state"],
        "copy_x": BOOLEAN,
        "algorithm": [StrOptions({"lloyd", "elkan"})],
        "oversampling_factor": [Interval(Real, 0, None, closed="neither")],
        "init_max_iter": [Interval(Integral, 1, None, closed="left"), None],
        **ENGINE_CONSTRAINTS,
    }

    #: scikit-learn's parameters accepted but without effect here, and why.
    _ignored: dict = {
        "copy_x": "X is never modified: daskabsp only reads the rows and never "
                  "centres them.",
        "algorithm": "\"elkan\" is an exact acceleration of Lloyd's iteration (the same "
                     "iterates); the engine runs Lloyd's in both cases.",
    }
    _rejected: dict = {}

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, verbose=0, random_state=None, copy_x=True, algorithm="lloyd",
                 oversampling_factor=2.0, init_max_iter=None, sync="absp", n_partitions=None,
                 quota=None, chunk_target=None):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose
        self.random_state = random_state
        self.copy_x = copy_x
        self.algorithm = algorithm
        self.oversampling_factor = oversampling_factor
        self.init_max_iter = init_max_iter
        self.sync = sync
        self.n_partitions = n_partitions
        self.quota = quota
        self.chunk_target = chunk_target

    def _n_inits(self) -> int:
        """``n_init``, with ``"auto"`` resolved as scikit-learn does (one for given
        centers, whatever ``n_init``)."""
        if not (isinstance(self.init, str) or callable(self.init)):
            return 1
        if self.n_init != "auto":
            return int(self.n_init)
        return AUTO_N_INIT["callable" if callable(self.init) else self.init]

    # -- fit ----------------------------------------------------------------------------------

    def _given_centers(self, n_features: int) -> np.ndarray | None:
        """The ``init`` array, checked against the data (None for a named method)."""
        if isinstance(self.init, str) or callable(self.init):
            return None
        return self._checked_centers(self.init, n_features)

    def _checked_centers(self, init, n_features: int) -> np.ndarray:
        C = check_array(init, dtype=np.float64)
        k = self.n_clusters
        if C.shape[0] != k:
            raise ValueError(f"The shape of the initial centers {C.shape} does not match the "
                             f"number of clusters {k}.")
        if C.shape[1] != n_features:
            raise ValueError(f"The shape of the initial centers {C.shape} does not match the "
                             f"number of features of the data {n_features}.")
        return C

    def _initial_centers(self, X, w, rng, rows=None) -> np.ndarray:
        """k-means||, random rows, or a callable's centers. k-means|| and random rows depend
        on the rows' values and weights, not on their order or on how a weight is spelled (a
        row of weight 2 or the row twice). ``rows``: the data as given to ``fit`` (what a
        callable ``init`` is called with, as scikit-learn does)."""
        k, d = self.n_clusters, X.shape[1]
        if callable(self.init):
            best, best_cost = None, np.inf
            n_draws = self._n_inits()
            for _ in range(n_draws):
                C = self._checked_centers(
                    self.init(X if rows is None else rows, k, random_state=rng), d)
                cost = _inertia_total(X, w, C) if n_draws > 1 else 0.0
                if cost < best_cost:
                    best, best_cost = C, cost
            return best
        seed, local_seed = _seeds(rng)
        draws = BlockDraws(X, w, seed)
        if self.init == "k-means++":
            rounds = self.init_max_iter or DEFAULT_INIT_ROUNDS
            n_local = self._n_inits()
            return kmeans_parallel(draws, d, k, oversampling_factor=self.oversampling_factor,
                                   rounds=rounds, n_local_init=n_local,
                                   local_seed=local_seed)
        # "random": distinct rows drawn by weight; with several draws, the one of lowest
        # inertia
        n_draws = self._n_inits()
        best, best_cost = None, np.inf
        for i in range(n_draws):
            C = random_rows(draws, d, k, i)
            cost = _inertia_total(X, w, C) if n_draws > 1 else 0.0
            if cost < best_cost:
                best, best_cost = C, cost
        return best

    @fit_with_callbacks
    def fit(self, X, y=None, sample_weight=None):
        """Compute the k-means clustering on a Dask cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, dask DataFrame, DataArray} of shape \
(n_samples, n_features)
            Training rows.
        y : Ignored
            Not used, present for API consistency.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Row weights.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        validate_params(self, self._parameter_constraints)
        data = validate_fit(self, X, None, sample_weight=sample_weight, needs_y=False)
        n, d = data.X.shape
        if n < self.n_clusters:
            raise ValueError(f"n_samples={n} should be >= n_clusters={self.n_clusters}.")
        given = self._given_centers(d)
        if given is not None and self.n_init not in ("auto", 1):
            warnings.warn(
                "Explicit initial center position passed: performing only one init in "
                f"{type(self).__name__} instead of n_init={self.n_init}.", RuntimeWarning,
                stacklevel=caller_stacklevel())
        self._n_init = self._n_inits()
        rng = check_random_state(self.random_state)
        client = self._client()
        # The initialisation's dask computations must run where the rows were placed, also
        # when that is the engine's embedded cluster rather than the default client.
        with client.as_current():
            placed = daskabsp.place(data.X, sample_weight=data.sample_weight,
                                    n_partitions=self._n_partitions(data), client=client)
            Xd, wd = placed.X, placed.sample_weight
            scale = (_mean_variance(data.X, data.sample_weight) if not data.lazy
                     else _lazy_mean_variance(Xd, wd))
            C0 = given if given is not None else self._initial_centers(Xd, wd, rng,
                                                                       data.X)
            program = LloydKMeans(initial_centers=C0, tol=self.tol * scale)
            res = self._run_engine(program, placed, None, None, max_iter=self.max_iter,
                                   attributes=lambda c: {"cluster_centers_": c})
            centers = res.state.centers
            if data.lazy:
                self.inertia_ = _inertia_total(Xd, wd, centers)
        self.cluster_centers_ = centers.astype(data.X.dtype, copy=False)
        self.n_iter_ = int(res.n_iter)
        if data.lazy:
            self.labels_ = map_rows(data.X, lambda b, c=centers: _labels(b, c), n_out=None,
                                    dtype=np.int32)
        else:
            D = squared_distances(data.X, centers)
            self.labels_ = D.argmin(axis=1).astype(np.int32)
            mind = D[np.arange(n), self.labels_]
            sw = data.sample_weight
            self.inertia_ = float(mind.sum() if sw is None else mind @ sw)
            distinct = len(np.unique(self.labels_))
            if distinct < self.n_clusters:
                warnings.warn(
                    f"Number of distinct clusters ({distinct}) found smaller than n_clusters "
                    f"({self.n_clusters}). Possibly due to duplicate points in X.",
                    ConvergenceWarning, stacklevel=caller_stacklevel())
        return self

    # -- use ----------------------------------------------------------------------------------

    @property
    def _n_features_out(self) -> int:
        """The columns of ``transform``: one distance per center."""
        return self.cluster_centers_.shape[0]

    def _apply(self, X, func, n_out, dtype):
        check_is_fitted(self)
        X, lazy = validate_predict(self, X)
        c = self.cluster_centers_
        if lazy:
            return map_rows(X, lambda b: func(b, c), n_out=n_out, dtype=dtype)
        return func(X, c)

    def predict(self, X):
        """Index of the nearest center of each row.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
            A dask array (lazy) when ``X`` is dask-backed.
        """
        return self._apply(X, _labels, None, np.int32)

    def transform(self, X):
        """Distances of each row to every center.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_clusters)
            Each row's distance to each center (a dask array when ``X`` is dask-backed).
        """
        check_is_fitted(self)
        return self._apply(X, _distances, self.n_clusters, np.float64)

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the inertia of ``X`` with the fitted centers.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)
        y : Ignored
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
            Minus the inertia of ``X`` with respect to the centers.
        """
        check_is_fitted(self)
        Xv, lazy = validate_predict(self, X)
        c = self.cluster_centers_
        if lazy:
            w = None
            if sample_weight is not None:
                w = da.asarray(sample_weight).rechunk((Xv.chunks[0],))
            return -_inertia_total(Xv, w, c)
        sw = None if sample_weight is None else check_sample_weight(sample_weight,
                                                                     Xv.shape[0])
        return -float(_inertia(Xv, sw, c)[0])
