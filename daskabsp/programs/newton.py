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
from typing import Any, ClassVar

import numpy as np

from .base import PartitionStats, Program
from .curvature import Curvature
from .cycles import CycleLedger, RoundStats
from .trust_region import TrustRegion, one_blas_thread, trust_step

#: Header of the statistics: row count, weight sum.
_HEAD = 2
#: Per block before the gradient: loss sum, weighted sum of squared losses, reported loss sum.
_BLOCK_HEAD = 3
#: The Newton decrement test is ``d^2 / 2 <= _DECREMENT * tol``: tighter than scikit-learn's
#: ``d^2 / 2 <= tol``, because the point that passes it is returned without a further step,
#: and ``d^2 / 2`` estimates its objective gap.
_DECREMENT = 1e-2
#: Largest spread (in the model's norm) of the points a pass model's pieces were computed at
#: for the pass model to be used while the round model still makes progress.
_NEAR = 0.2


@dataclass(frozen=True)
class _Pending:
    """A step taken last round, to be judged by this round's objective."""

    theta: np.ndarray
    f: float
    g: np.ndarray
    h: np.ndarray
    predicted: float
    length: float
    noise: float
    exact: bool


@dataclass(frozen=True)
class NewtonState:
    """Driver state of a Newton program.

    Attributes
    ----------
    theta : ndarray of shape (n_blocks, n_params)
        Parameters of each independent block (one per binary problem, or one multinomial).
    """

    theta: np.ndarray
    n_rows: int
    round: int = 0
    ledger: CycleLedger = field(default_factory=CycleLedger)
    radius: tuple[float, ...] | None = None
    pending: tuple[_Pending | None, ...] | None = None
    anchors: tuple[tuple[int, np.ndarray], ...] = ()
    width: float = 1.0
    converged: bool = False
    #: Which model each block's last step used ("pass" or "round").
    model: tuple[str, ...] = ()


