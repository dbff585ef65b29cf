"""Initial k-means centers over the partitions of a dask array: k-means|| and random rows.

k-means|| ("scalable k-means++", Bahmani et al., VLDB 2012): each of a few rounds adds about
``oversampling_factor * n_clusters`` candidate centers drawn with probability proportional to
their weight times their squared distance to the candidates so far, in one pass over the
partitions; a last pass weighs every candidate by the rows nearest to it, and the weighted
candidates are clustered into ``n_clusters`` centers locally with scikit-learn's k-means++.

The draws are over *distinct rows* and decided by their content (see ``_row_draws``): a row of
weight 2 and the same row twice are one value of weight 2, draw the same random numbers and
give the same candidates, so a fit with ``sample_weight`` is the fit on the repeated rows.
Each round is an exponential race: every partition offers the values of its rows with the
smallest ``-log(u) / (weight * distance**2)`` and the driver keeps the overall smallest, so no
total cost has to be computed first. Values whose rows span several partitions get their total
weight from a one-off tree reduction of the partitions' (hash, weight) tables on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import distributed
import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans as _LocalKMeans

from daskabsp import answering_workers, compute_answering, stuck_keys
from daskabsp.programs import squared_distances

from ._row_draws import (
    DistinctRows,
    WeightTable,
    distinct_rows,
    merge_tables,
    pick,
    race_times,
    row_hashes,
    shared_values,
    smallest,
    with_shared,
)

#: Partitions' weight tables merged per task of the tree reduction.
_FAN_IN = 8
#: Streams of random numbers: k-means|| round r uses ``_PARALLEL + r``, the i-th draw of
#: ``init="random"`` uses ``_RANDOM + i``.
_PARALLEL = 0
_RANDOM = 1 << 40


def _dense(rows) -> np.ndarray:
    return np.asarray(rows.toarray() if sp.issparse(rows) else rows, dtype=np.float64)


@dataclass(frozen=True)
class Candidates:
    """Centers drawn so far, and the hashes of their values (sorted), shared by every block
    task of a pass."""

    centers: np.ndarray
    hashes: np.ndarray

    @property
    def sorted_hashes(self) -> np.ndarray:
        return np.sort(self.hashes)


def reduce_tree(items: list, merge, fan_in: int = _FAN_IN):
    """``merge`` applied over ``items`` in a tree, ``fan_in`` at a time."""
    while len(items) > 1:
        items = [merge(*items[i:i + fan_in]) for i in range(0, len(items), fan_in)]
    return items[0]


def _analyse(X, w) -> DistinctRows:
    return distinct_rows(row_hashes(X), w)


def _top_rows(X, rows: DistinctRows, cand: Candidates, seed: int, stream: int, m: int):
    """A block's offer: its ``m`` values that arrive first in the race, as (dense rows,
    times, hashes). With no candidates yet, the mass of a value is its weight."""
    if cand.centers.shape[0] == 0:
        mass = rows.weights
    else:
        mass = squared_distances(X, cand.centers).min(axis=1)[rows.rows]
        mass *= rows.weights
    t = race_times(rows.hashes, mass, seed, stream, cand.sorted_hashes)
    top = smallest(t, rows.hashes, m)
    return _dense(X[rows.rows[top]]), t[top], rows.hashes[top]


def merge_offers(offers, m: int) -> Candidates:
    """The ``m`` winners of a race among the blocks' :func:`_top_rows` offers (a value
    offered by several blocks counts once)."""
    rows = np.vstack([o[0] for o in offers])
    hashes = np.concatenate([o[2] for o in offers])
    won = pick(np.concatenate([o[1] for o in offers]), hashes, m)
    return Candidates(rows[won], hashes[won])


def _nearest_weights(X, w, cand: Candidates):
    labels = squared_distances(X, cand.centers).argmin(axis=1)
    return np.bincount(labels, weights=w, minlength=cand.centers.shape[0])


def _ready(_) -> bool:
    return True


class BlockDraws:
    """Content-decided draws of rows over the row blocks of the persisted dask array ``Xd``.

    Creating one runs the one-off pass that hashes the rows and totals the weights of equal
    rows (kept on the workers as long as this object lives). A block whose rows only a worker
    that stopped answering holds (frozen; see :func:`daskabsp.answering.compute_answering`)
    is left out of the draws from then on: the initial centers come from the other blocks'
    rows.

    Parameters
    ----------
    Xd : dask array of shape (n_samples, n_features)
        Rows, one chunk per partition (dense or CSR blocks), feature axis in one chunk.
    wd : dask array of shape (n_samples,) or None
        Row weights.
    seed : int
        Seed of every draw, below ``2**64``.
    """

    def __init__(self, Xd, wd, seed: int) -> None:
        self.client = distributed.get_client()
        self.blocks = list(Xd.to_delayed().ravel())
        self.weights = (list(wd.to_delayed().ravel()) if wd is not None
                        else [None] * len(self.blocks))
        self.seed = int(seed)
        self.alive = list(range(len(self.blocks)))  # blocks whose rows can be read
        self.rows: dict = {}
        # A retry runs with fresh keys on the workers answering by then: a reduction task
        # that waited on a silent worker is not waited for again.
        for attempt in range(len(self.blocks) + 1):
            rows = self._analysis(pure=attempt == 0)
            ok = compute_answering([dask.delayed(_ready)(r) for r in rows.values()],
                                   client=self.client, workers=answering_workers())
            if all(ok):
                self.rows = rows
                return
            self._drop_unreadable()
        raise RuntimeError("the rows could not be read: their workers stopped answering")

    def _analysis(self, *, pure: bool) -> dict:
        """Per block still read, its distinct rows (persisted); values whose rows span
        several blocks get their total weight from a tree reduction of the blocks' tables."""
        analyse = dask.delayed(_analyse, pure=pure)
        rows = [analyse(self.blocks[i], self.weights[i]) for i in self.alive]
        if len(rows) > 1:
            tables = [dask.delayed(WeightTable.of, pure=pure)(r) for r in rows]
            total = reduce_tree(tables, dask.delayed(merge_tables, pure=pure))
            shared = dask.delayed(shared_values, pure=pure)(total)
            rows = [dask.delayed(with_shared, pure=pure)(r, shared) for r in rows]
        return dict(zip(self.alive, self.client.persist(rows, workers=answering_workers()),
                        strict=True))

    def _drop_unreadable(self, candidates=None) -> None:
        """Leave out of the draws the blocks (of ``candidates``, default all still read)
        whose rows or weights only workers that stopped answering hold."""
        candidates = self.alive if candidates is None else candidates
        keys = {i: [d.key for d in (self.blocks[i], self.weights[i]) if d is not None]
                for i in candidates}
        stuck = stuck_keys([k for ks in keys.values() for k in ks], client=self.client)
        self.alive = [i for i in self.alive if not stuck & set(keys.get(i, ()))]
        if not self.alive:
            raise RuntimeError("the rows could not be read: their workers stopped answering")

    def _pass(self, func, per_block, cand: Candidates, *args) -> list:
        """``func(block, per_block[i], shared candidates, *args)`` over the blocks still
        read, in block order. A block whose rows only a silent worker holds is dropped from
        this pass and the next ones; one whose task waited on a silent worker for another
        reason (the shared candidates were there) is run again on the answering workers."""
        out: dict = {}
        for _ in range(len(self.blocks) + 1):
            todo = [i for i in self.alive if i not in out]
            if not todo:
                break
            shared = self._share(cand)
            f = dask.delayed(func, pure=False)
            got = compute_answering(
                [f(self.blocks[i], per_block[i], shared, *args) for i in todo],
                client=self.client, workers=answering_workers())
            out.update((i, g) for i, g in zip(todo, got, strict=True) if g is not None)
            missing = [i for i in todo if i not in out]
            if missing:
                self._drop_unreadable(missing)
        else:  # still waiting on silent workers after every retry: go on without them
            self.alive = [i for i in self.alive if i in out]
        return [out[i] for i in self.alive]

    def _share(self, cand: Candidates):
        """``cand`` scattered once for a pass whose every block task takes it: passed as an
        argument, each task of the graph would carry its own copy (megabytes for hundreds of
        clusters)."""
        return self.client.scatter(cand, hash=False, workers=answering_workers())

    def draw(self, cand: Candidates, stream: int, m: int) -> Candidates:
        """``m`` values not in ``cand`` (fewer if fewer are left), drawn with probabilities
        proportional to weight times squared distance to ``cand`` (to weight alone when
        ``cand`` is empty); returned in increasing order of arrival."""
        return merge_offers(self._pass(_top_rows, self.rows, cand, self.seed, stream, m), m)

    def nearest_weights(self, cand: Candidates) -> np.ndarray:
        """Total weight of the rows nearest to each candidate."""
        return np.sum(self._pass(_nearest_weights, self.weights, cand), axis=0)


