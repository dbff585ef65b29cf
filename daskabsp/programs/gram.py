"""Models whose statistics do not depend on the parameters: one pass of moments, then a solve.

Least squares (ordinary, ridge, lasso, elastic net) and principal components need, of the
data, only their moments: the weighted sum of the rows, of their outer products and (with a
target) of the target, its square and its products with the rows. These are additive over
rows and taken at no parameters, so the pieces of one pass add up exactly whichever round
they came from, and once every row has been counted once the driver solves the problem
exactly (:meth:`MomentsProgram.solve`): the fit is one pass, under every sync model.

* BSP, A-BSP: the rounds are full rounds (:meth:`MomentsProgram.full_round`): stopping a
  pass early saves nothing when the pass is the whole fit; the default A-BSP still lends
  the straggler helpers, which scan the rows it leaves from copies. Should a round count
  fewer rows (a lost worker), the pass is completed from the next rounds' pieces
  (:class:`~daskabsp.programs.cycles.CycleLedger`).
* SSP, ASP: each partition's first scan is its piece of the pass; the fit ends once every
  partition has reported.

The moments are taken of ``X - shift``, ``shift`` a rough centre of the rows given with the
program (e.g. the mean of the first rows): centring afterwards (``G / W - m m^T``) loses
about ``(|centre| / spread)^2`` digits when the rows are far from the origin, and a rough
centre removes most of that. Sparse rows are never shifted (it would make them dense).

Rows: ``p`` features give ``p^2`` floats of statistics per task (8 MiB for 1 024 features):
the programs are for narrow data; wide or sparse data go to the iterative programs
(:mod:`.proximal`, :mod:`.subspace`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .aggregate import Piece, put_piece, rows_of, total
from .base import PartitionStats, Program
from .cycles import CycleLedger, RoundStats
from .l1 import l1_quadratic
from .trust_region import one_blas_thread

__all__ = ["GRAM_LIMIT", "CovarianceMoments", "LeastSquaresMoments", "LeastSquaresSolution",
           "Moments", "MomentsProgram", "MomentsState", "PCASolution", "dual_gap"]

#: Largest number of features of the moment programs by default: the Gram matrix of 1 024
#: features is 8 MiB per task, and its pass costs ``n * p^2 / 2`` multiply-adds, about the
#: 20-50 gradient passes an iterative fit of a quadratic needs at this width (scikit-learn's
#: PCA makes the same cut for its ``covariance_eigh`` solver: 1 000 features).
GRAM_LIMIT = 1024


@dataclass(frozen=True)
class MomentsState:
    """Driver state of a :class:`MomentsProgram`.

    Attributes
    ----------
    n_rows : int
        Rows of the data.
    n_features : int
        Features of the data.
    round : int
        Rounds (or updates) so far.
    ledger : CycleLedger
        The pieces of the pass so far (rounds that counted fewer than every row).
    solution : object
        What :meth:`MomentsProgram.solve` returned, once the pass is complete; else None.
    pieces : tuple of Piece
        SSP, ASP: each partition's piece of the pass.
    """

    n_rows: int
    n_features: int
    round: int = 0
    ledger: CycleLedger = field(default_factory=CycleLedger)
    solution: Any = None
    pieces: tuple[Piece, ...] = ()


@dataclass
class Moments:
    """The centred moments of one complete pass (the data's sufficient statistics).

    Attributes
    ----------
    weight : float
        Sum of the row weights.
    rows : int
        Rows counted.
    mean : ndarray of shape (n_features,)
        Weighted mean of the rows.
    cov : ndarray of shape (n_features, n_features)
        Weighted covariance of the rows (divided by ``weight``).
    mean_y, var_y : float
        Weighted mean and variance of the target (0 without one).
    cov_xy : ndarray of shape (n_features,)
        Weighted covariance of the rows with the target (zeros without one).
    raw : bool
        Whether the moments are uncentred (``fit_intercept=False``): ``cov`` is then the
        weighted mean of ``x x^T``, ``cov_xy`` of ``x y`` and ``var_y`` of ``y^2``.
    """

    weight: float
    rows: int
    mean: np.ndarray
    cov: np.ndarray
    mean_y: float
    var_y: float
    cov_xy: np.ndarray
    raw: bool


@dataclass
class MomentsProgram(Program):
    """Base of the one-pass programs (see the module docstring): the statistics of every
    row, then :meth:`solve` on the driver.

    Statistics (additive): rows, weight sum, then the weighted sums of the shifted rows
    ``x - shift``, (with a target) of ``y``, ``y^2`` and ``(x - shift) y``, then the weighted
    sum of ``(x - shift)(x - shift)^T`` (its lower triangle is the one read).

    Parameters
    ----------
    shift : ndarray of shape (n_features,) or None, default=None
        A rough centre of the rows, subtracted from dense rows before their products are
        taken (None: no shift; sparse rows are never shifted).
    centred : bool, default=True
        Whether the solve uses centred moments (False: the raw moments about zero, for a
        model without an intercept; ``shift`` must then be None).

    Examples
    --------
    >>> from daskabsp.programs import CovarianceMoments, LeastSquaresMoments, MomentsProgram
    >>> issubclass(LeastSquaresMoments, MomentsProgram)
    True
    >>> issubclass(CovarianceMoments, MomentsProgram)
    True
    """

    name: ClassVar[str] = "moments"
    needs_y: ClassVar[bool] = False
    accepts_sample_weight: ClassVar[bool] = True
    split_at_wrap: ClassVar[bool] = True
    #: A chunk's fixed cost (a dozen numpy calls, a d x d product added to the sum) small
    #: against its BLAS work: ~2 000 rows at 1 000 features.
    min_chunk_seconds: ClassVar[float] = 0.050

    shift: np.ndarray | None = field(default=None, repr=False)
    centred: bool = True

    def __post_init__(self) -> None:
        if self.shift is not None and not self.centred:
            raise ValueError("A shift needs centred moments (centred=True).")

    # -- layout -----------------------------------------------------------------------------

    def _dims(self, d: int) -> tuple[int, int, int]:
        """Offsets of the row sums, the target block and the Gram matrix."""
        o_x = 2
        o_y = o_x + d
        o_g = o_y + (d + 2 if self.needs_y else 0)
        return o_x, o_y, o_g

    def new_stats(self, params) -> np.ndarray:
        d = int(params)
        return np.zeros(self._dims(d)[2] + d * d)

    def init(self, n_features: int, n_rows: int) -> MomentsState:
        if self.shift is not None and self.shift.shape != (n_features,):
            raise ValueError(f"shift has shape {self.shift.shape}; the rows have "
                             f"{n_features} features.")
        return MomentsState(n_rows=n_rows, n_features=n_features)

    def params(self, state: MomentsState) -> int:
        """The number of features: the statistics need no parameters."""
        return state.n_features

    def params_array(self, params) -> np.ndarray:
        return np.zeros(0)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        d = X.shape[1]
        o_x, o_y, o_g = self._dims(d)
        n = X.shape[0]
        acc[0] += n
        sparse = sp.issparse(X)
        if self.shift is not None and not sparse:
            X = X - self.shift
        if sample_weight is None:
            acc[1] += n
            acc[o_x:o_y] += np.asarray(X.sum(axis=0)).ravel()
            Xw = X
        else:
            acc[1] += sample_weight.sum()
            acc[o_x:o_y] += np.asarray(X.T @ sample_weight).ravel()
            root = np.sqrt(sample_weight)
            Xw = (sp.diags(root) @ X) if sparse else X * root[:, None]
        G = acc[o_g:].reshape(d, d)
        if sparse:
            G += (Xw.T @ Xw).toarray()
        else:
            # numpy computes X^T X of one buffer with BLAS's syrk, and without the GIL:
            # scipy.linalg.blas.dsyrk in place holds it, so that in-process workers (the
            # embedded cluster's) summed their Gram matrices one at a time (measured:
            # 100 000 x 1 000 rows on each of 2 threads, 2.45 s each against 1.28 s).
            G += Xw.T @ Xw
        if self.needs_y:
            wy = y if sample_weight is None else sample_weight * y
            acc[o_y] += wy.sum()
            acc[o_y + 1] += wy @ y
            acc[o_y + 2:o_g] += np.asarray(X.T @ wy).ravel()

    def moments(self, stats: np.ndarray, d: int) -> Moments:
        """The moments of the rows counted in ``stats`` over ``d`` features (centred unless
        ``centred=False``)."""
        o_x, o_y, o_g = self._dims(d)
        W = float(stats[1])
        G = stats[o_g:].reshape(d, d)
        G = np.tril(G) + np.tril(G, -1).T
        m = stats[o_x:o_y] / W
        if self.needs_y:
            my, myy, mxy = stats[o_y] / W, stats[o_y + 1] / W, stats[o_y + 2:o_g] / W
        else:
            my, myy, mxy = 0.0, 0.0, np.zeros(d)
        shift = self.shift if self.shift is not None else np.zeros(d)
        if not self.centred:
            return Moments(W, int(stats[0]), m, G / W, my, myy, mxy, raw=True)
        cov = G / W - np.outer(m, m)
        return Moments(W, int(stats[0]), m + shift, cov, my, myy - my * my, mxy - m * my,
                       raw=False)

    # -- the pass ---------------------------------------------------------------------------

    def full_round(self, state: MomentsState) -> bool:
        """Always: the pass is the fit, and a pass stopped early saves nothing."""
        return True

    def combine_round(self, parts: list[PartitionStats], params) -> RoundStats:
        return RoundStats.of(parts, self.new_stats(params))

    def _pass(self, state: MomentsState, stats: RoundStats):
        """The ledger after the round, and the statistics of a complete pass (or None)."""
        if (stats.parts and sum(p.rows for p in stats.parts) == state.n_rows
                and all(p.rows == p.size for p in stats.parts)):
            return state.ledger, stats.total
        ledger = state.ledger.add(stats.parts, lambda s: s, state.round)
        complete = ledger.complete(state.n_rows)
        return ledger, None if complete is None else complete[0]

    def update(self, state: MomentsState, stats: RoundStats, n_rows: int) -> MomentsState:
        if state.solution is not None:
            return replace(state, round=state.round + 1)
        ledger, whole = self._pass(state, stats)
        solution = None if whole is None else self.solve(self.moments(whole, state.n_features))
        return replace(state, round=state.round + 1, ledger=ledger, solution=solution)

    def objective(self, state: MomentsState, stats: RoundStats, n_rows: int) -> float:
        return self.solution_objective(state.solution)

    def converged(self, state: MomentsState) -> bool:
        return state.solution is not None

    def partition_update(self, state: MomentsState, piece: PartitionStats, params,
                         staleness: int) -> MomentsState:
        """SSP/ASP: the partition's scan is its piece of the pass; solved once every
        partition has reported (later reports change nothing)."""
        if state.solution is not None:
            return replace(state, round=state.round + 1)
        pieces = put_piece(state.pieces, Piece(piece.partition, piece.rows, piece.stats, None))
        solution = None
        if rows_of(pieces) >= state.n_rows:
            solution = self.solve(self.moments(total(pieces), state.n_features))
        return replace(state, round=state.round + 1, pieces=pieces, solution=solution)

    def partition_objective(self, state: MomentsState, piece: PartitionStats,
                            params) -> float:
        return self.solution_objective(state.solution)

    # -- what subclasses define -------------------------------------------------------------

    def solve(self, moments: Moments) -> Any:
        """The solution from the moments of every row."""
        raise NotImplementedError

    def solution_objective(self, solution) -> float:
        """The objective of a solution (NaN before the pass is complete)."""
        return math.nan


@dataclass(frozen=True)
class LeastSquaresSolution:
    """A least-squares fit from the moments.

    Attributes
    ----------
    coef : ndarray of shape (n_features,)
    intercept : float
    objective : float
        The objective at the solution (mean scale, see :class:`LeastSquaresMoments`).
    eigenvalues : ndarray or None
        Eigenvalues of the (centred) covariance of the rows, ascending; for the rank and
        singular values of ordinary least squares.
    moments : Moments
        The moments it was solved from.
    """

    coef: np.ndarray
    intercept: float
    objective: float
    eigenvalues: np.ndarray | None
    moments: Moments = field(repr=False)


@dataclass
class LeastSquaresMoments(MomentsProgram):
    """Least squares with elastic-net penalties, solved exactly from one pass of moments.

    Minimises (mean scale, ``s_i`` the row weights)::

        sum_i s_i (y_i - x_i.w - b)^2 / (2 sum_i s_i) + l1 ||w||_1 + l2 / 2 ||w||^2

    (scikit-learn's ``ElasticNet`` with ``l1 = alpha * l1_ratio``, ``l2 = alpha * (1 -
    l1_ratio)``; ``Lasso`` with ``l2 = 0``; ``LinearRegression`` with both 0: the
    minimum-norm solution when the rows are rank-deficient). The intercept is not penalised.

    Parameters
    ----------
    l1, l2 : float, default=0.0
        Penalties on the coefficients (mean scale).
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    start : ndarray of shape (n_features,) or None, default=None
        Coefficients to start the L1 solve from (a warm start; the solve is exact either way).
    rcond : float or None, default=None
        Without penalties: eigenvalues of the covariance below ``rcond`` times the largest
        are taken as zero (None: ``n_features`` times the machine precision, 10x).
    shift, centred
        See :class:`MomentsProgram`; ``centred=False`` fits no intercept.

    Examples
    --------
    One pass over the rows gives the exact least-squares solution (coefficients, then the
    intercept):

    >>> import numpy as np, daskabsp
    >>> from daskabsp.programs import LeastSquaresMoments
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1_000, 3))
    >>> res = daskabsp.fit(LeastSquaresMoments(), X, X @ [1.0, -2.0, 0.5] + 3.0)
    >>> res.n_iter, np.round(res.coef, 6).tolist()
    (1, [1.0, -2.0, 0.5, 3.0])
    """

    name: ClassVar[str] = "lsq"
    needs_y: ClassVar[bool] = True

    l1: float = 0.0
    l2: float = 0.0
    positive: bool = False
    start: np.ndarray | None = field(default=None, repr=False)
    rcond: float | None = None

    @one_blas_thread
    def solve(self, mo: Moments) -> LeastSquaresSolution:
        C, c = mo.cov, mo.cov_xy
        d = C.shape[0]
        eig = None
        if self.l1 > 0 or self.positive:
            A = C + self.l2 * np.eye(d) if self.l2 else C
            w = l1_quadratic(A, c, self.l1, self.start, positive=self.positive)
        elif self.l2 > 0:
            w = scipy.linalg.solve(C + self.l2 * np.eye(d), c, assume_a="pos",
                                   check_finite=False)
        else:
            eig, V = np.linalg.eigh(C)
            rcond = self.rcond if self.rcond is not None else 10 * d * np.finfo(float).eps
            keep = eig > rcond * max(eig[-1], 0.0)
            w = V[:, keep] @ ((V[:, keep].T @ c) / eig[keep])
        b = mo.mean_y - mo.mean @ w if not mo.raw else 0.0
        half = 0.5 * (mo.var_y + w @ (C @ w)) - c @ w
        obj = half + self.l1 * np.abs(w).sum() + 0.5 * self.l2 * (w @ w)
        return LeastSquaresSolution(w, float(b), float(obj), eig, mo)

    def solution_objective(self, solution) -> float:
        return math.nan if solution is None else solution.objective

    def coefficients(self, state: MomentsState) -> np.ndarray:
        """``[coef..., intercept]`` (zeros before the pass is complete)."""
        s = state.solution
        if s is None:
            return np.zeros(state.n_features + 1)
        return np.append(s.coef, s.intercept)

    def full_objective(self, coef: np.ndarray, intercept: float, X, y,
                       sample_weight=None) -> float:
        """The exact objective (mean scale) at ``coef``, ``intercept`` over in-memory data."""
        r = y - np.asarray(X @ coef).ravel() - intercept
        s = np.ones(len(y)) if sample_weight is None else sample_weight
        return float(0.5 * (s @ (r * r)) / s.sum() + self.l1 * np.abs(coef).sum()
                     + 0.5 * self.l2 * coef @ coef)


def dual_gap(solution: LeastSquaresSolution, l1: float, l2: float,
             positive: bool = False) -> float:
    """The duality gap of an elastic-net solution, computed from its moments as
    scikit-learn's coordinate descent computes it (its formulation A: the dual point is the
    residual scaled into the dual feasible set), on the mean scale (scikit-learn's
    ``dual_gap_``: its gap divided by the number of samples)."""
    mo, w = solution.moments, solution.coef
    if l1 <= 0:
        return 0.0
    C, c = mo.cov, mo.cov_xy
    Cw = C @ w
    rr = mo.var_y - 2.0 * c @ w + w @ Cw  # |y - Xw - b|^2 / W
    ry = mo.var_y - c @ w  # (y - Xw - b) . (y - mean_y) / W
    xta = c - Cw - l2 * w
    dual_norm = float(np.max(xta, initial=0.0) if positive else np.max(np.abs(xta),
                                                                        initial=0.0))
    w2 = float(w @ w)
    primal = 0.5 * (rr + l2 * w2) + l1 * np.abs(w).sum()
    scale = l1 / dual_norm if dual_norm > l1 else 1.0
    dual = -0.5 * scale ** 2 * (rr + l2 * w2) + scale * ry
    return float(primal - dual)


@dataclass(frozen=True)
class PCASolution:
    """The eigen-decomposition of the rows' covariance.

    Attributes
    ----------
    mean : ndarray of shape (n_features,)
    eigenvalues : ndarray of shape (n_features,)
        Of the covariance with divisor ``n - 1``, descending, clipped at 0.
    eigenvectors : ndarray of shape (n_features, n_features)
        Columns in the order of ``eigenvalues``.
    total_variance : float
        Sum of the features' variances (divisor ``n - 1``).
    n_samples : int
    """

    mean: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    total_variance: float
    n_samples: int


@dataclass
class CovarianceMoments(MomentsProgram):
    """Principal components from one pass: the eigen-decomposition of the rows' covariance
    (scikit-learn's ``PCA(svd_solver="covariance_eigh")``).

    Parameters
    ----------
    shift, centred
        See :class:`MomentsProgram`.

    Examples
    --------
    The components (rows of ``coef``) of rows stretched along the first axis:

    >>> import numpy as np, daskabsp
    >>> from daskabsp.programs import CovarianceMoments
    >>> X = np.random.default_rng(0).standard_normal((1_000, 3)) * [3.0, 1.0, 0.1]
    >>> res = daskabsp.fit(CovarianceMoments(), X)
    >>> np.abs(res.coef).argmax(axis=1).tolist(), res.n_iter
    ([0, 1, 2], 1)
    """

    name: ClassVar[str] = "pca"

    @one_blas_thread
    def solve(self, mo: Moments) -> PCASolution:
        n = mo.rows
        cov = mo.cov * (mo.weight / max(mo.weight - 1.0, 1.0))  # divisor n - 1
        eig, V = np.linalg.eigh(cov)
        order = slice(None, None, -1)
        eig = np.maximum(eig[order], 0.0)
        return PCASolution(mo.mean, eig, V[:, order], float(np.trace(cov)), n)

    def solution_objective(self, solution) -> float:
        return math.nan if solution is None else float(solution.eigenvalues[0])

    def coefficients(self, state: MomentsState) -> np.ndarray:
        s = state.solution
        d = state.n_features
        return np.zeros((d, d)) if s is None else s.eigenvectors.T

