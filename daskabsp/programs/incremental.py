"""Newton programs under SSP and ASP: a Taylor model per partition, a Newton step per update.

A partition's statistics over its whole scan hold the loss, gradient and Hessian (or, above
``max_hessian``, the Hessian's diagonal) of its rows at the parameters ``theta_p`` its task
started from: a quadratic model of its part of the objective around ``theta_p``. The
parameter server keeps each partition's latest model; after each update it takes one
trust-region Newton step (:func:`~daskabsp.programs.trust_region.trust_step`) on the sum of
all of them plus the penalty, from the newest parameters. Every row counts once in every
step, whatever the partitions' speeds; a stale model is still a model of its rows, only
around older parameters. This is the Newton-type incremental method of Rodomanov and
Kropotov (ICML 2016, "A Superlinearly-Convergent Proximal Newton-Type Method for the
Optimization of Finite Sums"); its step needs no scaling by the staleness (see
:mod:`~daskabsp.programs.aggregate`). Under ``SSP(0)`` the sum is, at the end of each sweep,
the full Newton model of BSP's round, and its minimiser BSP's next parameters.

The trust region's radius follows the models' own accuracy, since no single parameter vector
has an exact objective: when a partition's new model (exact at its new parameters) replaces
its old one, the old model's error there, against the curvature it predicted over the same
move, says whether models are trusted over moves of that length. The radius is measured in
the norm of the first summed model over every partition (penalty included), kept for the
rest of the fit: the current model's own norm collapses where its curvature does (a
narrowly smoothed hinge has curvature only at the rows near the margin), and a radius in it
would then allow any step. Blocks of more than
``max_hessian`` parameters use the Hessian's diagonal as curvature (diagonally scaled
aggregated gradient steps: slower than the rounds' L-BFGS).

Stopping follows :mod:`~daskabsp.programs.newton` on the sum of the models, once every
partition has reported (at the current smoothing width): ``max |gradient| <= tol``, Newton
decrement ``d^2 / 2 <= tol / 100``, and every partition's model taken within
``sqrt(20 tol)`` (in the model's norm) of the current parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from .aggregate import Piece, previous, put_piece, rows_of, total
from .base import PartitionStats
from .newton import _DECREMENT, NewtonState
from .trust_region import one_blas_thread

if TYPE_CHECKING:
    from .newton import NewtonProgram

#: Relative error of a partition's old model at its new parameters (against the curvature
#: term of the move) above which the radius shrinks, and below which it may grow.
_BAD, _GOOD = 0.5, 0.1


@dataclass(frozen=True)
class AggregateNewtonState(NewtonState):
    """Driver state of a Newton program under SSP or ASP.

    Attributes
    ----------
    pieces : tuple of Piece
        Each partition's latest model (:func:`model_form`), with ``params`` the
        ``(theta, width)`` it was taken at.
    metric : tuple of ndarray
        Per block, the curvature (penalty included) the trust region is measured in: the
        summed model's, fixed once every partition has reported.
    objective : float
        The partitions' latest losses over the rows, plus the penalty (see
        :func:`partition_update`).
    """

    pieces: tuple[Piece, ...] = ()
    metric: tuple[np.ndarray, ...] = ()
    objective: float = math.nan


def _curvature_times(cv, h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The stored curvature times ``v``: the full Hessian, or its diagonal."""
    return cv.matvec(h, v) if cv.kind == "full" else h[:cv.m] * v


