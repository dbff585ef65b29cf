"""L1 and elastic-net penalties on the Newton programs: proximal Newton steps on the driver.

The smooth part of the objective (the loss, plus an L2 penalty) keeps the statistics of
:class:`~daskabsp.programs.LinearNewton` and :class:`~daskabsp.programs.MultinomialNewton`:
per round the loss, gradient and Hessian (or, for large models, the Hessian's diagonal and a
Hessian-vector product) of the rows the round counted, all additive over rows. A partial
A-BSP round therefore gives a sub-sampled model of the smooth part, as for the smooth
programs. The L1 term is not a row sum: it is applied on the driver, in the step.

* **Full Hessian** (up to ``max_hessian`` parameters): the proximal Newton step (Lee, Sun and
  Saunders, SIAM J. Optim. 2014) minimises the quadratic model of the smooth part plus the
  exact L1 term, solved to machine precision by :func:`~daskabsp.programs.l1.l1_quadratic`;
  its solution sets coefficients exactly to zero.
* **L-BFGS** (larger models): orthant-wise quasi-Newton steps (OWL-QN: Andrew and Gao, ICML
  2007; Spark MLlib's L1 solver): the L-BFGS direction of the pseudo-gradient, kept in the
  orthant of the current point, its components that cross zero set to zero. The pairs come
  from Hessian-vector products with the last step, as for the smooth programs.

Both are scaled back to a trust region (in the model's norm) whose ratio test compares the
decrease the model predicted, L1 term included, with the decrease the next round measured
(as :mod:`~daskabsp.programs.newton`). A partial round's model is noisy; once a round's step
promises less than its sampling noise, or fewer rows than ten per parameter were counted, the
rounds become full rounds (every row, :meth:`~daskabsp.programs.Program.full_round`): the
support (which coefficients are zero) is settled on statistics covering every row.

Stopping, on a full round: every coefficient's violation of the optimality conditions
(:func:`~daskabsp.programs.l1.kkt_violation`, the smooth gradient against the L1
subdifferential) at most ``tol``, and the full step's predicted decrease at most
``tol / 100``; the step from that exact model is then taken (it promises at most ``tol /
100``, and fixes the support the model's exact minimiser has).

Under SSP and ASP each partition's latest statistics are kept as a Taylor model around the
parameters they were taken at (:func:`~daskabsp.programs.incremental.model_form`), and each
update takes the proximal step of their sum, as the smooth programs do (diagonal curvature
for models above ``max_hessian``).
"""

from __future__ import annotations

import math
from copy import copy as shallow_copy
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from .aggregate import Piece, previous, put_piece, rows_of, total
from .base import PartitionStats
from .curvature import add_pair, diagonal, lbfgs_solve, lbfgs_times
from .cycles import RoundStats
from .incremental import model_form
from .l1 import kkt_violation, l1_quadratic, soft_threshold
from .linear import LinearNewton
from .multinomial import MultinomialNewton
from .newton_state import ROWS_PER_PARAMETER, TaskParams
from .trust_region import TrustRegion, one_blas_thread, round_noise

#: The full step's predicted decrease must be at most this times ``tol`` to stop (as the
#: smooth Newton programs' decrement test).
DECREMENT = 1e-2
#: The step's model is minimised to an optimality violation of this times ``tol`` (relative
#: to the model's scale): far below what the stopping test asks of the fit, and reachable
#: by coordinate descent also when collinear features make the model nearly singular
#: (where a 1e-10 target took 20 000 sweeps and seconds).
SUBPROBLEM_TOL = 1e-4
#: SSP/ASP: relative error of a partition's old model at its new parameters (against the
#: curvature term of the move) above which the radius shrinks, and below which it may grow.
_BAD, _GOOD = 0.5, 0.1