@dataclass
class _Block:
    f: float
    g: np.ndarray
    h: np.ndarray
    noise: float
    exact: bool
    movement: float
    reported: float
    #: The model's objective at other parameters (pass model only).
    f_at: Any = None


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
        Largest number of parameters per block for which the full Hessian is shipped; above
        it a block-diagonal or diagonal approximation is used (slower convergence).
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

    l2: float = 1.0
    l2_intercept: float = 0.0
    fit_intercept: bool = True
    tol: float = 1e-4
    max_hessian: int = 1024

    # -- what subclasses define -------------------------------------------------------------

    def shape(self, n_features: int) -> tuple[int, int]:
        """``(n_blocks, n_params)`` for ``n_features`` features."""
        raise NotImplementedError

    def curvature(self, m: int) -> Curvature:
        """The Hessian layout of a block of ``m`` parameters."""
        return Curvature("full" if m <= self.max_hessian else "diag", m)

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

    def _dims(self, theta: np.ndarray) -> tuple[int, int, Curvature, int]:
        B, m = theta.shape
        cv = self.curvature(m)
        return B, m, cv, _BLOCK_HEAD + m + cv.size

    def block_views(self, acc: np.ndarray, theta: np.ndarray):
        """Views ``(loss, loss_sq, reported, grad, hess)`` of each block of ``acc``."""
        B, m, _cv, L = self._dims(theta)
        out = []
        for b in range(B):
            o = _HEAD + b * L
            out.append((acc[o:o + 1], acc[o + 1:o + 2], acc[o + 2:o + 3],
                        acc[o + 3:o + 3 + m], acc[o + 3 + m:o + L]))
        return out

    # -- the Program contract ---------------------------------------------------------------

    def init(self, n_features: int, n_rows: int) -> NewtonState:
        B, m = self.shape(n_features)
        width = self.start_width if self.smoothed else 0.0
        return NewtonState(theta=np.zeros((B, m)), n_rows=n_rows, width=width)

    def params(self, state: NewtonState) -> tuple[np.ndarray, float]:
        return state.theta, state.width

    def new_stats(self, params) -> np.ndarray:
        theta = params[0]
        B, _m, _cv, L = self._dims(theta)
        return np.zeros(_HEAD + B * L)

    def combine_round(self, parts: list[PartitionStats], params) -> RoundStats:
        return RoundStats.of(parts, self.new_stats(params))

    def coefficients(self, state: NewtonState) -> np.ndarray:
        return state.theta

    def converged(self, state: NewtonState) -> bool:
        return state.converged

    def objective(self, state: NewtonState, stats: RoundStats, n_rows: int) -> float:
        blocks = self._analyse(state, stats)
        if not blocks:
            return math.nan
        return float(sum(b.reported for b in blocks))

    # -- the update rule --------------------------------------------------------------------

    def _as_model(self, raw: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Statistics at ``theta`` -> additive quadratic model (constant, linear, quadratic)."""
        out = raw.copy()
        _B, _m, cv, _L = self._dims(theta)
        for b, (loss, _sq, _rep, g, h) in enumerate(self.block_views(out, theta)):
            th = theta[b]
            hth = cv.matvec(h, th)
            loss[0] = loss[0] - g @ th + 0.5 * th @ hth
            g -= hth
        return out

    def _noise(self, raw_loss: float, raw_sq: float, wsum: float, rows: int,
               n_rows: int) -> float:
        """Sampling noise of the difference of two round estimates of the mean loss."""
        if rows >= n_rows or wsum <= 0:
            return 0.0
        mean = raw_loss / wsum
        var = max(raw_sq / wsum - mean * mean, 0.0)
        return 3.0 * math.sqrt(2.0 * var * (1.0 - rows / n_rows) / max(rows, 1))

    @one_blas_thread
    def _analyse(self, state: NewtonState, rs: RoundStats) -> list[_Block]:
        key = id(state)
        if key in rs.cache:
            return rs.cache[key][0]
        theta = state.theta
        if rs.rows == 0 or rs.total[1] <= 0:
            rs.cache[key] = ([], state.ledger)
            return []
        _B, m, cv, _L = self._dims(theta)
        reg = self.reg(m)
        ledger = state.ledger.add(rs.parts, lambda s: self._as_model(s, theta), state.round)
        complete = ledger.complete(state.n_rows)
        anchors = dict(state.anchors)
        anchors[state.round] = theta
        wsum = rs.total[1]
        out = []
        views = self.block_views(rs.total, theta)
        pass_views = self.block_views(complete[0], theta) if complete else None
        for b, (loss, sq, rep, g, h) in enumerate(views):
            th = theta[b]
            penalty = 0.5 * th @ (reg * th)
            blk = _Block(
                f=loss[0] / wsum + penalty, g=g / wsum + reg * th, h=h / wsum,
                noise=self._noise(loss[0], sq[0], wsum, rs.rows, state.n_rows),
                exact=rs.rows >= state.n_rows, movement=0.0,
                reported=rep[0] / wsum + penalty,
            )
            if pass_views is not None:
                c, _sq, _rep, lin, quad = pass_views[b]
                W = complete[0][1]
                A = quad / W

                def f_pass(t, c=c, lin=lin, A=A, W=W):
                    return float(c[0] / W + lin @ t / W + 0.5 * t @ cv.matvec(A, t)
                                 + 0.5 * t @ (reg * t))

                oldest = complete[1]
                moves = [math.sqrt(max(cv.quad(A, th - anchors[r][b], reg), 0.0))
                         if r in anchors else math.inf
                         for r in range(oldest, state.round + 1)]
                move = max(moves) if moves else 0.0
                # The pass's pieces are Taylor models around where they were computed: trust
                # them when those points are about as close as the round model's own step,
                # and close in absolute terms.
                lam = math.sqrt(max(-(blk.g @ cv.direction(blk.h, reg, blk.g)), 0.0))
                near = move <= min(3.0 * max(lam, math.sqrt(2.0 * self.tol)), _NEAR)
                fp = f_pass(th)
                if self.quadratic or (near and fp >= 0.0):
                    blk = _Block(
                        f=fp, g=lin / W + cv.matvec(A, th) + reg * th, h=A, noise=0.0,
                        exact=True, movement=move,
                        reported=fp if not self.smoothed else blk.reported,
                        f_at=f_pass,
                    )
            out.append(blk)
        rs.cache[key] = (out, ledger)
        return out

    def initial_radius(self, f: float) -> float:
        """Trust radius before the first step: the full step may not promise a decrease
        larger than the objective itself (losses are non-negative)."""
        return math.inf if self.quadratic else math.sqrt(2.0 * max(f, 1e-12))

    @one_blas_thread
    def update(self, state: NewtonState, stats: RoundStats, n_rows: int) -> NewtonState:
        blocks = self._analyse(state, stats)
        if not blocks:
            return replace(state, round=state.round + 1)
        ledger = stats.cache[id(state)][1]
        theta = state.theta
        _B, m, cv, _L = self._dims(theta)
        reg = self.reg(m)
        radius = list(state.radius or [self.initial_radius(b.f) for b in blocks])
        pending = state.pending or (None,) * len(blocks)
        new_theta = theta.copy()
        new_pending: list[_Pending | None] = []
        done, stage_done, models = [], [], []
        def step(g, h, region):
            return trust_step(g, cv.direction(h, reg, g), region.radius)

        for b, blk in enumerate(blocks):
            tr, keep, p = TrustRegion(radius[b]), True, pending[b]
            if p is not None and p.exact == blk.exact:
                # Estimates from the two kinds of model differ by more than a step's effect:
                # only estimates of the same kind are compared. The pass model is compared
                # with itself at both points, so that pieces replaced since do not count.
                before = blk.f_at(p.theta) if blk.f_at is not None else p.f
                floor = 1e-2 * self.tol
                tr, keep = tr.judge(before - blk.f, p.predicted, p.length,
                                    noise=max(p.noise, blk.noise, floor))
            if not keep:
                # Take the step back and retry a shorter one from where it started.
                st = step(p.g, p.h, tr)
                new_theta[b] = p.theta + st.step
                new_pending.append(replace(p, predicted=st.predicted, length=st.length))
                done.append(False)
                stage_done.append(False)
            else:
                st = step(blk.g, blk.h, tr)
                new_theta[b] = theta[b] + st.step
                new_pending.append(_Pending(theta[b], blk.f, blk.g, blk.h, st.predicted,
                                            st.length, blk.noise, blk.exact))
                small = (np.max(np.abs(blk.g)) <= self.tol
                         and 0.5 * st.decrement ** 2 <= _DECREMENT * self.tol)
                close = self.quadratic or 0.5 * blk.movement ** 2 <= 10.0 * self.tol
                done.append(blk.exact and small and close)
                stage_done.append(0.5 * st.decrement ** 2 <= 0.1 * state.width)
            radius[b] = tr.radius
            models.append("pass" if blk.exact else "round")

        width, converged = state.width, all(done)
        if converged:
            # The point that passed the test is returned, not one more (unverified) step:
            # where the loss is nearly flat a Newton step can be long though it promises
            # little, and nothing would check it.
            new_theta = theta.copy()
        new_theta = self.project(new_theta)
        anchors = (*state.anchors, (state.round, theta))
        keep_from = min((min(t.done_since, t.open_since) for _p, t in ledger.tracks),
                        default=state.round)
        anchors = tuple((r, a) for r, a in anchors if r >= keep_from)[-64:]
        if self.smoothed and width > self.min_width:
            converged = False
            if all(stage_done):
                # Next stage of the continuation: a narrower smoothing is a new function,
                # so the pass statistics and the pending ratio tests start over.
                width = max(width / self.width_factor, self.min_width)
                ledger, new_pending, anchors = ledger.reset(), [None] * len(blocks), ()
                new_theta = theta.copy()  # the step was for the old width; nothing checks it
        return replace(
            state, theta=new_theta, round=state.round + 1, ledger=ledger,
            radius=tuple(radius), pending=tuple(new_pending), anchors=anchors, width=width,
            converged=converged, model=tuple(models),
        )
