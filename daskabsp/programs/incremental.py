"""Newton programs under SSP and ASP: a Taylor model per partition, a Newton step per update.

A partition's statistics over its whole scan hold the loss, gradient and second-order
information of its rows at the parameters ``theta_p`` its task started from: a quadratic
model of its part of the objective around ``theta_p``. The parameter server keeps each
partition's latest model; after each update it takes one trust-region Newton step
(:func:`~daskabsp.programs.trust_region.trust_step`) on the sum of all of them plus the
penalty, from the newest parameters. Every row counts once in every step, whatever the
partitions' speeds; a stale model is still a model of its rows, only around older
parameters. This is the Newton-type incremental method of Rodomanov and Kropotov (ICML 2016,
"A Superlinearly-Convergent Proximal Newton-Type Method for the Optimization of Finite
Sums"); its step needs no scaling by the staleness (see :mod:`~daskabsp.programs.aggregate`).
Under ``SSP(0)`` the sum is, at the end of each sweep, the full Newton model of BSP's round,
and its minimiser BSP's next parameters.

Above ``max_hessian`` parameters per block the partitions return only the Hessian's diagonal
and its product with a probe (the server's last step). Such models cannot be summed across
parameters: the diagonal misses the curvature that couples the parameters, and a curvature
learnt from Hessian-vector pairs is not accurate enough far from where they were taken
(measured: models around different parameters summed with an L-BFGS curvature diverged on
nearly separable wide data, 3 000 x 1 100, under SSP(0), SSP(3) and ASP alike; with the
diagonal alone the fits stalled 5-46% above the optimum). Those programs step once every
partition has reported at the current parameters, by the rounds' own L-BFGS trust-region
rule on the sum of those fresh statistics (:func:`~daskabsp.programs.newton.round_update`, a BSP
round's step); partitions that finish sooner report again at the same parameters, and the
latest report counts. Their steps then wait for the slowest partition, as BSP's do: for
stragglers on such models, A-BSP is the sync model to use (its rounds harvest).

The trust region's radius follows the models' own accuracy, since no single parameter vector
has an exact objective: when a partition's new model (exact at its new parameters) replaces
its old one, the old model's error there, against the curvature it predicted over the same
move, says whether models are trusted over moves of that length. The radius is measured in
the norm of the first summed curvature over every partition (penalty included), kept for
the rest of the fit: the current model's own norm collapses
where its curvature does (a narrowly smoothed hinge has curvature only at the rows near the
margin), and a radius in it would then allow any step.

Stopping follows :mod:`~daskabsp.programs.newton`: ``max |gradient| <= tol`` and Newton
decrement ``d^2 / 2 <= tol / 100``. A test passed on the sum of models taken at different
parameters (each within ``sqrt(20 tol)`` of the current ones, in the model's norm) is only a
candidate: the parameters are then held until every partition has reported at exactly them,
and the fit converges only if the test passes again on those fresh statistics, the full
model at the parameters returned, as a BSP round would have it. Otherwise the steps resume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from .aggregate import Piece, previous, put_piece, rows_of, total
from .base import PartitionStats, Program
from .cycles import RoundStats
from .newton_rounds import round_update
from .newton_state import DECREMENT, NewtonState
from .trust_region import one_blas_thread

#: Relative error of a partition's old model at its new parameters (against the curvature
#: term of the move) above which the radius shrinks, and below which it may grow.
_BAD, _GOOD = 0.5, 0.1


@dataclass(frozen=True)
class AggregateNewtonState(NewtonState):
    """Driver state of a Newton program under SSP or ASP.

    Attributes
    ----------
    pieces : tuple of Piece
        Each partition's latest model: with full Hessians its Taylor form
        (:func:`model_form`), else its statistics; ``params`` the ``(theta, width)`` they
        were taken at.
    metric : tuple of ndarray
        Per block, the curvature (penalty included) the trust region is measured in: the
        summed model's, fixed once every partition has reported.
    objective : float
        The partitions' latest losses over the rows, plus the penalty (see
        :func:`partition_update`).
    holding : bool
        The stopping test passed on the models: the parameters are held until every
        partition has reported at them, and the test is taken again on those.
    """

    pieces: tuple[Piece, ...] = ()
    metric: tuple[np.ndarray, ...] = ()
    objective: float = math.nan
    holding: bool = False


def model_form(program: Program, stats: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Statistics with full Hessians at ``theta`` as an additive quadratic model: per block,
    the constant and linear terms of the Taylor model in place of the loss and gradient (the
    Hessian stays), so that models around different parameters add up."""
    out = stats.copy()
    cv = program.curvature(theta.shape[1])
    for b, (loss, _sq, _rep, g, h) in enumerate(program.block_views(out, theta)):
        th = theta[b]
        hth = cv.matvec(h, th)
        loss[0] = loss[0] - g @ th + 0.5 * th @ hth
        g -= hth
    return out


