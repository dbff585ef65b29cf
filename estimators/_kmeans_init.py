"""Scalable k-means++ ("k-means||", Bahmani et al., VLDB 2012) over the partitions of a dask array.

Each of a few rounds adds about ``oversampling_factor * n_clusters`` candidate centers drawn
with probability proportional to their (weighted) squared distance to the candidates so far,
in one pass over the partitions: every partition keeps its top rows by the exponential-race
key ``log(u) / weight`` (Efraimidis and Spirakis), so the union of the partitions' top rows
contains the global top, and no total cost has to be computed first. A last pass weighs every
candidate by the rows nearest to it, and the weighted candidates are clustered into
``n_clusters`` centers locally with scikit-learn's k-means++.
"""

from __future__ import annotations

import dask
import distributed
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans as _LocalKMeans

from daskabsp.programs import squared_distances


def _dense(rows) -> np.ndarray:
    return rows.toarray() if sp.issparse(rows) else np.asarray(rows)


def _top_rows(X, w, C, seed, ell):
    d2 = squared_distances(X, C).min(axis=1)
    weight = d2 if w is None else d2 * w
    u = np.random.default_rng(seed).random(X.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(weight > 0, np.log(u) / np.where(weight > 0, weight, 1.0), -np.inf)
    k = min(ell, X.shape[0])
    idx = np.argpartition(-key, k - 1)[:k]
    idx = idx[np.isfinite(key[idx])]
    return _dense(X[idx]), key[idx]


def _nearest_weights(X, w, C):
    labels = squared_distances(X, C).argmin(axis=1)
    return np.bincount(labels, weights=w, minlength=C.shape[0])


def _shared(C: np.ndarray):
    """``C`` scattered once, for a pass whose every block task takes it: passed as an array,
    each task of the graph would carry its own copy (megabytes for hundreds of clusters)."""
    return distributed.get_client().scatter(C, hash=False)


def _first_row(wd, n: int, rng: np.random.RandomState) -> int:
    """A row drawn with probability proportional to its weight (uniformly without
    weights), as k-means++ draws its first center."""
    if wd is None:
        return int(rng.randint(n))
    sums = np.asarray(dask.compute(*[b.sum() for b in wd.to_delayed().ravel()]), dtype=float)
    block = int(rng.choice(len(sums), p=sums / sums.sum()))
    w = np.asarray(wd.blocks[block].compute(), dtype=float)
    return int(sum(wd.chunks[0][:block]) + rng.choice(len(w), p=w / w.sum()))


def kmeans_parallel(Xd, wd, n_clusters: int, *, oversampling_factor: float, rounds: int,
                    n_local_init: int, rng: np.random.RandomState) -> np.ndarray:
    """Initial centers by k-means|| over the row blocks of the (persisted) dask array ``Xd``.

    Parameters
    ----------
    Xd : dask array of shape (n_samples, n_features)
        Rows, one chunk per partition (dense or CSR blocks), feature axis in one chunk.
    wd : dask array of shape (n_samples,) or None
        Row weights.
    n_clusters : int
    oversampling_factor : float
        Candidates drawn per round, per cluster.
    rounds : int
        Sampling rounds.
    n_local_init : int
        k-means++ restarts of the local clustering of the candidates (the best is kept).
    rng : RandomState

    Returns
    -------
    ndarray of shape (n_clusters, n_features)
    """
    blocks = list(Xd.to_delayed().ravel())
    weights = list(wd.to_delayed().ravel()) if wd is not None else [None] * len(blocks)
    n = Xd.shape[0]
    first = _first_row(wd, n, rng)
    C = _dense(Xd[first:first + 1].compute())
    ell = max(1, int(np.ceil(oversampling_factor * n_clusters)))
    top = dask.delayed(_top_rows, pure=False)
    for _ in range(rounds):
        seeds = rng.randint(2**31 - 1, size=len(blocks))
        Cs = _shared(C)
        found = dask.compute(*[top(b, w, Cs, int(s), ell)
                               for b, w, s in zip(blocks, weights, seeds, strict=True)])
        rows = np.vstack([f[0] for f in found])
        keys = np.concatenate([f[1] for f in found])
        if rows.shape[0] == 0:
            break  # every row is a candidate already
        keep = np.argsort(-keys)[:ell]
        C = np.vstack([C, rows[keep]])
    nearest = dask.delayed(_nearest_weights, pure=False)
    Cs = _shared(C)
    counts = np.sum(dask.compute(*[nearest(b, w, Cs)
                                   for b, w in zip(blocks, weights, strict=True)]), axis=0)
    if C.shape[0] <= n_clusters:
        extra = rng.choice(n, size=n_clusters - C.shape[0], replace=False) if \
            C.shape[0] < n_clusters else np.zeros(0, dtype=int)
        if extra.size:
            C = np.vstack([C, _dense(Xd[np.sort(extra)].compute())])
        return C[:n_clusters]
    local = _LocalKMeans(n_clusters=n_clusters, init="k-means++", n_init=n_local_init,
                         random_state=rng).fit(C, sample_weight=counts + 1e-12)
    return local.cluster_centers_
