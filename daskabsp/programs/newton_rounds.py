"""The round rule of the Newton programs: from a round's statistics to the next parameters
(trust-region Newton on the round model or the pass model, see :mod:`.newton`).

Functions of a :class:`~.newton.NewtonProgram` ``prog``; the class keeps the contract and
calls them, and :mod:`.incremental` takes the rounds' step where SSP and ASP need one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .base import Program
from .curvature import Curvature, add_pair, diagonal
from .cycles import RoundStats
from .newton_state import (
    DECREMENT,
    NEWTON_ROUNDS,
    ROUND_OVERHEAD,
    ROWS_PER_PARAMETER,
    NewtonState,
    Pending,
    choose_stride,
)
from .trust_region import TrustRegion, one_blas_thread, round_noise, trust_step

#: Largest spread (in the model's norm) of the points a pass model's pieces were computed at
#: for the pass model to be used while the round model still makes progress.
NEAR = 0.2

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


def _as_model(prog: Program, raw: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Statistics at ``theta`` -> additive quadratic model (constant, linear, quadratic)."""
    out = raw.copy()
    _B, _m, cv, _L = prog.dims(theta)
    for b, (loss, _sq, _rep, g, h) in enumerate(prog.block_views(out, theta)):
        th = theta[b]
        hth = cv.matvec(h, th)
        loss[0] = loss[0] - g @ th + 0.5 * th @ hth
        g -= hth
    return out


#: How far apart (see :func:`unlike`) the mean gradients of the stopped partitions' rows
#: and of the others' must be for the rows to count as unlike each other. Measured on
#: 6 000 of 30 000 rows (8 features; logistic, multinomial, squared hinge): 0.3-13 for fair
#: samples (up to 68 at parameters far from any optimum, where the gradients' spread is no
#: longer the Hessian), 980-23 000 for a prefix of rows sorted by label.
UNLIKE = 100.0


def unlike(prog: Program, rs: RoundStats, theta: np.ndarray) -> bool:
    """Whether the rows of the round's partial pieces (partitions stopped before their last
    row) are unlike the other rows: the difference of their mean gradients, per parameter,
    in units of its sampling noise (the Hessian's diagonal standing for the gradients'
    spread, as it does near an optimum), squared, averages more than :data:`UNLIKE`. Then
    the partial rows are no fair sample (rows sorted by label, or partitions holding
    different data) and a round that counts them steers the wrong way."""
    partial = [ps for ps in rs.parts if ps.rows < ps.size]
    if not partial or len(partial) == len(rs.parts):
        return False
    rest = [ps for ps in rs.parts if ps.rows >= ps.size]
    a, b = (np.sum([ps.stats for ps in g], axis=0) for g in (partial, rest))
    if a[1] <= 0 or b[1] <= 0:
        return False
    _B, m, cv, _L = prog.dims(theta)
    scale = 1.0 / sum(ps.rows for ps in partial) + 1.0 / sum(ps.rows for ps in rest)
    for va, vb in zip(prog.block_views(a, theta), prog.block_views(b, theta), strict=True):
        h = (va[4] + vb[4]) / (a[1] + b[1])
        diag = h[:m * m].reshape(m, m).diagonal() if cv.kind == "full" else h[:m]
        d2 = (va[3] / a[1] - vb[3] / b[1]) ** 2 / np.maximum(diag, 1e-12)
        if d2.sum() / (scale * m) > UNLIKE:
            return True
    return False