@dataclass
class _Block:
    """The summed model of one block at the current parameters (mean scale, penalty
    included)."""

    f: float
    g: np.ndarray
    #: The Newton direction ``-(H + penalty)^-1 g``.
    direction: np.ndarray
    #: The curvature with the penalty, as the trust region measures it.
    metric: np.ndarray


class _Models:
    """Every partition's Taylor model (:func:`model_form`) of a fit's blocks, and their sum
    at ``theta``."""

    def __init__(self, program: Program, pieces: Sequence[Piece],
                 theta: np.ndarray) -> None:
        self.program, self.pieces, self.theta = program, pieces, theta
        _B, m, self.cv, _L = program.dims(theta)
        self.reg = program.reg(m)
        self.agg = total(pieces)
        self.W = float(self.agg[1])
        self.views = program.block_views(self.agg, theta)

    def quad(self, b: int, d: np.ndarray) -> float:
        """``d . (H + penalty) d`` of block ``b``'s summed model (mean scale)."""
        return float(d @ self.cv.matvec(self.views[b][4], d) / self.W + d @ (self.reg * d))

    def block(self, b: int) -> _Block:
        th, reg = self.theta[b], self.reg
        c, _sq, _rep, lin, h = self.views[b]
        hth = self.cv.matvec(h, th)
        f = float((c[0] + lin @ th + 0.5 * th @ hth) / self.W + 0.5 * th @ (reg * th))
        g = (lin + hth) / self.W + reg * th
        metric = h.reshape(self.cv.m, self.cv.m) / self.W + np.diag(reg)
        return _Block(f, g, self.cv.direction(h / self.W, reg, g), metric)

    def piece_value(self, piece: Piece, b: int, x: np.ndarray) -> float:
        """``piece``'s model of its rows' loss (sum scale) at ``x``, block ``b``."""
        c, _sq, _rep, lin, h = self.program.block_views(piece.stats, self.theta)[b]
        return float(c[0] + lin @ x + 0.5 * x @ self.cv.matvec(h, x))

    def piece_quad(self, piece: Piece, b: int, d: np.ndarray) -> float:
        """Half the curvature term of ``piece``'s model along ``d`` (sum scale), block
        ``b``."""
        h = self.program.block_views(piece.stats, self.theta)[b][4]
        return 0.5 * float(d @ self.cv.matvec(h, d))


def _start(state: NewtonState) -> AggregateNewtonState:
    """The rounds' initial state, for updates one partition at a time (full Hessians at
    every row)."""
    kept = {f.name: getattr(state, f.name) for f in fields(NewtonState)}
    kept.update(stride=1, probe=None, full=False)
    return AggregateNewtonState(**kept)


def _norm(metric: np.ndarray, v: np.ndarray) -> float:
    """``sqrt(v . M v)`` for a block's metric ``M`` (a matrix, or its diagonal)."""
    Mv = metric @ v if metric.ndim == 2 else metric * v
    return math.sqrt(max(float(v @ Mv), 0.0))


def _judge(models: _Models, radius: list[float], old: Piece, new: Piece, metric) -> None:
    """Shrink (or let grow) each block's radius from the old model's error at the new
    model's parameters, against the curvature term of that move (in place)."""
    t_old, t_new = old.params[0], new.params[0]
    for b in range(len(radius)):
        d = t_new[b] - t_old[b]
        quad = models.piece_quad(old, b, d)
        actual = models.piece_value(new, b, t_new[b])  # its rows' loss there: exact
        if not quad > 1e-12 * max(abs(actual), 1.0):
            continue
        ratio = abs(actual - models.piece_value(old, b, t_new[b])) / quad
        length = _norm(metric[b], d)
        if ratio > _BAD:
            radius[b] = min(radius[b], 0.5 * length)
        elif ratio < _GOOD:
            radius[b] = max(radius[b], 2.0 * length)


def _step(blk: _Block, metric: np.ndarray, radius: float) -> tuple[np.ndarray, float]:
    """A block's step (the quasi-Newton direction scaled back to ``radius`` in the
    metric's norm, if longer) and its Newton decrement."""
    lam = math.sqrt(max(-float(blk.g @ blk.direction), 0.0))
    length = _norm(metric, blk.direction)
    t = 1.0 if length <= radius else radius / length
    return t * blk.direction, lam


