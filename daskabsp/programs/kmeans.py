"""Lloyd's k-means: per-cluster sums and counts of the rows each partition assigns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from .aggregate import Piece, put_piece, rows_of, total
from .base import PartitionStats, Program
from .cycles import CycleLedger, RoundStats

#: Statistics header: rows, weight sum, inertia sum.
_HEAD = 3


def squared_distances(X, centers: np.ndarray, center_norms: np.ndarray | None = None):
    """Squared Euclidean distances of the rows of a dense or CSR ``X`` to ``centers``.

    Parameters
    ----------
    X : ndarray or scipy.sparse.csr_matrix of shape (n_rows, n_features)
        The rows.
    centers : ndarray of shape (n_centers, n_features)
        The centers.
    center_norms : ndarray of shape (n_centers,), default=None
        The centers' squared norms, when the caller has them already.

    Returns
    -------
    ndarray of shape (n_rows, n_centers)
        Squared distances (rounding below zero clipped to zero).
    """
    if center_norms is None:
        center_norms = np.einsum("ij,ij->i", centers, centers)
    if sp.issparse(X):
        x2 = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    else:
        x2 = np.einsum("ij,ij->i", X, X)
    D = np.asarray(X @ centers.T)
    D *= -2.0
    D += x2[:, None]
    D += center_norms[None, :]
    np.maximum(D, 0.0, out=D)
    return D


@dataclass(frozen=True)
class KMeansState:
    """Driver state of :class:`LloydKMeans`."""

    centers: np.ndarray
    n_rows: int
    round: int = 0
    ledger: CycleLedger = field(default_factory=CycleLedger)
    anchors: tuple[tuple[int, np.ndarray], ...] = ()
    converged: bool = False
    #: Center shift (squared Frobenius) of the last update.
    shift: float = np.inf
    #: Which statistics the last update used ("pass" or "round").
    model: str = "round"


@dataclass(frozen=True)
class AggregateKMeansState(KMeansState):
    """Driver state of :class:`LloydKMeans` under SSP or ASP: every partition's latest
    per-cluster sums and counts, and the centers they were assigned with."""

    pieces: tuple[Piece, ...] = ()


@dataclass
class LloydKMeans(Program):
    """Lloyd iterations from given initial centers.

    A partition assigns each row it processes to its nearest center and returns, per
    cluster, the (weighted) sum of the rows and their count, plus the inertia. The new
    centers are the means. Under A-BSP the means of one round are over a sample biased towards
    fast partitions; once every partition has completed a pass
    (:class:`~daskabsp.programs.cycles.CycleLedger`) and the centers of that pass's rounds are
    all within ``10 * tol`` (squared shift) of the current ones, the means are taken over
    the pass: every row exactly once. A cluster that receives no row keeps its center.

    Stops when the centers of an update from the pass statistics move by at most ``tol``
    (squared Frobenius norm, as scikit-learn's ``tol`` after scaling by the data variance).

    Parameters
    ----------
    initial_centers : ndarray of shape (n_clusters, n_features)
        Initial centers.
    tol : float, default=1e-4
        Absolute tolerance on the squared center shift.

    Examples
    --------
    >>> import daskabsp
    >>> import numpy as np
    >>> from daskabsp.programs import LloydKMeans
    >>> from sklearn.datasets import make_blobs
    >>> X, _ = make_blobs(n_samples=3_000, centers=[[0, 0], [5, 5]], random_state=0)
    >>> res = daskabsp.fit(LloydKMeans(initial_centers=X[[0, 1]]), X, sync="bsp")
    >>> res.converged
    True
    >>> np.round(np.sort(res.coef, axis=0)) + 0.0     # the two centers
    array([[0., 0.],
           [5., 5.]])
    """

    name: ClassVar[str] = "kmeans"
    needs_y: ClassVar[bool] = False
    accepts_sample_weight: ClassVar[bool] = True
    split_at_wrap: ClassVar[bool] = True
    #: A chunk's fixed cost (tens of numpy calls) stays small against 10 ms of work, as for
    #: the Newton programs (:attr:`NewtonProgram.min_chunk_seconds`).
    min_chunk_seconds: ClassVar[float] = 0.010

    initial_centers: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))
    tol: float = 1e-4

    def check_input(self, X, y) -> None:
        d = self.initial_centers.shape[1]
        if X.shape[1] != d:
            raise ValueError(f"The initial centers have {d} features, X has {X.shape[1]}.")

    def init(self, n_features: int, n_rows: int) -> KMeansState:
        return KMeansState(centers=np.array(self.initial_centers, dtype=np.float64),
                           n_rows=n_rows)

    def params(self, state: KMeansState) -> np.ndarray:
        return state.centers

    def new_stats(self, params: np.ndarray) -> np.ndarray:
        k, d = params.shape
        return np.zeros(_HEAD + k + k * d)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        k = params.shape[0]
        D = squared_distances(X, params)
        labels = D.argmin(axis=1)
        n = X.shape[0]
        mind = D[np.arange(n), labels]
        s = np.ones(n) if sample_weight is None else sample_weight
        acc[0] += n
        acc[1] += s.sum()
        acc[2] += mind @ s
        acc[_HEAD:_HEAD + k] += np.bincount(labels, weights=s, minlength=k)
        onehot = sp.csr_matrix((s, (labels, np.arange(n))), shape=(k, n))
        sums = onehot @ X
        acc[_HEAD + k:] += (sums.toarray() if sp.issparse(sums) else np.asarray(sums)).ravel()

    def combine_round(self, parts: list[PartitionStats], params) -> RoundStats:
        return RoundStats.of(parts, self.new_stats(params))

    def objective(self, state: KMeansState, stats: RoundStats, n_rows: int) -> float:
        t = stats.total
        return float(t[2] / t[1]) if t[1] > 0 else float("nan")

    def _means(self, stats: np.ndarray, centers: np.ndarray) -> np.ndarray:
        k, d = centers.shape
        counts = stats[_HEAD:_HEAD + k]
        sums = stats[_HEAD + k:].reshape(k, d)
        out = centers.copy()
        full = counts > 0
        out[full] = sums[full] / counts[full, None]
        return out

    def update(self, state: KMeansState, stats: RoundStats, n_rows: int) -> KMeansState:
        if stats.rows == 0:
            return replace(state, round=state.round + 1)
        c = state.centers
        ledger = state.ledger.add(stats.parts, lambda s: s, state.round)
        anchors = (*state.anchors, (state.round, c))
        complete = ledger.complete(state.n_rows)
        model, new = "round", self._means(stats.total, c)
        close = False
        if complete is not None:
            total, oldest = complete
            past = dict(anchors)
            moves = [float(((c - past[r]) ** 2).sum()) if r in past else np.inf
                     for r in range(oldest, state.round + 1)]
            close = max(moves) <= 10.0 * self.tol
            if close or stats.rows >= state.n_rows:
                model, new = "pass", self._means(total, c)
        shift = float(((new - c) ** 2).sum())
        keep_from = min((min(t.done_since, t.open_since) for _p, t in ledger.tracks),
                        default=state.round)
        anchors = tuple((r, a) for r, a in anchors if r >= keep_from)[-64:]
        converged = model == "pass" and shift <= self.tol
        return replace(state, centers=new, round=state.round + 1, ledger=ledger,
                       anchors=anchors, converged=converged, shift=shift, model=model)

    def converged(self, state: KMeansState) -> bool:
        return state.converged

    def coefficients(self, state: KMeansState) -> np.ndarray:
        return state.centers

    def partition_update(self, state: KMeansState, piece: PartitionStats, params: np.ndarray,
                         staleness: int) -> AggregateKMeansState:
        """SSP/ASP: the means of every partition's latest per-cluster sums and counts (see
        :mod:`~daskabsp.programs.aggregate`), each partition's rows assigned at the centers
        its task started from; a cluster no row is assigned to keeps its center.

        Converged once every partition has reported and the new centers are within ``tol``
        (squared shift) of the centers every partition last assigned its rows with: under
        ``SSP(0)`` each sweep is a Lloyd round under BSP, and this is its stopping rule.
        """
        pieces = put_piece(getattr(state, "pieces", ()),
                           Piece(piece.partition, piece.rows, piece.stats, np.asarray(params)))
        c = state.centers
        new = self._means(total(pieces), c)
        complete = rows_of(pieces) >= state.n_rows
        moved = max(float(((new - q.params) ** 2).sum()) for q in pieces)
        return AggregateKMeansState(
            centers=new, n_rows=state.n_rows, round=state.round + 1,
            converged=complete and moved <= self.tol, shift=float(((new - c) ** 2).sum()),
            model="pass" if complete else "round", pieces=pieces)

    def partition_objective(self, state: AggregateKMeansState, piece: PartitionStats,
                            params) -> float:
        """The mean inertia of the partitions' latest assignments (each at its own
        centers)."""
        t = total(state.pieces)
        return float(t[2] / t[1]) if t[1] > 0 else float("nan")