@dataclass(frozen=True, eq=False)
class StepModel:
    """A block's model of the objective around ``theta`` and its step, to be scaled to a
    trust radius: the quadratic model of the smooth part plus the exact L1 term.

    Attributes
    ----------
    theta : ndarray
        Where the model is taken.
    grad : ndarray
        Gradient of the smooth part (L2 penalty included).
    lam : ndarray
        L1 weight of each parameter.
    direction : ndarray
        The full step (proximal Newton) or the orthant-wise direction (OWL-QN).
    hess : ndarray or None
        Full Hessian of the smooth part (penalty included); None for quasi-Newton.
    d0, pairs
        Quasi-Newton: the initial diagonal and the L-BFGS pairs.
    orthant : ndarray or None
        Quasi-Newton: the sign each parameter may take (0: must stay zero).
    slope : float
        Quasi-Newton: the derivative of the model along ``direction`` at ``theta`` (the
        pseudo-gradient times the direction; negative).
    free : ndarray or None
        The parameters the step may move (a boolean mask or indices; the rest stay where
        they are); ``hess``, ``d0`` and ``pairs`` are restricted to them.
    """

    theta: np.ndarray
    grad: np.ndarray
    lam: np.ndarray
    direction: np.ndarray
    hess: np.ndarray | None = None
    d0: np.ndarray | None = None
    pairs: tuple = ()
    orthant: np.ndarray | None = None
    slope: float = 0.0
    free: np.ndarray | None = None

    def times(self, v: np.ndarray) -> np.ndarray:
        """The model's curvature times ``v``."""
        if self.free is None:
            return self.hess @ v if self.hess is not None else \
                lbfgs_times(self.pairs, self.d0, v)
        sub = v[self.free]
        out = np.zeros_like(v)
        out[self.free] = self.hess @ sub if self.hess is not None else \
            lbfgs_times(self.pairs, self.d0, sub)
        return out

    def predicted(self, delta: np.ndarray) -> float:
        """Decrease of the model along ``delta``."""
        th = self.theta
        l1 = float(self.lam @ (np.abs(th + delta) - np.abs(th)))
        return -(float(self.grad @ delta) + 0.5 * float(delta @ self.times(delta)) + l1)

    def step(self, radius: float) -> tuple[np.ndarray, float, float]:
        """The step scaled to ``radius`` (in the model's norm): ``(delta, predicted decrease,
        length)``."""
        d = self.direction
        curv = max(float(d @ self.times(d)), 0.0)
        length = math.sqrt(curv)
        t = 1.0 if length <= radius else radius / length
        if self.orthant is not None and curv > 0:
            # The quasi-Newton direction with the non-descending components dropped is not
            # the model's minimiser: go to the minimum of the model along it.
            t = min(t, -self.slope / curv)
        if self.orthant is None:
            delta = t * d
        else:
            x = self.theta + t * d
            x[np.sign(x) != self.orthant] = 0.0
            delta = x - self.theta
            length = math.sqrt(max(float(delta @ self.times(delta)), 0.0))
            return delta, self.predicted(delta), length
        return delta, self.predicted(delta), t * length


@dataclass(frozen=True)
class _Pending:
    """A step taken last round, to be judged by this round's objective."""

    model: StepModel
    f: float
    predicted: float
    length: float
    noise: float
    exact: bool


@dataclass(frozen=True)
class ProximalState:
    """Driver state of a proximal program.

    Attributes
    ----------
    theta : ndarray of shape (n_blocks, n_params)
        Parameters of each block.
    n_rows : int
        Rows of the data.
    """

    theta: np.ndarray
    n_rows: int
    round: int = 0
    radius: tuple[float, ...] | None = None
    pending: tuple[_Pending | None, ...] | None = None
    full: bool = False
    converged: bool = False
    #: Quasi-Newton: the step each block took last (multiplied by the Hessian by the next
    #: round's partitions), and each block's memory of pairs.
    probe: np.ndarray | None = None
    memory: tuple = ()
    #: The largest optimality violation (``kkt_violation``) of the last round's model.
    violation: float = math.inf
    #: The last round over every row: the parameters it was taken at, and per block the
    #: mean loss and its gradient there (no penalty), e.g. for a duality gap.
    last_exact: tuple | None = None
    #: Large models near their optimum: the parameters whose Hessian block the next round
    #: computes (their support and the violators; sorted indices).
    support: np.ndarray | None = None
    #: SSP/ASP: each partition's latest model, the radius metric and the objective.
    pieces: tuple[Piece, ...] = ()
    metric: tuple = ()
    objective: float = math.nan


@dataclass
class _Block:
    f: float
    grad: np.ndarray
    curv: Any  # full: Hessian (m, m); quasi-Newton: (diagonal, Hessian-vector product)
    noise: float
    exact: bool
    #: The loss alone (no penalty): its mean and gradient.
    loss: float = math.nan
    loss_grad: np.ndarray | None = None
    #: The Hessian block of ``ProximalState.support`` (when the round computed it).
    support_hess: np.ndarray | None = None


