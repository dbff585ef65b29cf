"""Trust-region Newton for models whose statistics are the loss, gradient and Hessian of rows.

The update rule shared by the linear-model programs (:mod:`.linear`, :mod:`.multinomial`).
A partition's statistics over the rows it processed are the loss sum, the gradient sum and the
Hessian sum at the round's parameters, all additive over rows, so a straggler's partial
statistics are exact for the rows it did see.

Each round the driver has two quadratic models of the objective around the current
parameters:

* the **round model**, from the round's own statistics (the loss, gradient and Hessian averaged
  over the rows the round processed; a sub-sampled Newton model under A-BSP). It is fresh, but
  under A-BSP it sees the rows of fast partitions more often than those of slow ones, so on its
  own it settles near, not at, the optimum.
* the **pass model**, from :class:`~.cycles.CycleLedger`: the sum over partitions of their last
  complete pass, each piece a Taylor model around the parameters it was computed at. It covers
  every row exactly once; its pieces can be a few rounds old.

The step uses the pass model once every partition has completed a pass and the parameters its
pieces were computed at lie within the trust radius of the current parameters (then their
Taylor models are trusted as much as the current one), and the round model otherwise. Under BSP
both are the same fresh full-data model, and the rule is plain trust-region Newton.

Stopping follows scikit-learn's Newton solver, a little tighter: ``max |gradient| <= tol``
and ``Newton decrement^2 / 2 <= tol / 100``, evaluated on the pass model, and (for
non-quadratic losses) the pass's pieces were computed within ``sqrt(20 tol)`` of the current
parameters. The point that passed the test is the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from .base import PartitionStats, Program
from .curvature import Curvature
from .cycles import RoundStats
from .incremental import partition_update
from .newton_rounds import analyse, round_update
from .newton_state import (
    BLOCK_HEAD,
    HEAD,
    MAX_HESSIAN,
    ROWS_PER_PARAMETER,
    NewtonState,
    TaskParams,
    choose_stride,
    hessian_limit,
)

__all__ = ["NewtonProgram", "NewtonState", "TaskParams", "choose_stride", "hessian_limit"]


@dataclass
class NewtonProgram(Program):
    """Base of the trust-region Newton programs (see the module docstring).

    Parameters
    ----------
    l2 : float, default=1.0
        L2 penalty on the coefficients, on the weighted-mean scale of the loss: the objective
        is ``sum_i s_i loss_i / sum_i s_i + l2 / 2 ||w||^2 (+ l2_intercept / 2 b^2)``.
        scikit-learn's ``C`` gives ``l2 = 1 / (C * sum_i s_i)``.
    l2_intercept : float, default=0.0
        L2 penalty on the intercept (LIBLINEAR penalises it; logistic regression does not).
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    tol : float, default=1e-4
        Stopping tolerance (see the module docstring).
    max_hessian : int, default=1024
        Largest number of parameters per block for which the full Hessian is computed; above
        it the partitions compute the Hessian's diagonal and one Hessian-vector product, and
        the driver takes L-BFGS steps (see :mod:`~daskabsp.programs.curvature`).
        :func:`hessian_limit` gives the limit that pays on a given number of rows.
    hessian_stride : int or None, default=None
        With a full Hessian: estimate it from one row in ``hessian_stride`` of each chunk
        (1: the exact Hessian; the value and gradient always use every row). None: chosen
        each round by the measured cost model of :func:`choose_stride`.
    start : ndarray of shape (n_blocks, n_params) or None, default=None
        Parameters the fit starts from (a warm start; None: zeros).

    Examples
    --------
    >>> from daskabsp.programs import LinearNewton, MultinomialNewton, NewtonProgram
    >>> issubclass(LinearNewton, NewtonProgram), issubclass(MultinomialNewton, NewtonProgram)
    (True, True)
    >>> LinearNewton(l2=0.01).curvature(51).kind        # 51 parameters: the whole Hessian
    'full'
    >>> LinearNewton(l2=0.01).curvature(5_001).kind     # beyond max_hessian: L-BFGS steps
    'lbfgs'
    """

    name: ClassVar[str] = "newton"
    accepts_sample_weight: ClassVar[bool] = True
    split_at_wrap: ClassVar[bool] = True
    #: Whether the loss is quadratic (Taylor models exact, no trust region needed).
    quadratic: ClassVar[bool] = False
    #: Whether the loss is smoothed with a width that is driven to zero (continuation).
    smoothed: ClassVar[bool] = False
    #: Smoothing width of the first stage, the smallest one, and the factor it shrinks by per
    #: stage (smoothed losses only).
    start_width: ClassVar[float] = 1.0
    min_width: ClassVar[float] = 3e-4
    width_factor: ClassVar[float] = 10.0
    #: A chunk of these programs has a fixed cost of a few tenths of a millisecond (tens of
    #: numpy calls) on top of its rows; the engine sizes chunks from the measured throughput,
    #: so where the target divided by a straggler's slowdown falls below that fixed cost its
    #: chunks shrink round after round towards one row (measured: a 4x straggler of a 3-class
    #: model went from 9000 to 20 rows per round at a 2 ms target). 10 ms keeps a 4x
    #: straggler's chunks well above it, and bounds the harvest latency to 10 ms.
    min_chunk_seconds: ClassVar[float] = 0.010

    l2: float = 1.0
    l2_intercept: float = 0.0
    fit_intercept: bool = True
    tol: float = 1e-4
    max_hessian: int = MAX_HESSIAN
    hessian_stride: int | None = None
    start: np.ndarray | None = field(default=None, repr=False)

    # -- what subclasses define -------------------------------------------------------------

    def shape(self, n_features: int) -> tuple[int, int]:
        """``(n_blocks, n_params)`` for ``n_features`` features."""
        raise NotImplementedError

    def min_partition_rows(self, n_features: int) -> int:
        """:data:`ROWS_PER_PARAMETER` rows per parameter of a block: a sub-sampled Newton
        step over a straggler's share of a round is only useful when the rows processed
        outnumber the parameters well. None above ``max_hessian``: L-BFGS steps take only a
        gradient from a round's rows (a 200 000 x 100 000 text fit was otherwise held to
        one partition, on one core)."""
        m = self.shape(n_features)[1]
        return 0 if self.curvature(m).kind == "lbfgs" else ROWS_PER_PARAMETER * m

    def curvature(self, m: int) -> Curvature:
        """The Hessian layout of a block of ``m`` parameters."""
        return Curvature("full" if m <= self.max_hessian else "lbfgs", m)

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Map parameters to the representative the program reports (default: unchanged)."""
        return theta

    def reg(self, m: int) -> np.ndarray:
        """The penalty of each parameter of a block (intercept last)."""
        r = np.full(m, float(self.l2))
        if self.fit_intercept:
            r[-1] = float(self.l2_intercept)
        return r

    # -- layout -----------------------------------------------------------------------------

    def dims(self, theta: np.ndarray) -> tuple[int, int, Curvature, int]:
        B, m = theta.shape
        cv = self.curvature(m)
        return B, m, cv, BLOCK_HEAD + m + cv.size

    def block_views(self, acc: np.ndarray, theta: np.ndarray):
        """Views ``(loss, loss_sq, reported, grad, hess)`` of each block of ``acc``
        (``hess``: the full Hessian, or the diagonal followed by the Hessian-vector
        product)."""
        B, m, _cv, L = self.dims(theta)
        out = []
        for b in range(B):
            o = HEAD + b * L
            out.append((acc[o:o + 1], acc[o + 1:o + 2], acc[o + 2:o + 3],
                        acc[o + 3:o + 3 + m], acc[o + 3 + m:o + L]))
        return out

    # -- the Program contract ---------------------------------------------------------------

    def init(self, n_features: int, n_rows: int) -> NewtonState:
        B, m = self.shape(n_features)
        width = self.start_width if self.smoothed else 0.0
        lbfgs = self.curvature(m).kind == "lbfgs"
        stride = max(1, int(self.hessian_stride or 1)) if not lbfgs else 1
        theta = np.zeros((B, m)) if self.start is None else \
            np.array(self.start, dtype=np.float64).reshape(B, m)
        return NewtonState(theta=theta, n_rows=n_rows, width=width, stride=stride,
                           full=not lbfgs and n_rows < ROWS_PER_PARAMETER * m,
                           memory=((),) * B if lbfgs else ())

    def params(self, state: NewtonState):
        """The parameters, the smoothing width, (L-BFGS) the step to multiply by the
        Hessian, and (full Hessian) the stride and offset of the rows it is estimated from."""
        if state.stride == 1:
            return state.theta, state.width, state.probe
        return state.theta, state.width, state.probe, state.stride, state.round % state.stride

    def score_coefficients(self, theta: np.ndarray) -> np.ndarray:
        """The rows of coefficients (intercept last) whose products with a row are its
        scores (default: one per block)."""
        return theta

    def prepare(self, params) -> TaskParams:
        if isinstance(params, TaskParams):
            return params
        theta, width, probe, *sampling = params
        stride, offset = sampling if sampling else (1, 0)
        coefs = self.score_coefficients(theta)
        if probe is not None:
            coefs = np.vstack([coefs, self.score_coefficients(probe)])
        d = coefs.shape[1] - int(self.fit_intercept)
        lbfgs = self.curvature(theta.shape[1]).kind == "lbfgs"
        # two scores are multiplied one column at a time by sparse chunks (see scores):
        # their columns contiguous, so that no chunk copies them
        coef_t = (np.ascontiguousarray(coefs[:, :d]).T if coefs.shape[0] == 2
                  else np.ascontiguousarray(coefs[:, :d].T))
        return TaskParams(theta, width, lbfgs, probe, coef_t,
                          coefs[:, d].copy() if self.fit_intercept else None, int(stride),
                          int(offset))

    @staticmethod
    def scores(p: TaskParams, X) -> np.ndarray:
        """``X`` times the score coefficients, plus the intercepts (rows x scores)."""
        W = p.coef_t
        if W.shape[1] == 2 and sp.issparse(X):
            # scipy's CSR kernel for two vectors took 12 ms where two single products take
            # 8 (100 000 text rows; from three vectors on, the joint product is faster)
            Z = np.empty((X.shape[0], 2), order="F")
            Z[:, 0] = X @ W[:, 0]
            Z[:, 1] = X @ W[:, 1]
        else:
            Z = np.asarray(X @ W)
        if p.intercept is not None:
            Z += p.intercept
        return Z

    def new_stats(self, params) -> np.ndarray:
        theta = params[0]
        B, _m, _cv, L = self.dims(theta)
        return np.zeros(HEAD + B * L)

    def symmetrised(self, stats: np.ndarray | None, theta: np.ndarray) -> np.ndarray | None:
        """Statistics with each full Hessian's lower triangle mirrored (dense chunks
        accumulate one triangle with ``dsyrk``)."""
        if stats is None or self.curvature(theta.shape[1]).kind != "full":
            return stats
        out = stats.copy()
        m = theta.shape[1]
        upper = np.triu_indices(m, 1)
        for _l, _s, _r, _g, hess in self.block_views(out, theta):
            H = hess.reshape(m, m)
            H[upper] = H.T[upper]
        return out

    def combine_round(self, parts: list[PartitionStats], params) -> RoundStats:
        theta = params[0]
        fixed = [replace(p, stats=self.symmetrised(p.stats, theta),
                         stats_before_wrap=self.symmetrised(p.stats_before_wrap, theta))
                 for p in parts]
        return RoundStats.of(fixed, self.new_stats(params))

    def coefficients(self, state: NewtonState) -> np.ndarray:
        return state.theta

    def params_array(self, params) -> np.ndarray:
        return np.asarray(params[0])

    def partition_update(self, state: NewtonState, piece: PartitionStats, params,
                         staleness: int) -> NewtonState:
        """SSP/ASP: one trust-region Newton step on the sum of every partition's latest
        Taylor model (see :mod:`~daskabsp.programs.incremental`)."""
        return partition_update(self, state, piece, params, staleness)

    def partition_objective(self, state, piece: PartitionStats, params) -> float:
        """The partitions' latest losses (each at its own parameters) over the rows, plus the
        penalty at their mean parameters."""
        return float(state.objective)

    def converged(self, state: NewtonState) -> bool:
        return state.converged

    def full_round(self, state: NewtonState) -> bool:
        """True once partial rounds stopped paying, and from then on.

        They stop paying when every block's last step was predicted to gain less than the
        sampling noise of its round's objective estimate (neither the ratio test nor the
        stopping test can then tell a good step from a bad one), and, for a full Hessian,
        when a round holds fewer than :data:`ROWS_PER_PARAMETER` rows per parameter
        (measured: scikit-learn's digits, 650 parameters in 3 partitions of 600 rows,
        wandered for thousands of A-BSP rounds 6-60% above the optimum). The fit then ends
        with full rounds, whose exact model converges the Newton way; a fit whose tail waits
        for a straggler is the price, and it is the same wait BSP pays every round.
        """
        return state.full

    def help_round(self, state: NewtonState) -> bool:
        """False while the steps from the rows the fastest workers scan keep their promises,
        so that the rounds are one wave each (more steps in the time a helped round takes:
        on 800 000 rows, 60 features and a 4x straggler, 4 rounds of 470 000 rows reached 1%
        of the optimum in 1.07 s, 3 helped rounds of every row in 1.85 s); True from the
        first step the ratio test takes back, and in full rounds. A round whose partial rows
        are unlike the others (:func:`~.newton_rounds.unlike`: rows sorted by label,
        partitions holding different data) takes its step on the finished partitions' rows
        alone; its partial rows still count once in the pass model."""
        return state.full or state.help

    def objective(self, state: NewtonState, stats: RoundStats, n_rows: int) -> float:
        blocks = analyse(self, state, stats)
        if not blocks:
            return math.nan
        return float(sum(b.reported for b in blocks))

    # -- the update rule (module functions of .newton_rounds: the class stays the contract) --

    def initial_radius(self, f: float) -> float:
        """Trust radius before the first step: the full step may not promise a decrease
        larger than the objective itself (losses are non-negative)."""
        return math.inf if self.quadratic else math.sqrt(2.0 * max(f, 1e-12))

    def update(self, state: NewtonState, stats: RoundStats, n_rows: int) -> NewtonState:
        return round_update(self, state, stats)