@one_blas_thread
def analyse(prog: Program, state: NewtonState, rs: RoundStats) -> list[_Block]:
    key = id(state)
    if key in rs.cache:
        return rs.cache[key][0]
    theta = state.theta
    if rs.rows == 0 or rs.total[1] <= 0:
        rs.cache[key] = ([], state.ledger)
        return []
    _B, m, cv, _L = prog.dims(theta)
    reg = prog.reg(m)
    if cv.kind == "full":
        ledger = state.ledger.add(rs.parts, lambda s: _as_model(prog, s, theta), state.round)
        complete = ledger.complete(state.n_rows)
    else:
        # Only full Hessians make Taylor models of a pass's pieces; L-BFGS fits steer by
        # their rounds and end with full rounds.
        ledger, complete = state.ledger, None
    anchors = dict(state.anchors)
    anchors[state.round] = theta
    total, rows = rs.total, rs.rows
    if unlike(prog, rs, theta):
        # The round's model from the partitions that finished: the partial rows would
        # steer it the wrong way (they still count in the pass model, once each).
        fair = [ps for ps in rs.parts if ps.rows >= ps.size]
        total, rows = np.sum([ps.stats for ps in fair], axis=0), sum(ps.rows for ps in fair)
    wsum = total[1]
    out = []
    pass_views = prog.block_views(complete[0], theta) if complete else None
    # A quadratic loss's pieces are exact Taylor models wherever they were taken only if
    # their Hessians are: one from a stride of the rows is an estimate, and its error
    # grows with the distance to the parameters it was taken at (measured: Ridge pass
    # models with pieces at stride 12 stopped with coefficients 2e-4 to 7e-4 off).
    exact_taylor = (prog.quadratic and complete is not None
                    and len(state.strides) == state.round  # a stride recorded per round
                    and all(s == 1 for s in (*state.strides, state.stride)[complete[1]:]))
    for b, (loss, sq, rep, g, h) in enumerate(prog.block_views(total, theta)):
        th = theta[b]
        penalty = 0.5 * th @ (reg * th)
        blk = _Block(
            f=loss[0] / wsum + penalty, g=g / wsum + reg * th, h=h / wsum,
            noise=round_noise(loss[0], sq[0], wsum, rows, state.n_rows),
            exact=rows >= state.n_rows, movement=0.0, reported=rep[0] / wsum + penalty,
        )
        if pass_views is not None and not blk.exact:
            moves = [math.sqrt(max(cv.quad(pass_views[b][4] / complete[0][1],
                                           th - anchors[r][b], reg), 0.0))
                     if r in anchors else math.inf
                     for r in range(complete[1], state.round + 1)]
            blk = _pass_block(prog, blk, th, pass_views[b], complete[0][1], cv, reg,
                              max(moves) if moves else 0.0, exact_taylor)
        out.append(blk)
    rs.cache[key] = (out, ledger)
    return out


def _pass_block(prog: Program, blk: _Block, th: np.ndarray, view, W: float,
                cv: Curvature, reg: np.ndarray, move: float, exact_taylor: bool) -> _Block:
    """The block of the pass model (every row once, pieces a few rounds old), if its pieces
    are exact Taylor models (``exact_taylor``: a quadratic loss, exact Hessians) or were
    computed about as close to ``th`` as the round model's own step (``move``: the farthest
    of them, in the model's norm), and close in absolute terms; ``blk`` else."""
    c, _sq, _rep, lin, quad = view
    A = quad / W

    def f_pass(t, c=c, lin=lin, A=A, W=W):
        return float(c[0] / W + lin @ t / W + 0.5 * t @ cv.matvec(A, t)
                     + 0.5 * t @ (reg * t))

    lam = math.sqrt(max(-(blk.g @ cv.direction(blk.h, reg, blk.g)), 0.0))
    near = move <= min(3.0 * max(lam, math.sqrt(2.0 * prog.tol)), NEAR)
    fp = f_pass(th)
    if not (exact_taylor or (near and fp >= 0.0)):
        return blk
    return _Block(f=fp, g=lin / W + cv.matvec(A, th) + reg * th, h=A, noise=0.0, exact=True,
                  movement=0.0 if exact_taylor else move,
                  reported=fp if not prog.smoothed else blk.reported, f_at=f_pass)


def next_stride(prog: Program, state: NewtonState, stats: RoundStats,
                 cv: Curvature) -> int:
    """The stride of the Hessian's rows next round (see :func:`choose_stride`)."""
    if cv.kind != "full":
        return 1
    if prog.hessian_stride is not None:
        return max(1, int(prog.hessian_stride))
    timed = [p.stats[2:4] for p in stats.parts if p.rows > 0]
    if not timed:
        return state.stride
    grad, curv = max(timed, key=lambda t: t[0] + t[1])
    overhead = ROUND_OVERHEAD
    if state.clock is not None:
        overhead = max(time.perf_counter() - state.clock - grad - curv, 0.0)
    return choose_stride(n_rows=state.n_rows, m=cv.m, grad_seconds=float(grad),
                         curv_seconds=float(curv), stride=state.stride, overhead=overhead,
                         rounds_left=NEWTON_ROUNDS - state.round - 1)