class ProximalClocks:
    """SSP and ASP on a proximal program: each partition's update applied as it arrives
    (the base of :class:`ProximalMixin`, which supplies the rest of the program)."""

    @one_blas_thread
    def partition_update(self, state: ProximalState, piece: PartitionStats, params,
                         staleness: int) -> ProximalState:
        """SSP/ASP: the proximal step of the sum of every partition's latest Taylor model
        (see the module docstring), inside a trust region whose radius follows how well a
        partition's old model predicted its new statistics."""
        theta_p = np.asarray(params[0])
        stats = self.combine_round([piece], params).total
        if self.curvature(state.theta.shape[1]).kind != "full":
            return _swept(self, state, Piece(piece.partition, piece.rows, stats, theta_p))
        new = Piece(piece.partition, piece.rows, model_form(self, stats, theta_p), theta_p)
        old = previous(state.pieces, piece.partition)
        pieces = put_piece(state.pieces, new)
        agg = total(pieces)
        theta = state.theta
        B, m = theta.shape
        full = self.curvature(m).kind == "full"
        reg, lam = self.reg(m), self.l1_weights(m)
        blocks = _summed_blocks(self.block_views(agg, theta), float(agg[1]), theta, reg, lam,
                                full)
        metric = state.metric or tuple(
            (b.curv + np.diag(reg)) if full else (b.curv + reg) for b in blocks)
        radius = list(state.radius or [self.initial_radius(b.f) for b in blocks])
        if old is not None:
            _judge(radius, old, new, metric, self.block_views(old.stats, theta),
                   self.block_views(new.stats, theta), full)
        current = rows_of(pieces) >= state.n_rows
        steps, full_steps, done = [], [], []
        for b, blk in enumerate(blocks):
            if full:
                A = self._flat_fixed(blk.curv + np.diag(reg))
                x = l1_quadratic(A, A @ theta[b] - blk.grad, lam, theta[b],
                                 positive=self.bounded(m), recentre=self.recentre,
                                 tol=SUBPROBLEM_TOL * self.tol)
                model = StepModel(theta[b], blk.grad, lam, x - theta[b], hess=A)
            else:
                a = blk.curv + reg
                x = soft_threshold(theta[b] - blk.grad / a, lam / a, self.bounded(m))
                model = StepModel(theta[b], blk.grad, lam, x - theta[b], d0=a)
            s = model.direction
            Ms = metric[b] @ s if full else metric[b] * s
            length = math.sqrt(max(float(s @ Ms), 0.0))
            t = 1.0 if length <= radius[b] else radius[b] / length
            steps.append(t * s)
            full_steps.append(s)
            kkt = float(kkt_violation(theta[b], blk.grad, lam, self.bounded(m)).max())
            done.append(kkt <= self.tol
                        and model.predicted(s) <= DECREMENT * self.tol)
        if not state.metric and not current:
            metric = ()  # fixed once every partition has reported
        # Every partition's model taken near enough that its Taylor error is below what the
        # decrement test asks (a looser bound, 10 tol, left relative gaps up to 1e-6).
        close = self.quadratic or all(
            _near(q.params[b] - theta[b], blocks[b].curv, reg, full, DECREMENT * self.tol)
            for q in pieces for b in range(B))
        converged = current and all(done) and close
        if converged:  # the whole steps of the summed model (see ``update``)
            steps = full_steps
        new_theta = self.project(theta + np.stack(steps))
        return replace(state, theta=new_theta, round=state.round + 1, radius=tuple(radius),
                       converged=converged, pieces=pieces, metric=metric,
                       objective=float(sum(b.f for b in blocks)), probe=None, full=False)

    def partition_objective(self, state: ProximalState, piece: PartitionStats,
                            params) -> float:
        """The summed model's objective at the parameters before the update."""
        return state.objective


# -- SSP and ASP: the summed model of the partitions' latest models -------------------------