def _close(models: _Models, pieces, theta, bound: float) -> bool:
    """Every partition's model was taken within ``sqrt(2 bound)`` of ``theta`` (in the
    summed model's norm): the sum is then about as good as a fresh model (always, for a
    quadratic loss)."""
    if models.program.quadratic:
        return True
    return all(0.5 * models.quad(b, theta[b] - q.params[0][b]) <= bound
               for q in pieces for b in range(theta.shape[0]))


def _fresh(pieces, theta: np.ndarray, width: float) -> bool:
    """Every partition's model was taken at exactly ``theta`` and ``width``."""
    return all(q.params[1] == width and np.array_equal(q.params[0], theta) for q in pieces)


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


def _swept(program: Program, st: AggregateNewtonState,
           new: Piece) -> AggregateNewtonState:
    """L-BFGS curvature (see the module docstring): the parameters are held until every
    partition has reported at them, then the rounds' step is taken on those statistics."""
    pieces = put_piece(st.pieces, new)
    agg = total(pieces)
    held = replace(st, pieces=pieces, objective=_objective(program, pieces, agg, st.theta))
    if rows_of(pieces) < st.n_rows or not _fresh(pieces, st.theta, st.width):
        return held
    parts = [PartitionStats(q.partition, 0, q.rows, q.rows, q.stats) for q in pieces]
    return round_update(program, held, RoundStats.of(parts, agg))


@one_blas_thread
def partition_update(program: Program, state: NewtonState, piece: PartitionStats,
                     params, staleness: int) -> AggregateNewtonState:
    """One update of a Newton program under SSP or ASP (see the module docstring)."""
    st = state if isinstance(state, AggregateNewtonState) else _start(state)
    theta_p, width_p = np.asarray(params[0]), float(params[1])
    theta = st.theta
    B, _m, cv, _L = program.dims(theta)
    stats = program.symmetrised(piece.stats, theta_p)
    if cv.kind != "full":
        return _swept(program, st, Piece(piece.partition, piece.rows, stats,
                                         (theta_p, width_p)))
    new = Piece(piece.partition, piece.rows, model_form(program, stats, theta_p),
                (theta_p, width_p))
    old = previous(st.pieces, piece.partition)
    pieces = put_piece(st.pieces, new)
    models = _Models(program, pieces, theta)
    blocks = [models.block(b) for b in range(B)]
    every = rows_of(pieces) >= st.n_rows
    current = every and all(q.params[1] == st.width for q in pieces)
    metric = st.metric or tuple(b.metric for b in blocks)
    radius = list(st.radius or [program.initial_radius(b.f) for b in blocks])
    if old is not None and old.params[1] == width_p:
        _judge(models, radius, old, new, metric)
    steps = [_step(b, metric[i], radius[i]) for i, b in enumerate(blocks)]
    if not st.metric and not every:
        metric = ()  # fixed once every partition has reported
    small = all(float(np.max(np.abs(b.g))) <= program.tol
                and 0.5 * lam ** 2 <= DECREMENT * program.tol
                for b, (_s, lam) in zip(blocks, steps, strict=True))
    if program.smoothed:
        # A stage ends when its model predicts less than a tenth of its width to gain, and
        # so does the last one: with partitions' models of different ages, a nearly
        # piecewise-linear loss is not located closer than that.
        small = all(0.5 * lam ** 2 <= 0.1 * st.width for _s, lam in steps)
        bound = 0.1 * st.width
    else:
        bound = 10.0 * program.tol
    passed = current and small and _close(models, pieces, theta, bound)
    holding, converged, width = False, False, st.width
    new_theta = np.stack([theta[b] + s for b, (s, _lam) in enumerate(steps)])
    if passed and _fresh(pieces, theta, st.width):
        # the test, on every partition's statistics at theta: it holds
        new_theta = theta.copy()
        if program.smoothed and width > program.min_width:
            width = max(width / program.width_factor, program.min_width)
        else:
            converged = True
    elif passed:
        holding, new_theta = True, theta.copy()  # until every partition reports at theta
    return replace(
        st, theta=program.project(new_theta), round=st.round + 1, radius=tuple(radius),
        width=width, converged=converged, pieces=pieces, metric=metric, holding=holding,
        model=("pass" if current else "round",) * B,
        objective=_objective(program, pieces, models.agg, theta))