def _lbfgs_memory(prog: Program, state: NewtonState, blocks: list[_Block], m: int,
                  exact: bool) -> list:
    """The L-BFGS pairs after a round: the probe's Hessian-vector product, or (exact rounds)
    the secant of the last step."""
    memory = list(state.memory)
    reg = prog.reg(m)
    for b, blk in enumerate(blocks):
        if state.probe is not None:
            s = state.probe[b]
            memory[b] = add_pair(memory[b], s, blk.h[m:] + reg * s)
        elif exact and state.secant is not None:
            memory[b] = add_pair(memory[b], state.theta[b] - state.secant[0][b],
                                 blk.g - state.secant[1][b])
    return memory


@dataclass
class _Steps:
    """What the trust-region steps of a round's blocks came to."""

    theta: np.ndarray
    pending: list
    radius: list
    done: list = field(default_factory=list)
    stage_done: list = field(default_factory=list)
    #: A step judged on a round's model (not a pass's) was taken back.
    rejected: bool = False
    noisy: list = field(default_factory=list)
    models: list = field(default_factory=list)


def _fresh_region(prog: Program, state: NewtonState, blk: _Block, p: Pending | None,
                  tr: TrustRegion) -> TrustRegion:
    """The trust region of a block's step: ``tr``, or afresh on the fit's first full round."""
    full = blk.exact and blk.f_at is None  # every row, at these parameters
    if state.full and full and not (p is not None and p.exact and not p.stitched):
        # The first round over every row of those that end the fit: the radius was
        # learnt judging partial rounds, and on rows unlike the others (sorted by label)
        # those take back step after step, each quartering it. From there it doubles a
        # round at most (measured: 500 000 x 60, 3 classes, 4 workers: 1e-4 of the step
        # needed, and 10 to 90 extra full rounds). The exact model starts afresh; its
        # own ratio test judges the step next round. (Not before the fit's full rounds:
        # a long step from a round over every row, left unjudged because a partial round
        # came next, diverged: see test_row_cost.)
        return TrustRegion(max(tr.radius, prog.initial_radius(blk.f)))
    return tr


def _step_blocks(prog: Program, state: NewtonState, blocks: list[_Block],
                 cv: Curvature, memory: list) -> _Steps:
    """Each block's ratio test of its last step, then its next trust-region step (or the
    last one taken back and retried shorter)."""
    theta = state.theta
    reg = prog.reg(theta.shape[1])
    pending = state.pending or (None,) * len(blocks)
    out = _Steps(theta.copy(), [],
                 list(state.radius or [prog.initial_radius(b.f) for b in blocks]))
    lbfgs = cv.kind == "lbfgs"
    for b, blk in enumerate(blocks):
        cvb = replace(cv, pairs=memory[b]) if memory else cv

        def step(g, h, region, cvb=cvb, b=b):
            return trust_step(g, cvb.direction(h, reg, g), region.radius,
                              state.scale[b] if lbfgs else None)

        tr, keep, p = TrustRegion(out.radius[b]), True, pending[b]
        tr = _fresh_region(prog, state, blk, p, tr)
        full = blk.exact and blk.f_at is None  # every row, at these parameters
        if p is not None and p.exact == blk.exact and not (full and p.stitched):
            # Estimates from a pass model and a round's differ by more than a step's effect:
            # only estimates of the same kind are compared. The pass model is compared
            # with itself at both points, so that pieces replaced since do not count; a
            # round over every row is not compared with a pass model's value (a pass
            # model's error at its own point is no step's doing: judged by it, every
            # retried step was taken back, and the radius fell to nothing).
            # L-BFGS fits have no pass model: a round over every row and a partial one are
            # estimates of the same objective, their difference within the noise allowed
            # (a step left unjudged because the next round's rows were of the other kind
            # is how an A-BSP fit of sparse text diverged: see test_row_cost).
            before = blk.f_at(p.theta) if blk.f_at is not None else p.f
            tr, keep = tr.judge(before - blk.f, p.predicted, p.length,
                                noise=max(p.noise, blk.noise, 1e-2 * prog.tol))
        if not keep:  # take the step back and retry a shorter one from where it started
            out.rejected = out.rejected or not blk.exact
            st = step(p.g, p.h, tr)
            out.theta[b] = p.theta + st.step
            out.pending.append(replace(p, predicted=st.predicted, length=st.length))
            out.done.append(False)
            out.stage_done.append(False)
            # The shorter retry is what partial rounds offer now: below their noise, they
            # can no longer tell it from nothing (rejections quarter the radius round after
            # round where the partial rows are unlike the rest; the fit then moved nowhere
            # for tens of rounds before ending with full ones).
            out.noisy.append(not blk.exact and st.predicted <= max(p.noise, blk.noise))
        else:
            st = step(blk.g, blk.h, tr)
            out.theta[b] = theta[b] + st.step
            out.pending.append(Pending(theta[b], blk.f, blk.g, blk.h, st.predicted,
                                        st.length, blk.noise, blk.exact,
                                        blk.f_at is not None))
            small = (np.max(np.abs(blk.g)) <= prog.tol
                     and 0.5 * st.decrement ** 2 <= DECREMENT * prog.tol)
            # A pass model's pieces must have been taken within the decrement's own scale:
            # at 10 tol, 1 default A-BSP fit in 8 of 2 000 x 5 stopped at a relative gap of
            # 2e-5 (coefficients 1e-2 off); now <= 3e-9, for 0.3 more rounds on average.
            close = 0.5 * blk.movement ** 2 <= DECREMENT * prog.tol
            out.done.append(blk.exact and small and close)
            out.noisy.append(not blk.exact and st.predicted <= blk.noise)
            out.stage_done.append(0.5 * st.decrement ** 2 <= 0.1 * state.width)
        out.radius[b] = tr.radius
        out.models.append("pass" if blk.f_at is not None else "round")
    return out


