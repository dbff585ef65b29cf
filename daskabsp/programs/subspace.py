"""Principal components of wide or sparse rows by subspace iteration over the partitions.

Where the covariance matrix is too large to form (:mod:`.gram` takes ``p^2`` floats), its
leading eigenvectors are found by subspace (block power) iteration with a Rayleigh-Ritz step
(Saad, *Numerical Methods for Large Eigenvalue Problems*, 2011, ch. 5): each round, every
partition computes, at the round's orthonormal basis ``Q`` (``p x k``), the product of its
rows' second moments with ``Q``, ``sum_i x_i (x_i . Q)``, plus the sums of its rows and of
their squares. They are additive over rows; the driver centres them (``C Q``), takes the
Ritz pairs of ``Q^T C Q`` and the next basis ``orth(C Q U)``. Rows are never centred (sparse
rows stay sparse); dense rows are shifted by a rough centre first, as in :mod:`.gram`.

* BSP: every round is a power iteration on all rows.
* A-BSP: a partial round's product is that of a sample of the rows, which moves the basis
  towards the leading subspace about as well while it is far; once the Ritz residuals are
  within a hundredth of the eigenvalues, or stop halving from round to round (the sample's
  noise), the rounds are full rounds, so that the final Ritz pairs are those of every row.
* SSP, ASP: a product at an older basis does not add to one at the current basis, so the
  basis advances once every partition has reported at it (late reports of an older basis are
  dropped): one power iteration per sweep, as BSP's rounds, the fast partitions' extra
  clocks spent on the same basis.

Stopping: every wanted Ritz pair's residual ``|C v - theta v|`` at most ``tol`` times its Ritz
value, on a full round (or, with ``max_passes``, after that many power iterations, as
scikit-learn's randomized solver does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from .aggregate import Piece, put_piece, rows_of, total
from .base import PartitionStats, Program
from .cycles import RoundStats
from .linear import add_transposed_product
from .trust_region import one_blas_thread

#: Ritz residuals (relative to their values) below which the rounds become full rounds.
FULL_BELOW = 1e-2
#: A partial round whose largest residual is above this share of the last round's has
#: stalled at its sample's noise: the rounds become full rounds.
STALLED = 0.5


@dataclass(frozen=True)
class SubspaceState:
    """Driver state of :class:`SubspacePCA`.

    Attributes
    ----------
    basis : ndarray of shape (n_features, k)
        The orthonormal basis of the round.
    n_rows : int
        Rows of the data.
    """

    basis: np.ndarray
    n_rows: int
    round: int = 0
    passes: int = 0
    full: bool = False
    #: The largest relative Ritz residual of the wanted components, last round.
    worst: float = math.inf
    converged: bool = False
    #: Ritz values (descending, divisor n - 1), vectors (columns) and relative residuals of
    #: the last full product; the mean and total variance of the rows it covered.
    values: np.ndarray | None = None
    vectors: np.ndarray | None = None
    residuals: np.ndarray | None = None
    mean: np.ndarray | None = None
    total_variance: float = math.nan
    #: SSP/ASP: the basis version and each partition's product at it.
    version: int = 0
    pieces: tuple[Piece, ...] = ()


@dataclass
class SubspacePCA(Program):
    """The leading principal components by subspace iteration (see the module docstring).

    Parameters
    ----------
    n_components : int, default=1
        Components wanted.
    n_oversamples : int, default=10
        Extra basis vectors (the basis has ``n_components + n_oversamples`` columns, at most
        ``n_features``): the convergence of component ``i`` goes as ``(lambda_{k+1} /
        lambda_i)^rounds``.
    tol : float, default=1e-8
        Ritz residuals (relative) at which the fit stops.
    max_passes : int or None, default=None
        Stop after this many full power iterations whatever the residuals (scikit-learn's
        ``iterated_power`` of its randomized solver; None: until ``tol``).
    seed : int, default=0
        Seed of the random starting basis.
    shift : ndarray of shape (n_features,) or None, default=None
        A rough centre subtracted from dense rows (see :mod:`~daskabsp.programs.gram`).

    Examples
    --------
    >>> from daskabsp.programs import SubspacePCA
    >>> SubspacePCA(n_components=5).name
    'subspace-pca'
    """

    name: ClassVar[str] = "subspace-pca"
    needs_y: ClassVar[bool] = False
    split_at_wrap: ClassVar[bool] = False
    min_chunk_seconds: ClassVar[float] = 0.010

    n_components: int = 1
    n_oversamples: int = 10
    tol: float = 1e-8
    max_passes: int | None = None
    seed: int = 0
    shift: np.ndarray | None = field(default=None, repr=False)

    # -- layout -----------------------------------------------------------------------------

    @staticmethod
    def _views(acc: np.ndarray, d: int, k: int):
        """Views ``(rows, sums, squares, product)`` of the statistics."""
        return acc[0:2], acc[2:2 + d], acc[2 + d:2 + 2 * d], acc[2 + 2 * d:].reshape(d, k)

    def init(self, n_features: int, n_rows: int) -> SubspaceState:
        k = min(self.n_components + self.n_oversamples, n_features)
        rng = np.random.default_rng(self.seed)
        Q, _ = np.linalg.qr(rng.standard_normal((n_features, k)))
        return SubspaceState(basis=Q, n_rows=n_rows)

    def params(self, state: SubspaceState):
        return state.basis, state.version

    def params_array(self, params) -> np.ndarray:
        return np.asarray(params[0])

    def prepare(self, params):
        Q, version = params
        return np.ascontiguousarray(Q), version

    def new_stats(self, params) -> np.ndarray:
        d, k = params[0].shape
        return np.zeros(2 + 2 * d + d * k)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        Q = params[0]
        d, k = Q.shape
        head, sums, squares, prod = self._views(acc, d, k)
        head[0] += X.shape[0]
        head[1] += X.shape[0]
        if sp.issparse(X):
            P = np.asarray(X @ Q)
            add_transposed_product(prod, X, P)
            sums += np.bincount(X.indices, weights=X.data, minlength=d)
            squares += np.bincount(X.indices, weights=X.data * X.data, minlength=d)
            return
        if self.shift is not None:
            X = X - self.shift
        P = X @ Q
        prod += X.T @ P
        sums += X.sum(axis=0)
        squares += np.einsum("ij,ij->j", X, X)

    # -- the driver -------------------------------------------------------------------------

    def combine_round(self, parts: list[PartitionStats], params) -> RoundStats:
        return RoundStats.of(parts, self.new_stats(params))

    @one_blas_thread
    def _ritz(self, stats: np.ndarray, Q: np.ndarray):
        """Ritz values (divisor n - 1), vectors, relative residuals, the next basis, the
        mean and the total variance, from statistics taken at ``Q``."""
        d, k = Q.shape
        head, sums, squares, prod = self._views(stats, d, k)
        n = float(head[0])
        m = sums / n
        Y = (prod - np.outer(sums, m @ Q)) / max(n - 1.0, 1.0)  # C Q
        B = Q.T @ Y
        B = 0.5 * (B + B.T)
        theta, U = np.linalg.eigh(B)
        order = np.argsort(theta)[::-1]
        theta, U = theta[order], U[:, order]
        V = Q @ U
        YU = Y @ U
        R = YU - V * theta
        res = np.linalg.norm(R, axis=0) / np.maximum(np.abs(theta), 1e-300)
        basis, _ = np.linalg.qr(YU)
        total_var = float((squares - n * m * m).sum() / max(n - 1.0, 1.0))
        shift = self.shift if self.shift is not None else 0.0
        return np.maximum(theta, 0.0), V, res, basis, m + shift, total_var

    def objective(self, state: SubspaceState, stats: RoundStats, n_rows: int) -> float:
        """The variance the wanted components explain (Ritz values of the round)."""
        if stats.rows == 0:
            return math.nan
        theta = self._ritz(stats.total, state.basis)[0]
        return float(theta[:self.n_components].sum())

    def update(self, state: SubspaceState, stats: RoundStats, n_rows: int) -> SubspaceState:
        if stats.rows == 0:
            return replace(state, round=state.round + 1)
        theta, V, res, basis, mean, total_var = self._ritz(stats.total, state.basis)
        exact = stats.rows >= state.n_rows
        wanted = res[:self.n_components]
        passes = state.passes + int(exact)
        worst = float(wanted.max())
        # Partial rounds until the residuals are small, or stop shrinking (a sample's
        # operator differs from the data's by its sampling noise, a floor for them).
        full = state.full or worst <= FULL_BELOW or worst > STALLED * state.worst
        done = exact and (bool(np.all(wanted <= self.tol))
                          or (self.max_passes is not None and passes >= self.max_passes))
        out = replace(state, basis=basis, round=state.round + 1, passes=passes, full=full,
                      converged=done, worst=worst)
        if exact:
            out = replace(out, values=theta, vectors=V, residuals=res, mean=mean,
                          total_variance=total_var)
        return out

    def full_round(self, state: SubspaceState) -> bool:
        return state.full

    def converged(self, state: SubspaceState) -> bool:
        return state.converged

    def coefficients(self, state: SubspaceState) -> np.ndarray:
        """The components (rows) of the last full round; the basis before one."""
        if state.vectors is None:
            return state.basis[:, :self.n_components].T
        return state.vectors[:, :self.n_components].T

    def partition_update(self, state: SubspaceState, piece: PartitionStats, params,
                         staleness: int) -> SubspaceState:
        """SSP/ASP: the partition's product at the current basis is kept; once every
        partition has reported at it, a power iteration (see the module docstring)."""
        if params[1] != state.version or state.converged:
            return replace(state, round=state.round + 1)
        pieces = put_piece(state.pieces, Piece(piece.partition, piece.rows, piece.stats,
                                               state.version))
        if rows_of(pieces) < state.n_rows:
            return replace(state, round=state.round + 1, pieces=pieces)
        stats = RoundStats(total(pieces), [], rows_of(pieces))
        st = self.update(replace(state, full=True), stats, state.n_rows)
        return replace(st, version=state.version + 1, pieces=())

    def partition_objective(self, state: SubspaceState, piece: PartitionStats,
                            params) -> float:
        if state.values is None:
            return math.nan
        return float(state.values[:self.n_components].sum())

    def solution(self, state: SubspaceState) -> dict[str, Any]:
        """What a fit found: ``values`` (descending), ``vectors`` (columns), ``mean``,
        ``total_variance``, ``residuals`` of its last full round."""
        return {"values": state.values, "vectors": state.vectors, "mean": state.mean,
                "total_variance": state.total_variance, "residuals": state.residuals}