def model_form(program: NewtonProgram, stats: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Statistics at ``theta`` as an additive quadratic model: per block, the constant and
    linear terms of the Taylor model in place of the loss and gradient (the curvature stays),
    so that models around different parameters add up."""
    out = stats.copy()
    cv = program.curvature(theta.shape[1])
    for b, (loss, _sq, _rep, g, h) in enumerate(program.block_views(out, theta)):
        th = theta[b]
        hth = _curvature_times(cv, h, th)
        loss[0] = loss[0] - g @ th + 0.5 * th @ hth
        g -= hth
    return out


def _start(state: NewtonState) -> AggregateNewtonState:
    """The rounds' initial state, for updates one partition at a time (full Hessians at
    every row, no L-BFGS probe)."""
    kept = {f.name: getattr(state, f.name) for f in fields(NewtonState)}
    kept.update(stride=1, probe=None, full=False)
    return AggregateNewtonState(**kept)


def _norm(cv, metric: np.ndarray, v: np.ndarray) -> float:
    """``sqrt(v . M v)`` for a block's metric ``M`` (a matrix, or its diagonal)."""
    Mv = metric @ v if cv.kind == "full" else metric * v
    return math.sqrt(max(float(v @ Mv), 0.0))


def _judge(program, radius: list[float], old: Piece, new: Piece, metric, theta) -> None:
    """Shrink (or let grow) each block's radius from the old model's error at the new
    model's parameters, against the curvature term of that move (in place)."""
    B, _m, cv, _L = program._dims(theta)
    t_old, t_new = old.params[0], new.params[0]
    old_v = program.block_views(old.stats, theta)
    new_v = program.block_views(new.stats, theta)
    for b in range(B):
        d = t_new[b] - t_old[b]
        (c0, _s, _r, l0, h0), (c1, _s1, _r1, l1, h1) = old_v[b], new_v[b]
        x = t_new[b]
        quad = 0.5 * float(d @ _curvature_times(cv, h0, d))
        if not quad > 1e-12 * max(abs(float(c1[0])), 1.0):
            continue
        predicted = c0[0] + l0 @ x + 0.5 * x @ _curvature_times(cv, h0, x)
        actual = c1[0] + l1 @ x + 0.5 * x @ _curvature_times(cv, h1, x)
        ratio = abs(float(actual - predicted)) / quad
        length = _norm(cv, metric[b], d)
        if ratio > _BAD:
            radius[b] = min(radius[b], 0.5 * length)
        elif ratio < _GOOD:
            radius[b] = max(radius[b], 2.0 * length)


@dataclass
class _Block:
    g: np.ndarray
    h: np.ndarray
    f: float


def _blocks(program, agg: np.ndarray, theta: np.ndarray) -> list[_Block]:
    """The summed model of each block at ``theta``: value, gradient, curvature (mean
    scale, penalty included in the value and gradient)."""
    _B, m, cv, _L = program._dims(theta)
    reg = program.reg(m)
    W = agg[1]
    out = []
    for b, (c, _sq, _rep, lin, h) in enumerate(program.block_views(agg, theta)):
        th = theta[b]
        hth = _curvature_times(cv, h, th)
        f = float((c[0] + lin @ th + 0.5 * th @ hth) / W + 0.5 * th @ (reg * th))
        out.append(_Block(g=(lin + hth) / W + reg * th, h=h / W, f=f))
    return out


@dataclass(frozen=True)
class _Step:
    step: np.ndarray
    decrement: float


def _step(cv, reg: np.ndarray, blk: _Block, metric: np.ndarray, radius: float) -> _Step:
    """The Newton step of a block's summed model, scaled back to ``radius`` (in the
    metric's norm) if longer."""
    s = cv.direction(blk.h, reg, blk.g)
    lam = math.sqrt(max(-float(blk.g @ s), 0.0))
    length = _norm(cv, metric, s)
    t = 1.0 if length <= radius else radius / length
    return _Step(t * s, lam)


def _metric(cv, reg: np.ndarray, blocks: list[_Block]) -> tuple[np.ndarray, ...]:
    """Each block's curvature with its penalty (a matrix, or a diagonal)."""
    if cv.kind == "full":
        return tuple(b.h.reshape(cv.m, cv.m) + np.diag(reg) for b in blocks)
    return tuple(b.h[:cv.m] + reg for b in blocks)