def _join(a: Candidates, b: Candidates) -> Candidates:
    if a.centers.shape[0] == 0:
        return b
    return Candidates(np.vstack([a.centers, b.centers]), np.concatenate([a.hashes, b.hashes]))


def _by_hash(c: Candidates) -> Candidates:
    """``c`` in the order of its hashes: an order that depends on the values alone."""
    order = np.argsort(c.hashes, kind="stable")
    return Candidates(c.centers[order], c.hashes[order])


def _cycled(centers: np.ndarray, k: int) -> np.ndarray:
    """``k`` centers from fewer distinct ones, repeated in turn (the data has fewer than
    ``k`` distinct rows of positive weight)."""
    if centers.shape[0] == 0:  # lazy weights are not checked up front
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return centers[np.arange(k) % centers.shape[0]]


def _empty(n_features: int) -> Candidates:
    return Candidates(np.zeros((0, n_features)), np.zeros(0, dtype=np.uint64))


def kmeans_parallel(draws: BlockDraws, n_features: int, n_clusters: int, *,
                    oversampling_factor: float, rounds: int, n_local_init: int,
                    local_seed: int) -> np.ndarray:
    """Initial centers by k-means|| over the row blocks of ``draws``.

    Parameters
    ----------
    draws : BlockDraws
        The rows.
    n_features : int
    n_clusters : int
    oversampling_factor : float
        Candidates drawn per round, per cluster.
    rounds : int
        Sampling rounds after the first center; more are run while there are fewer
        candidates than clusters and rows left to draw.
    n_local_init : int
        k-means++ restarts of the local clustering of the candidates (the best is kept).
    local_seed : int
        Seed of the local clustering.

    Returns
    -------
    ndarray of shape (n_clusters, n_features)
    """
    k = n_clusters
    cand = draws.draw(_empty(n_features), _PARALLEL, 1)
    ell = max(1, int(np.ceil(oversampling_factor * k)))
    r = 0
    while r < rounds or cand.centers.shape[0] < k:
        r += 1
        new = draws.draw(cand, _PARALLEL + r, ell)
        if new.centers.shape[0] == 0:
            break  # every distinct row of positive weight is a candidate already
        cand = _join(cand, new)
    cand = _by_hash(cand)
    if cand.centers.shape[0] <= k:
        return _cycled(cand.centers, k)
    counts = draws.nearest_weights(cand)
    local = _LocalKMeans(n_clusters=k, init="k-means++", n_init=n_local_init,
                         random_state=local_seed).fit(cand.centers, sample_weight=counts)
    return local.cluster_centers_


def random_rows(draws: BlockDraws, n_features: int, n_clusters: int, draw: int) -> np.ndarray:
    """``n_clusters`` distinct rows drawn with probabilities proportional to their weights,
    without replacement (the ``draw``-th independent draw); repeated in turn if the data has
    fewer distinct rows of positive weight.

    Returns
    -------
    ndarray of shape (n_clusters, n_features)
    """
    cand = draws.draw(_empty(n_features), _RANDOM + draw, n_clusters)
    return _cycled(cand.centers, n_clusters)