class ProximalMixin(ProximalClocks):
    """The proximal update rule, on a Newton program's statistics (see the module
    docstring). Mixed in before :class:`~daskabsp.programs.LinearNewton` or
    :class:`~daskabsp.programs.MultinomialNewton`, whose statistics it keeps; the host
    defines ``l1`` (the L1 weight of the coefficients, mean scale), ``positive`` and
    :meth:`penalised`."""

    l1: float
    positive: bool
    start_memory: tuple | None

    def penalised(self, m: int) -> np.ndarray:
        """Which of a block's ``m`` parameters carry the L1 penalty (not the intercepts)."""
        raise NotImplementedError

    #: See :func:`~daskabsp.programs.l1.l1_quadratic`'s ``recentre``: None for models that
    #: change along every direction.
    recentre = None

    def l1_weights(self, m: int) -> np.ndarray:
        return np.where(self.penalised(m), float(self.l1), 0.0)

    def bounded(self, m: int) -> np.ndarray | bool:
        """Which of a block's ``m`` parameters ``positive`` bounds at zero: the penalised
        coefficients, never an intercept (False: none)."""
        return self.penalised(m) if self.positive else False

    # -- the Program contract ---------------------------------------------------------------

    def init(self, n_features: int, n_rows: int) -> ProximalState:
        B, m = self.shape(n_features)
        theta = np.zeros((B, m)) if self.start is None else \
            np.array(self.start, dtype=np.float64).reshape(B, m)
        lbfgs = self.curvature(m).kind == "lbfgs"
        memory = ((),) * B if lbfgs else ()
        if lbfgs and self.start_memory is not None and len(self.start_memory) == B and all(
                s.shape == (m,) for pairs in self.start_memory for s, _y in pairs):
            memory = tuple(tuple(pairs) for pairs in self.start_memory)
        theta = self.project(theta)
        return ProximalState(theta=theta, n_rows=n_rows,
                             full=not lbfgs and n_rows < ROWS_PER_PARAMETER * m,
                             memory=memory,
                             support=None if self.start is None else self.start_support(theta))

    def params(self, state: ProximalState):
        if state.support is not None:
            # Every row once the last step promised at most ``tol``: the round that may end
            # the fit takes its whole step from the exact block (from a sampled one, a 200 000
            # x 100 000 text fit stopped 3e-9 above scikit-learn's objective).
            near = state.pending is not None and all(
                p is not None and p.predicted <= self.tol for p in state.pending)
            stride = 1 if near else self.support_stride(state.n_rows, state.support.shape[0])
            return state.theta, 0.0, state.probe, (state.support, stride)
        return state.theta, 0.0, state.probe

    def full_round(self, state: ProximalState) -> bool:
        return state.full

    def help_round(self, state: ProximalState) -> bool:
        return state.full

    def converged(self, state: ProximalState) -> bool:
        return state.converged

    def objective(self, state: ProximalState, stats: RoundStats, n_rows: int) -> float:
        blocks = self._blocks(state, stats)
        return float(sum(b.f for b in blocks)) if blocks else math.nan

    def _flat_fixed(self, A: np.ndarray) -> np.ndarray:
        """``A`` made definite along the directions the objective does not depend on (the
        sum of a multinomial model's unpenalised intercepts): the gradient and the L1 term
        do not involve them, so adding ``v v^T`` (scaled like ``A``) only picks, among the
        model's minimisers, the step without a component along them."""
        flat = self.curvature(A.shape[0]).flat
        if flat:
            idx = np.asarray(flat)
            A[np.ix_(idx, idx)] += np.trace(A) / A.shape[0] / len(idx)
        return A

    # -- the rounds -------------------------------------------------------------------------

    def _blocks(self, state: ProximalState, rs: RoundStats) -> list[_Block]:
        """Each block's objective (L1 included), smooth gradient and curvature from the
        round's statistics (cached on ``rs``: ``objective`` and ``update`` share them)."""
        key = ("proximal", id(state))
        if key in rs.cache:
            return rs.cache[key]
        theta = state.theta
        W = float(rs.total[1]) if rs.rows else 0.0
        if W <= 0:
            rs.cache[key] = []
            return []
        m = theta.shape[1]
        full = self.curvature(m).kind == "full"
        reg, lam = self.reg(m), self.l1_weights(m)
        out = []
        support = self.support_block(rs.total, theta, state.support)
        for b, (loss, sq, _rep, g, h) in enumerate(self.block_views(rs.total, theta)):
            th = theta[b]
            f = loss[0] / W + 0.5 * th @ (reg * th) + lam @ np.abs(th)
            curv = h.reshape(m, m) / W if full else (h[:m] / W, h[m:] / W)
            out.append(_Block(float(f), g / W + reg * th, curv,
                              round_noise(loss[0], sq[0], W, rs.rows, state.n_rows),
                              rs.rows >= state.n_rows, float(loss[0] / W), g / W,
                              None if support is None else support / W))
        rs.cache[key] = out
        return out

    def _step_model(self, theta: np.ndarray, blk: _Block, pairs,
                    support: np.ndarray | None = None) -> StepModel:
        """The block's proximal Newton (full Hessian, or the block of ``support``) or OWL-QN
        (L-BFGS) model and step."""
        m = theta.shape[0]
        reg, lam = self.reg(m), self.l1_weights(m)
        if blk.support_hess is not None:
            # Proximal Newton on the support block: the other parameters are zero and stay
            # there (none of them violates the optimality conditions enough to be in it).
            S = support
            A = blk.support_hess + np.diag(reg[S])
            x = l1_quadratic(A, A @ theta[S] - blk.grad[S], lam[S], theta[S],
                             positive=self.bounded(m)[S] if self.positive else False,
                             tol=SUBPROBLEM_TOL * self.tol)
            d = np.zeros_like(theta)
            d[S] = x - theta[S]
            return StepModel(theta, blk.grad, lam, d, hess=A, free=S)
        if not isinstance(blk.curv, tuple):
            A = self._flat_fixed(blk.curv + np.diag(reg))
            x = l1_quadratic(A, A @ theta - blk.grad, lam, theta, positive=self.bounded(m),
                             recentre=self.recentre, tol=SUBPROBLEM_TOL * self.tol)
            return StepModel(theta, blk.grad, lam, x - theta, hess=A)
        pg = pseudo_gradient(theta, blk.grad, lam, self.bounded(m))
        # The quasi-Newton model on the parameters that may move: the others are held at
        # zero, so the curvature that matters is the free block's. The pairs restricted to
        # it stay exact for a quadratic while the zero set does not change (their steps
        # are zero off it), and the step is then the L-BFGS step of the free block.
        free = (theta != 0) | (pg != 0)
        d0 = diagonal(blk.curv[0] + reg)[free]
        sub = tuple(p for p in ((s[free], y[free]) for s, y in pairs)
                    if float(p[0] @ p[1]) > 1e-12 * float(p[0] @ p[0]))
        d = np.zeros_like(theta)
        d[free] = -lbfgs_solve(sub, d0, pg[free])
        d[d * pg >= 0] = 0.0  # only where the pseudo-gradient descends
        orthant = np.sign(theta)
        zero = theta == 0
        orthant[zero] = np.sign(-pg[zero])
        if self.positive:
            bound = self.penalised(m)
            orthant[bound] = np.maximum(orthant[bound], 0.0)
        return StepModel(theta, blk.grad, lam, d, d0=d0, pairs=sub, orthant=orthant,
                         slope=float(pg @ d), free=free)

    @one_blas_thread
    def update(self, state: ProximalState, stats: RoundStats, n_rows: int) -> ProximalState:
        blocks = self._blocks(state, stats)
        if not blocks:
            return replace(state, round=state.round + 1)
        theta = state.theta
        B, m = theta.shape
        lbfgs = self.curvature(m).kind == "lbfgs"
        memory = self._remember(state, blocks, m) if lbfgs else list(state.memory)
        pending = state.pending or (None,) * B
        radius = list(state.radius or [self.initial_radius(b.f) for b in blocks])
        new = theta.copy()
        new_pending, done, noisy, violation = [], [], [], 0.0
        for b, blk in enumerate(blocks):
            tr, keep, p = TrustRegion(radius[b]), True, pending[b]
            if p is not None and p.exact == blk.exact:
                tr, keep = tr.judge(p.f - blk.f, p.predicted, p.length,
                                    noise=max(p.noise, blk.noise, 1e-2 * self.tol))
            radius[b] = tr.radius
            if not keep:  # take the step back, retry a shorter one from where it started
                delta, pred, length = p.model.step(tr.radius)
                new[b] = p.model.theta + delta
                new_pending.append(replace(p, predicted=pred, length=length))
                done.append(False)
                noisy.append(False)
                continue
            model = self._step_model(theta[b], blk, memory[b] if lbfgs else (),
                                     state.support)
            delta, pred, length = model.step(tr.radius)
            full_delta, full_pred, _ = model.step(math.inf)
            kkt = float(kkt_violation(theta[b], blk.grad, model.lam,
                                      self.bounded(theta.shape[1])).max())
            violation = max(violation, kkt)
            # A quadratic's model over every row is the objective itself: its exact step
            # (not scaled back) lands on the optimum.
            exact_step = self.quadratic and not lbfgs and pred == full_pred
            finished = blk.exact and (exact_step or (kkt <= self.tol
                                                     and full_pred <= DECREMENT * self.tol))
            if finished:
                # The last step is the whole step of a model of every row at a point that
                # passed the test (a trust radius would leave a gap of up to its promise).
                delta, pred = full_delta, full_pred
            new[b] = theta[b] + delta
            new_pending.append(_Pending(model, blk.f, pred, length, blk.noise, blk.exact))
            done.append(finished)
            noisy.append(not blk.exact and pred <= blk.noise)
        few_rows = not lbfgs and stats.rows < ROWS_PER_PARAMETER * m
        full = state.full or few_rows or all(n or d for n, d in zip(noisy, done, strict=True))
        new = self.project(new)
        support = self.next_support(state, blocks, new)
        last = state.last_exact
        if blocks[0].exact:
            last = (theta, tuple((b.loss, b.loss_grad) for b in blocks))
        return replace(
            state, theta=new, round=state.round + 1, radius=tuple(radius),
            pending=tuple(new_pending), full=full, converged=all(done),
            probe=(new - theta) if lbfgs else None, memory=tuple(memory),
            violation=violation, last_exact=last, support=support)

    def _remember(self, state: ProximalState, blocks, m: int) -> list:
        """Each block's L-BFGS memory with the pair of the last step (its probe), if any."""
        memory = list(state.memory)
        if state.probe is not None:
            reg = self.reg(m)
            for b, blk in enumerate(blocks):
                s = state.probe[b]
                memory[b] = add_pair(memory[b], s, blk.curv[1] + reg * s)
        return memory

    # -- the support block of large models ---------------------------------------------------

    def support_block(self, stats: np.ndarray, theta: np.ndarray,
                      support: np.ndarray | None) -> np.ndarray | None:
        """The Hessian block of ``support`` summed in ``stats`` (None when the round did not
        compute one). Programs without support statistics return None."""
        return None

    def start_support(self, theta: np.ndarray) -> np.ndarray | None:
        """The support block of a warm start's first round (none by default)."""
        return None

    def support_stride(self, n_rows: int, k: int) -> int:
        """The support block of ``k`` parameters over ``n_rows`` rows is estimated from
        every this many rows of each chunk: up to :data:`SUPPORT_STRIDE`, keeping
        :data:`SUPPORT_ROWS_PER_PARAMETER` rows per parameter; every row for a quadratic
        (whose exact block makes its step exact)."""
        if self.quadratic:
            return 1
        return int(min(SUPPORT_STRIDE, max(1, n_rows // (SUPPORT_ROWS_PER_PARAMETER * k))))

    def next_support(self, state: ProximalState, blocks: list[_Block],
                     new: np.ndarray) -> np.ndarray | None:
        """The parameters whose Hessian block the next round computes (programs without
        support statistics: none)."""
        return None


def _swept(prog, state: ProximalState, new: Piece) -> ProximalState:
    """SSP/ASP above the Hessian limit, as the Newton programs' (L-BFGS curvature has no
    Taylor model of a partition to sum): the parameters are held until every partition
    has reported at them, then the rounds' step is taken on those statistics (their
    probe's Hessian-vector products included)."""
    pieces = put_piece(state.pieces, new)
    # pieces taken at other parameters may have statistics of another length (a support
    # block); they are stale, and the step waits for fresh ones anyway
    like = [q for q in pieces if np.shape(q.stats) == np.shape(new.stats)]
    parts = [PartitionStats(q.partition, 0, q.rows, q.rows, q.stats) for q in like]
    rs = RoundStats.of(parts, total(like))
    # the partitions' latest losses (each at its own parameters), the penalty at theta
    held = replace(state, pieces=pieces,
                   objective=sum(b.f for b in prog._blocks(state, rs)) or math.nan)
    if rows_of(pieces) < state.n_rows or any(
            not np.array_equal(q.params, state.theta) for q in pieces):
        return held
    return prog.update(held, rs, state.n_rows)


def _summed_blocks(views, W: float, theta: np.ndarray, reg: np.ndarray, lam: np.ndarray,
                   full: bool) -> list[_Block]:
    """Each block's objective (L1 included), gradient and curvature at ``theta`` of the
    summed Taylor models (``views``: their blocks, :func:`model_form`; ``W``: their weight);
    a diagonal curvature for models above ``max_hessian``."""
    m = theta.shape[1]
    blocks = []
    for b, (c, _s, _r, lin, h) in enumerate(views):
        th = theta[b]
        H = h.reshape(m, m) / W if full else diagonal(h[:m] / W + reg) - reg
        Hth = H @ th if full else H * th
        f = (c[0] + lin @ th) / W + 0.5 * th @ Hth + 0.5 * th @ (reg * th) + lam @ np.abs(th)
        blocks.append(_Block(float(f), lin / W + Hth + reg * th, H, 0.0, True))
    return blocks


def _near(d: np.ndarray, H: np.ndarray, reg: np.ndarray, full: bool, bound: float) -> bool:
    """The curvature term of a move ``d`` (penalty included) is at most ``bound``."""
    quad = float(d @ (H @ d)) if full else float(d @ (H * d))
    return 0.5 * (quad + float(d @ (reg * d))) <= bound


def _judge(radius: list[float], old: Piece, new: Piece, metric, old_views, new_views,
           full: bool) -> None:
    """Shrink (or let grow) each block's radius from the old model's error at the new
    model's parameters, against the curvature term of that move (in place; ``old_views``
    and ``new_views``: the two models' blocks)."""
    m = new.params.shape[1]
    for b in range(len(radius)):
        x = new.params[b]
        d = x - old.params[b]
        (c0, _s, _r, l0, h0), (c1, _s1, _r1, l1, h1) = old_views[b], new_views[b]
        H0 = h0.reshape(m, m) if full else h0[:m]
        H1 = h1.reshape(m, m) if full else h1[:m]

        def value(c, lin, H, x=x):
            return float(c[0] + lin @ x + 0.5 * x @ (H @ x if full else H * x))

        quad = 0.5 * float(d @ (H0 @ d if full else H0 * d))
        if not quad > 1e-12 * max(abs(float(c1[0])), 1.0):
            continue
        ratio = abs(value(c1, l1, H1) - value(c0, l0, H0)) / quad
        Md = metric[b] @ d if full else metric[b] * d
        length = math.sqrt(max(float(d @ Md), 0.0))
        if ratio > _BAD:
            radius[b] = min(radius[b], 0.5 * length)
        elif ratio < _GOOD:
            radius[b] = max(radius[b], 2.0 * length)


def pseudo_gradient(x: np.ndarray, grad: np.ndarray, lam: np.ndarray,
                    positive: bool | np.ndarray = False) -> np.ndarray:
    """The pseudo-gradient of ``f(x) + sum lam |x|`` (OWL-QN): the gradient plus the L1
    term's slope on non-zero coordinates; at zero, the one-sided slope that descends, or 0
    when neither does."""
    pg = grad + lam * np.sign(x)
    zero = x == 0
    up, down = grad + lam, grad - lam
    at0 = np.where(up < 0, up, np.where(down > 0, down, 0.0))
    if np.ndim(positive) or positive:  # a bound at zero: only an increase may descend
        at0 = np.where(positive, np.minimum(up, 0.0), at0)
    pg[zero] = at0[zero]
    return pg


#: Largest support (coefficients) whose Hessian block large models compute near their optimum
#: (see :class:`ProximalLinear`): 512^2 floats, 2 MiB per task.
SUPPORT_LIMIT = 512
#: The support block is estimated from every this many rows at most (scaled to all of them):
#: its sparse product costs the square of each row's entries in the support, and on text
#: rows (whose frequent words are the support) it cost 5x a round's other work at 512
#: parameters; with every fourth row the fit took as many rounds.
SUPPORT_STRIDE = 4
#: ... while keeping at least this many rows per parameter of the block.
SUPPORT_ROWS_PER_PARAMETER = 50


class SupportParams(NamedTuple):
    """A round's parameters with the support whose Hessian block it computes, from every
    ``stride``-th row."""

    task: TaskParams
    support: np.ndarray
    stride: int = 1


@dataclass
class ProximalLinear(ProximalMixin, LinearNewton):
    """A binary linear model (logistic, or squared loss) with L1 and L2 penalties, by
    proximal Newton steps (see the module docstring).

    Minimises, on the mean scale, ``sum_i s_i loss_i / sum_i s_i + l1 ||w||_1 + l2 / 2
    ||w||^2``; the intercept is not penalised. scikit-learn's
    ``LogisticRegression(l1_ratio=r, C=C)`` gives ``l1 = r / (C sum_i s_i)`` and ``l2 = (1 -
    r) / (C sum_i s_i)``; ``ElasticNet(alpha, l1_ratio=r)`` (``loss="squared"``) gives ``l1 =
    alpha r``, ``l2 = alpha (1 - r)``.

    Parameters
    ----------
    l1 : float, default=0.0
        L1 penalty on the coefficients.
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    start_memory : tuple or None, default=None
        Per block, L-BFGS pairs ``(s, y)`` to start from (a warm start: the memory a
        previous fit ended with, ``state.memory``); used when the model is above
        ``max_hessian`` and the pairs have its size.
    start_gradient : ndarray or None, default=None
        The loss's mean gradient (no penalty) near ``start`` on the same rows (a warm
        start: the previous fit's ``state.last_exact``), from which the first round's
        support block also takes the coefficients the new penalty lets move.
    loss, n_blocks, l2, l2_intercept, fit_intercept, tol, max_hessian, hessian_stride, start
        See :class:`~daskabsp.programs.LinearNewton` (``loss`` "logistic" or "squared").

    Examples
    --------
    >>> from daskabsp.programs import ProximalLinear
    >>> ProximalLinear(loss="logistic", l1=1e-3).name
    'logreg-l1'
    """

    l1: float = 0.0
    positive: bool = False
    start_memory: tuple | None = field(default=None, repr=False)
    start_gradient: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in ("logistic", "squared"):
            raise ValueError(f"ProximalLinear fits the 'logistic' or 'squared' loss, not "
                             f"{self.loss!r}.")

    @property
    def name(self) -> str:  # type: ignore[override]
        return {"logistic": "logreg-l1", "squared": "lasso"}[self.loss]

    def penalised(self, m: int) -> np.ndarray:
        mask = np.ones(m, dtype=bool)
        if self.fit_intercept:
            mask[-1] = False
        return mask

    # -- large models: the Hessian block of the support -----------------------------------
    #
    # Above ``max_hessian`` the rounds take orthant-wise L-BFGS steps, whose convergence is
    # linear (measured on 200 000 x 100 000 text rows: the objective's excess halved about
    # every round). Once the support is small, the rounds also sum the Hessian of the
    # support and of the coefficients that violate the optimality conditions, a block of at
    # most ``SUPPORT_LIMIT`` parameters, and the step is proximal Newton on it: the quadratic
    # convergence of the small models (the scheme of newGLMNET, Yuan, Ho and Lin, JMLR
    # 2012, without its inner line search).

    def _base_params(self, params):
        return params[:3] if len(params) == 4 else params

    def new_stats(self, params) -> np.ndarray:
        base = super().new_stats(self._base_params(params))
        if len(params) != 4:
            return base
        k = len(params[3][0])
        return np.concatenate([base, np.zeros(k * k)])

    def prepare(self, params):
        if isinstance(params, (SupportParams, TaskParams)):
            return params
        if len(params) == 4:  # (theta, width, probe, (support, stride))
            support, stride = params[3]
            return SupportParams(super().prepare(params[:3]), np.asarray(support),
                                 int(stride))
        return super().prepare(params)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        if not isinstance(params, SupportParams):
            super().accumulate(acc, params, X, y, sample_weight)
            return
        tp, S, stride = params
        L = acc.shape[0] - S.shape[0] ** 2
        d2 = self._accumulate(acc[:L], tp, X, y, sample_weight)[:, 0]
        d = X.shape[1]
        cols = S[d > S]
        k = S.shape[0]
        H = acc[L:].reshape(k, k)
        n = X.shape[0]
        if stride > 1 and n >= stride:
            X, d2 = X[::stride], d2[::stride]
            d2 = d2 * (n / d2.shape[0])  # scaled to the chunk's rows
        XS = X[:, cols]
        kc = cols.shape[0]
        if sp.issparse(XS):
            weighted = shallow_copy(XS)  # the rows scaled by d2, sharing the index arrays
            weighted.data = XS.data * np.repeat(d2, np.diff(XS.indptr))
            H[:kc, :kc] += (XS.T @ weighted).toarray()
        else:
            H[:kc, :kc] += (XS * d2[:, None]).T @ XS
        if kc < k:  # the intercept
            side = np.asarray(XS.T @ d2).ravel()
            H[:kc, kc] += side
            H[kc, :kc] += side
            H[kc, kc] += d2.sum()

    def support_block(self, stats, theta, support):
        if support is None:
            return None
        base = super().new_stats((theta, 0.0, None)).shape[0]
        k = support.shape[0]
        if stats.shape[0] != base + k * k:
            return None
        return stats[base:].reshape(k, k)

    def start_support(self, theta):
        """A warm start's support (its non-zero coefficients, and the intercept): the path
        of a regularisation changes it little, so the first round already computes its
        Hessian block (coefficients that should join it are added from the next round)."""
        m = theta.shape[1]
        if self.curvature(m).kind != "lbfgs" or theta.shape[0] != 1:
            return None
        pen = self.penalised(m)
        nonzero = np.flatnonzero(pen & (theta[0] != 0))
        if not 0 < nonzero.size <= SUPPORT_LIMIT:
            return None
        S = np.union1d(nonzero, np.flatnonzero(~pen))
        g = self.start_gradient
        if g is not None and g.shape == (m,):
            grad = g + self.reg(m) * theta[0]
            S = np.union1d(S, self._violators(theta[0], grad, theta[0],
                                              SUPPORT_LIMIT - nonzero.size))
        return S.astype(np.intp)

    def _violators(self, theta: np.ndarray, grad: np.ndarray, new: np.ndarray,
                   room: int) -> np.ndarray:
        """Up to ``room`` penalised coefficients that are zero in ``new`` and violate the
        optimality conditions at ``theta`` (smooth gradient ``grad``), worst first."""
        m = theta.shape[0]
        kkt = kkt_violation(theta, grad, self.l1_weights(m), self.bounded(m))
        if room <= 0:
            return np.zeros(0, dtype=np.intp)
        zero = (new == 0) & self.penalised(m)
        worst = -np.where(zero, kkt, 0.0)
        if room < m:  # the worst ``room`` in linear time, then sorted
            top = np.argpartition(worst, room - 1)[:room]
            order = top[np.argsort(worst[top])]
        else:
            order = np.argsort(worst)
        return order[zero[order] & (kkt[order] > 0)]

    def next_support(self, state, blocks, new):
        m = new.shape[1]
        if self.curvature(m).kind != "lbfgs" or len(blocks) != 1:
            return None
        nonzero = tuple(np.flatnonzero(new[0][self.penalised(m)]).tolist())
        # Not waiting for the support to settle: on 200 000 x 100 000 text rows the
        # block from the first round with at most SUPPORT_LIMIT non-zeros (323, against
        # 164 at the optimum) ended the fit in 8 rounds where waiting took 12.
        if len(nonzero) > SUPPORT_LIMIT:
            return None
        violators = self._violators(state.theta[0], blocks[0].grad, new[0],
                                    SUPPORT_LIMIT - len(nonzero))
        S = sorted(set(nonzero) | set(violators.tolist()) | (
            {m - 1} if self.fit_intercept else set()))
        return np.asarray(S, dtype=np.intp)


@dataclass
class ProximalMultinomial(ProximalMixin, MultinomialNewton):
    """Multinomial logistic regression with L1 and L2 penalties, by proximal Newton steps
    (see the module docstring and :class:`ProximalLinear`).

    Parameters
    ----------
    l1 : float, default=0.0
        L1 penalty on the coefficients (every class's), not on the intercepts.
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    start_memory : tuple or None, default=None
        Per block, L-BFGS pairs to start from (see :class:`ProximalLinear`).
    n_classes, l2, l2_intercept, fit_intercept, tol, max_hessian, hessian_stride, start
        See :class:`~daskabsp.programs.MultinomialNewton`.

    Examples
    --------
    Three classes from two of three features: the L1 penalty leaves the third feature's
    coefficients at zero (one row per class, the intercepts last):

    >>> import numpy as np, daskabsp
    >>> from daskabsp.programs import ProximalMultinomial
    >>> X = np.random.default_rng(0).standard_normal((1_000, 3))
    >>> y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    >>> res = daskabsp.fit(ProximalMultinomial(n_classes=3, l1=0.05, l2=1e-3), X, y)
    >>> res.converged, res.coef.shape, bool((res.coef[:, 2] == 0).all())
    (True, (3, 4), True)
    """

    l1: float = 0.0
    positive: bool = False
    start_memory: tuple | None = field(default=None, repr=False)

    @property
    def name(self) -> str:  # type: ignore[override]
        return "softmax-l1"

    @property
    def recentre(self):  # type: ignore[override]
        """Without an L2 penalty the objective does not change when a feature's coefficients
        are shifted alike in every class (the probabilities do not): the L1 term is then
        smallest with each feature's coefficients centred on their median over the
        classes."""
        if self.l2 != 0 or self.n_classes < 3:
            return None
        K = self.n_classes
        intercept = self.fit_intercept

        def centre(x: np.ndarray) -> np.ndarray:
            W = x.reshape(K, -1).copy()
            cols = slice(0, W.shape[1] - 1) if intercept else slice(None)
            W[:, cols] -= np.median(W[:, cols], axis=0)
            return W.ravel()

        return centre

    def penalised(self, m: int) -> np.ndarray:
        p = m // self.n_classes
        per = np.ones(p, dtype=bool)
        if self.fit_intercept:
            per[-1] = False
        return np.tile(per, self.n_classes)