def _close(program, pieces, theta, blocks: list[_Block], bound: float) -> bool:
    """Every partition's model was taken within ``sqrt(2 bound)`` of ``theta`` (in the
    summed model's norm): the sum is then about as good as a fresh model (always, for a
    quadratic loss)."""
    if program.quadratic:
        return True
    _B, m, cv, _L = program._dims(theta)
    reg = program.reg(m)
    for q in pieces:
        for b, blk in enumerate(blocks):
            d = theta[b] - q.params[0][b]
            if 0.5 * float(d @ _curvature_times(cv, blk.h, d) + d @ (reg * d)) > bound:
                return False
    return True


def _objective(program, pieces, agg: np.ndarray, theta: np.ndarray) -> float:
    """The partitions' reported losses (each at its own parameters) over the weight, plus
    the penalty at their row-weighted mean parameters."""
    k = rows_of(pieces)
    mean = np.sum([q.params[0] * (q.rows / k) for q in pieces], axis=0)
    reg = program.reg(theta.shape[1])
    W = agg[1]
    return float(sum(rep[0] / W + 0.5 * mean[b] @ (reg * mean[b])
                     for b, (_c, _s, rep, _g, _h) in
                     enumerate(program.block_views(agg, theta))))


@one_blas_thread
def partition_update(program: NewtonProgram, state: NewtonState, piece: PartitionStats,
                     params, staleness: int) -> AggregateNewtonState:
    """One update of a Newton program under SSP or ASP (see the module docstring)."""
    st = state if isinstance(state, AggregateNewtonState) else _start(state)
    theta_p, width_p = np.asarray(params[0]), float(params[1])
    stats = program._symmetrised(piece.stats, theta_p)
    new = Piece(piece.partition, piece.rows, model_form(program, stats, theta_p),
                (theta_p, width_p))
    old = previous(st.pieces, piece.partition)
    pieces = put_piece(st.pieces, new)
    agg = total(pieces)
    theta = st.theta
    B, m, cv, _L = program._dims(theta)
    reg = program.reg(m)
    blocks = _blocks(program, agg, theta)
    current = (rows_of(pieces) >= st.n_rows
               and all(q.params[1] == st.width for q in pieces))
    metric = st.metric or _metric(cv, reg, blocks)
    radius = list(st.radius or [program.initial_radius(b.f) for b in blocks])
    if old is not None and old.params[1] == width_p:
        _judge(program, radius, old, new, metric, theta)
    steps = [_step(cv, reg, b, metric[i], radius[i]) for i, b in enumerate(blocks)]
    if not st.metric and rows_of(pieces) < st.n_rows:
        metric = ()  # fixed once every partition has reported
    small = [float(np.max(np.abs(b.g))) <= program.tol
             and 0.5 * s.decrement ** 2 <= _DECREMENT * program.tol
             for b, s in zip(blocks, steps, strict=True)]
    converged = current and all(small) and _close(program, pieces, theta, blocks,
                                                  10.0 * program.tol)
    width = st.width
    new_theta = np.stack([theta[b] + s.step for b, s in enumerate(steps)])
    if program.smoothed:
        # A stage ends when its model predicts less than a tenth of its width to gain, and
        # so does the last one: with partitions' models of different ages, a nearly
        # piecewise-linear loss is not located closer than that.
        stage_done = (current and all(0.5 * s.decrement ** 2 <= 0.1 * width for s in steps)
                      and _close(program, pieces, theta, blocks, 0.1 * width))
        converged = stage_done and width <= program.min_width
        if stage_done:
            new_theta = theta.copy()  # the point that passed the test
            width = max(width / program.width_factor, program.min_width)
    return replace(
        st, theta=program.project(new_theta), round=st.round + 1, radius=tuple(radius),
        width=width, converged=converged, pieces=pieces, metric=metric,
        model=("pass" if current else "round",) * B,
        objective=_objective(program, pieces, agg, theta))