@one_blas_thread
def round_update(prog: Program, state: NewtonState, stats: RoundStats) -> NewtonState:
    """The step of a round whose statistics are ``stats`` (see the module docstring)."""
    blocks = analyse(prog, state, stats)
    if not blocks:
        return replace(state, round=state.round + 1, strides=(*state.strides, state.stride))
    ledger = stats.cache[id(state)][1]
    theta = state.theta
    _B, m, cv, _L = prog.dims(theta)
    exact = all(blk.exact for blk in blocks)
    memory = _lbfgs_memory(prog, state, blocks, m, exact) if cv.kind == "lbfgs" else []
    if memory and not state.scale:
        state = replace(state, scale=tuple(diagonal(blk.h[:m] + prog.reg(m))
                                           for blk in blocks))
    st = _step_blocks(prog, state, blocks, cv, memory)
    few_rows = cv.kind == "full" and stats.rows < ROWS_PER_PARAMETER * m
    full = state.full or few_rows or all(n or d for n, d in zip(st.noisy, st.done,
                                                                   strict=True))
    width, converged, new_theta, new_pending = state.width, all(st.done), st.theta, st.pending
    if converged and prog.smoothed:
        # The point that passed the test is returned, not one more (unverified) step:
        # where a smoothed hinge is nearly flat a Newton step can be long though it
        # promises little, and nothing would check it. Smooth losses take the last step:
        # it promises at most tol / 100 and, on their exact model, makes the remaining
        # gap second order in it (measured: 300 000 x 50 logistic, relative gap 2.4e-6 ->
        # 2e-11, where scikit-learn's default fit stops at 8e-8).
        new_theta = theta.copy()
    new_theta = prog.project(new_theta)
    keep_from = min((min(t.done_since, t.open_since) for _p, t in ledger.tracks),
                    default=state.round)
    anchors = tuple((r, a) for r, a in (*state.anchors, (state.round, theta))
                    if r >= keep_from)[-64:]
    if prog.smoothed and width > prog.min_width:
        converged = False
        if all(st.stage_done):
            # Next stage of the continuation: a narrower smoothing is a new function,
            # so the pass statistics and the pending ratio tests start over.
            width = max(width / prog.width_factor, prog.min_width)
            ledger, new_pending, anchors = ledger.reset(), [None] * len(blocks), ()
            new_theta = theta.copy()  # the step was for the old width; nothing checks it
            memory, exact = [()] * len(memory), False
    return replace(
        state, stride=next_stride(prog, state, stats, cv), clock=time.perf_counter(),
        strides=(*state.strides, state.stride),
        theta=new_theta, round=state.round + 1, ledger=ledger,
        radius=tuple(st.radius), pending=tuple(new_pending), anchors=anchors, width=width,
        converged=converged, model=tuple(st.models), full=full,
        help=state.help or st.rejected,
        probe=new_theta - theta if memory and not exact else None,
        secant=(theta, np.stack([blk.g for blk in blocks])) if memory and exact else None,
        memory=tuple(memory),
    )
