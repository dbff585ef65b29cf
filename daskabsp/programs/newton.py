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
import time
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

import numpy as np

from .base import PartitionStats, Program
from .curvature import Curvature, add_pair
from .cycles import CycleLedger, RoundStats
from .trust_region import TrustRegion, one_blas_thread, trust_step

#: Header of the statistics: row count, weight sum, and the seconds a task's chunks spent on
#: the model's value and gradient and on its curvature (the cost model's measurements:
#: additive over chunks and partitions like the rest).
_HEAD = 4
#: Per block before the gradient: loss sum, weighted sum of squared losses, reported loss sum.
_BLOCK_HEAD = 3
#: The Newton decrement test is ``d^2 / 2 <= _DECREMENT * tol``: tighter than scikit-learn's
#: ``d^2 / 2 <= tol``, because the point that passes it is returned without a further step,
#: and ``d^2 / 2`` estimates its objective gap.
_DECREMENT = 1e-2
#: A round whose rows number fewer than this many per parameter of a block gives a
#: sub-sampled Newton model that fits its own rows rather than the data: such rounds do not
#: steer a full-Hessian fit (see :meth:`NewtonProgram.full_round`). L-BFGS steps take only
#: the round's gradient from its rows, and their curvature from many rounds.
ROWS_PER_PARAMETER = 10
#: Above this many multiply-adds of Hessian per round (``n_rows * m^2``, about a second of
#: one core's work) L-BFGS steps pay for the extra rounds they need (:func:`hessian_limit`).
HESSIAN_WORK = 4e9
#: Largest full Hessian per block (8 MiB of statistics per task).
MAX_HESSIAN = 1024
#: Blocks this small always get the full Hessian.
MIN_HESSIAN = 64
#: A Hessian estimated from ``n_H`` rows has a relative error of about ``sqrt(m / n_H)`` for
#: ``m`` parameters (Roosta-Khorasani and Mahoney, Math. Program. 2019): a sample of at least
#: this many rows per parameter keeps it near 0.1, where sub-sampled Newton still contracts
#: by about that factor a round (Byrd, Chin, Nocedal and Wu, SIAM J. Optim. 2011).
HESSIAN_ROWS_PER_PARAMETER = 100
#: Largest stride of the Hessian's rows (one row in this many).
MAX_STRIDE = 64
#: Round overhead assumed before one has been measured (Dask's per-round cost on 2 cores,
#: docs/engine.md: 20-40 ms).
ROUND_OVERHEAD = 0.03
#: Rounds a fit is expected to take with exact Newton steps, and the rounds a sub-sampled
#: Hessian adds (its contraction is linear, not quadratic; measured on 1M x 50 logistic, BSP:
#: 5 exact rounds, 5-6 with one row in 16; see :func:`choose_stride`).
NEWTON_ROUNDS = 5
SAMPLED_EXTRA_ROUNDS = 1
#: Largest spread (in the model's norm) of the points a pass model's pieces were computed at
#: for the pass model to be used while the round model still makes progress.
_NEAR = 0.2


def choose_stride(*, n_rows: int, m: int, grad_seconds: float, curv_seconds: float,
                  stride: int, overhead: float, rounds_left: float) -> int:
    """The stride of the Hessian's rows (1: the exact Hessian) that minimises the predicted
    time of the rest of a fit.

    The cost model is measured, not assumed: ``grad_seconds`` and ``curv_seconds`` are what the
    slowest task of the last round spent on the value and gradient and on the curvature at
    ``stride``, and ``overhead`` what the round cost beyond that task's compute. A round at
    stride ``k`` is predicted to take ``overhead + grad_seconds + curv_seconds * stride / k``.
    ``rounds_left`` rounds at stride 1 are compared with ``rounds_left + SAMPLED_EXTRA_ROUNDS``
    rounds at a larger stride, the largest whose sample still holds
    :data:`HESSIAN_ROWS_PER_PARAMETER` rows per parameter. So the exact Hessian is kept where
    it costs little next to a gradient pass (few features), where a round's overhead
    dominates, where the data are too few for a sample, and near the end of a fit.

    Parameters
    ----------
    n_rows : int
        Rows of the data.
    m : int
        Parameters per block.
    grad_seconds, curv_seconds : float
        Measured seconds of the slowest task's value-and-gradient and curvature work.
    stride : int
        Stride the measurement was taken at.
    overhead : float
        Measured seconds of a round beyond its slowest task's compute.
    rounds_left : float
        Rounds the fit is expected to need with exact Newton steps.
    """
    top = min(MAX_STRIDE, n_rows // max(HESSIAN_ROWS_PER_PARAMETER * m, 1))
    if top < 2 or rounds_left <= 0:
        return 1
    full_curv = curv_seconds * stride

    def predicted(k: int) -> float:
        extra = 0 if k == 1 else SAMPLED_EXTRA_ROUNDS
        return (rounds_left + extra) * (overhead + grad_seconds + full_curv / k)

    return min([1, *range(2, top + 1)], key=predicted)


def hessian_limit(n_rows: int) -> int:
    """The largest block (parameters) whose full Hessian pays for itself on ``n_rows`` rows.

    A full Hessian costs ``n_rows * m^2 / 2`` multiply-adds a round and reaches the optimum
    in a handful of rounds; L-BFGS steps cost about three gradient passes a round and need
    several times more rounds. Measured on 2 workers: a 10-class, 300-feature model on
    200 000 rows (``m`` = 3 010) took 41.9 s in 7 full-Hessian rounds and 15 s in 17 L-BFGS
    rounds, while scikit-learn's raw digits (1 797 rows, ``m`` = 650, badly scaled) need 10
    Newton rounds and over 100 L-BFGS ones. The limit keeps the Hessian while its work stays
    under :data:`HESSIAN_WORK` per round, always for blocks of at most :data:`MIN_HESSIAN`
    parameters, and never above :data:`MAX_HESSIAN`.

    Parameters
    ----------
    n_rows : int
        Rows of the data (all partitions).

    Returns
    -------
    int
        The largest number of parameters per block fitted with the full Hessian; larger
        blocks take L-BFGS steps from Hessian-vector products.
    """
    return int(min(MAX_HESSIAN, max(MIN_HESSIAN, math.sqrt(HESSIAN_WORK / max(n_rows, 1)))))


class TaskParams(NamedTuple):
    """A Newton program's round parameters as a partition task uses them
    (:meth:`NewtonProgram.prepare`)."""

    theta: np.ndarray
    width: float
    #: Whether the statistics hold L-BFGS curvature (diagonal, Hessian-vector product)
    #: rather than the full Hessian.
    lbfgs: bool
    #: L-BFGS: the step to multiply by the Hessian, or None (the round's pairs come from
    #: gradient differences).
    probe: np.ndarray | None
    #: The score coefficients, features x scores, C-contiguous: the parameters' scores
    #: first, then (L-BFGS) the probe's. Sparse products copy a non-contiguous operand, which
    #: per chunk costs as much as the chunk's rows when there are many features.
    coef_t: np.ndarray
    #: Intercept of each score (None without an intercept).
    intercept: np.ndarray | None
    #: Full Hessian only: the Hessian is estimated from rows ``offset, offset + stride, ...``
    #: of each chunk (stride 1: every row).
    stride: int = 1
    offset: int = 0


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
    #: Whether the rounds from now on cover every row (see :meth:`NewtonProgram.full_round`).
    full: bool = False
    #: Whether the rounds from now on are helped (see :meth:`NewtonProgram.help_round`).
    help: bool = False
    #: L-BFGS curvature only: the step each block took last, which this round's partitions
    #: multiply by their Hessian (after a partial round; None after a round over every row),
    #: the parameters and gradients of the last round over every row (for a pair from the
    #: difference of two such gradients, which costs the partitions nothing), and each
    #: block's memory of pairs.
    probe: np.ndarray | None = None
    secant: tuple[np.ndarray, np.ndarray] | None = None
    memory: tuple[tuple[tuple[np.ndarray, np.ndarray], ...], ...] = ()
    #: Full Hessian only: the stride of the rows it is estimated from this round, and
    #: ``time.perf_counter()`` at the end of the last update (to measure a round's overhead).
    stride: int = 1
    clock: float | None = None
    #: The stride each round so far used (1: the exact Hessian).
    strides: tuple[int, ...] = ()


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
        outnumber the parameters well."""
        return ROWS_PER_PARAMETER * self.shape(n_features)[1]

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

    def _dims(self, theta: np.ndarray) -> tuple[int, int, Curvature, int]:
        B, m = theta.shape
        cv = self.curvature(m)
        return B, m, cv, _BLOCK_HEAD + m + cv.size

    def block_views(self, acc: np.ndarray, theta: np.ndarray):
        """Views ``(loss, loss_sq, reported, grad, hess)`` of each block of ``acc``
        (``hess``: the full Hessian, or the diagonal followed by the Hessian-vector
        product)."""
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
        return TaskParams(theta, width, lbfgs, probe, np.ascontiguousarray(coefs[:, :d].T),
                          coefs[:, d].copy() if self.fit_intercept else None, int(stride),
                          int(offset))

    @staticmethod
    def scores(p: TaskParams, X) -> np.ndarray:
        """``X`` times the score coefficients, plus the intercepts (rows x scores)."""
        Z = np.asarray(X @ p.coef_t)
        if p.intercept is not None:
            Z += p.intercept
        return Z

    def new_stats(self, params) -> np.ndarray:
        theta = params[0]
        B, _m, _cv, L = self._dims(theta)
        return np.zeros(_HEAD + B * L)

    def _symmetrised(self, stats: np.ndarray | None, theta: np.ndarray) -> np.ndarray | None:
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
        fixed = [replace(p, stats=self._symmetrised(p.stats, theta),
                         stats_before_wrap=self._symmetrised(p.stats_before_wrap, theta))
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
        from .incremental import partition_update

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
        are unlike the others (:func:`_unlike`: rows sorted by label, partitions holding
        different data) takes its step on the finished partitions' rows alone; its partial
        rows still count once in the pass model."""
        return state.full or state.help

    def objective(self, state: NewtonState, stats: RoundStats, n_rows: int) -> float:
        blocks = self._analyse(state, stats)
        if not blocks:
            return math.nan
        return float(sum(b.reported for b in blocks))

    # -- the update rule --------------------------------------------------------------------

    def _analyse(self, state: NewtonState, rs: RoundStats) -> list[_Block]:
        """The round's blocks: objective, gradient and Hessian of the model each step uses
        (cached on ``rs``)."""
        return _analyse(self, state, rs)

    def _next_stride(self, state: NewtonState, stats: RoundStats, cv: Curvature) -> int:
        """The stride of the Hessian's rows next round (see :func:`choose_stride`)."""
        return _next_stride(self, state, stats, cv)

    def initial_radius(self, f: float) -> float:
        """Trust radius before the first step: the full step may not promise a decrease
        larger than the objective itself (losses are non-negative)."""
        return math.inf if self.quadratic else math.sqrt(2.0 * max(f, 1e-12))

    def update(self, state: NewtonState, stats: RoundStats, n_rows: int) -> NewtonState:
        return _update(self, state, stats)


# -- the update rule (module functions of a program: the class stays the contract) -----------


def _as_model(prog: NewtonProgram, raw: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Statistics at ``theta`` -> additive quadratic model (constant, linear, quadratic)."""
    out = raw.copy()
    _B, _m, cv, _L = prog._dims(theta)
    for b, (loss, _sq, _rep, g, h) in enumerate(prog.block_views(out, theta)):
        th = theta[b]
        hth = cv.matvec(h, th)
        loss[0] = loss[0] - g @ th + 0.5 * th @ hth
        g -= hth
    return out


#: How far apart (see :func:`_unlike`) the mean gradients of the stopped partitions' rows
#: and of the others' must be for the rows to count as unlike each other. Measured on
#: 6 000 of 30 000 rows (8 features; logistic, multinomial, squared hinge): 0.3-13 for fair
#: samples (up to 68 at parameters far from any optimum, where the gradients' spread is no
#: longer the Hessian), 980-23 000 for a prefix of rows sorted by label.
UNLIKE = 100.0


def _unlike(prog: NewtonProgram, rs: RoundStats, theta: np.ndarray) -> bool:
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
    _B, m, cv, _L = prog._dims(theta)
    scale = 1.0 / sum(ps.rows for ps in partial) + 1.0 / sum(ps.rows for ps in rest)
    for va, vb in zip(prog.block_views(a, theta), prog.block_views(b, theta), strict=True):
        h = (va[4] + vb[4]) / (a[1] + b[1])
        diag = h[:m * m].reshape(m, m).diagonal() if cv.kind == "full" else h[:m]
        d2 = (va[3] / a[1] - vb[3] / b[1]) ** 2 / np.maximum(diag, 1e-12)
        if d2.sum() / (scale * m) > UNLIKE:
            return True
    return False


def _noise(raw_loss: float, raw_sq: float, wsum: float, rows: int, n_rows: int) -> float:
    """Sampling noise of the difference of two round estimates of the mean loss."""
    if rows >= n_rows or wsum <= 0:
        return 0.0
    mean = raw_loss / wsum
    var = max(raw_sq / wsum - mean * mean, 0.0)
    return 3.0 * math.sqrt(2.0 * var * (1.0 - rows / n_rows) / max(rows, 1))


@one_blas_thread
def _analyse(prog: NewtonProgram, state: NewtonState, rs: RoundStats) -> list[_Block]:
    key = id(state)
    if key in rs.cache:
        return rs.cache[key][0]
    theta = state.theta
    if rs.rows == 0 or rs.total[1] <= 0:
        rs.cache[key] = ([], state.ledger)
        return []
    _B, m, cv, _L = prog._dims(theta)
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
    if _unlike(prog, rs, theta):
        # The round's model from the partitions that finished: the partial rows would
        # steer it the wrong way (they still count in the pass model, once each).
        fair = [ps for ps in rs.parts if ps.rows >= ps.size]
        total, rows = np.sum([ps.stats for ps in fair], axis=0), sum(ps.rows for ps in fair)
    wsum = total[1]
    out = []
    pass_views = prog.block_views(complete[0], theta) if complete else None
    for b, (loss, sq, rep, g, h) in enumerate(prog.block_views(total, theta)):
        th = theta[b]
        penalty = 0.5 * th @ (reg * th)
        blk = _Block(
            f=loss[0] / wsum + penalty, g=g / wsum + reg * th, h=h / wsum,
            noise=_noise(loss[0], sq[0], wsum, rows, state.n_rows),
            exact=rows >= state.n_rows, movement=0.0, reported=rep[0] / wsum + penalty,
        )
        if pass_views is not None and not blk.exact:
            moves = [math.sqrt(max(cv.quad(pass_views[b][4] / complete[0][1],
                                           th - anchors[r][b], reg), 0.0))
                     if r in anchors else math.inf
                     for r in range(complete[1], state.round + 1)]
            blk = _pass_block(prog, blk, th, pass_views[b], complete[0][1], cv, reg,
                              max(moves) if moves else 0.0)
        out.append(blk)
    rs.cache[key] = (out, ledger)
    return out


def _pass_block(prog: NewtonProgram, blk: _Block, th: np.ndarray, view, W: float,
                cv: Curvature, reg: np.ndarray, move: float) -> _Block:
    """The block of the pass model (every row once, pieces a few rounds old), if its pieces
    were computed about as close to ``th`` as the round model's own step (``move``: the
    farthest of them, in the model's norm), and close in absolute terms; ``blk`` else."""
    c, _sq, _rep, lin, quad = view
    A = quad / W

    def f_pass(t, c=c, lin=lin, A=A, W=W):
        return float(c[0] / W + lin @ t / W + 0.5 * t @ cv.matvec(A, t)
                     + 0.5 * t @ (reg * t))

    lam = math.sqrt(max(-(blk.g @ cv.direction(blk.h, reg, blk.g)), 0.0))
    near = move <= min(3.0 * max(lam, math.sqrt(2.0 * prog.tol)), _NEAR)
    fp = f_pass(th)
    if not (prog.quadratic or (near and fp >= 0.0)):
        return blk
    return _Block(f=fp, g=lin / W + cv.matvec(A, th) + reg * th, h=A, noise=0.0, exact=True,
                  movement=move, reported=fp if not prog.smoothed else blk.reported,
                  f_at=f_pass)


def _next_stride(prog: NewtonProgram, state: NewtonState, stats: RoundStats,
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


def _lbfgs_memory(prog: NewtonProgram, state: NewtonState, blocks: list[_Block], m: int,
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


def _step_blocks(prog: NewtonProgram, state: NewtonState, blocks: list[_Block],
                 cv: Curvature, memory: list) -> _Steps:
    """Each block's ratio test of its last step, then its next trust-region step (or the
    last one taken back and retried shorter)."""
    theta = state.theta
    reg = prog.reg(theta.shape[1])
    pending = state.pending or (None,) * len(blocks)
    out = _Steps(theta.copy(), [],
                 list(state.radius or [prog.initial_radius(b.f) for b in blocks]))
    for b, blk in enumerate(blocks):
        cvb = replace(cv, pairs=memory[b]) if memory else cv

        def step(g, h, region, cvb=cvb):
            return trust_step(g, cvb.direction(h, reg, g), region.radius)

        tr, keep, p = TrustRegion(out.radius[b]), True, pending[b]
        if p is not None and p.exact == blk.exact:
            # Estimates from the two kinds of model differ by more than a step's effect:
            # only estimates of the same kind are compared. The pass model is compared
            # with itself at both points, so that pieces replaced since do not count.
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
            out.noisy.append(False)
        else:
            st = step(blk.g, blk.h, tr)
            out.theta[b] = theta[b] + st.step
            out.pending.append(_Pending(theta[b], blk.f, blk.g, blk.h, st.predicted,
                                        st.length, blk.noise, blk.exact))
            small = (np.max(np.abs(blk.g)) <= prog.tol
                     and 0.5 * st.decrement ** 2 <= _DECREMENT * prog.tol)
            close = prog.quadratic or 0.5 * blk.movement ** 2 <= 10.0 * prog.tol
            out.done.append(blk.exact and small and close)
            out.noisy.append(not blk.exact and st.predicted <= blk.noise)
            out.stage_done.append(0.5 * st.decrement ** 2 <= 0.1 * state.width)
        out.radius[b] = tr.radius
        out.models.append("pass" if blk.f_at is not None else "round")
    return out


@one_blas_thread
def _update(prog: NewtonProgram, state: NewtonState, stats: RoundStats) -> NewtonState:
    blocks = _analyse(prog, state, stats)
    if not blocks:
        return replace(state, round=state.round + 1)
    ledger = stats.cache[id(state)][1]
    theta = state.theta
    _B, m, cv, _L = prog._dims(theta)
    exact = all(blk.exact for blk in blocks)
    memory = _lbfgs_memory(prog, state, blocks, m, exact) if cv.kind == "lbfgs" else []
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
        state, stride=_next_stride(prog, state, stats, cv), clock=time.perf_counter(),
        strides=(*state.strides, state.stride),
        theta=new_theta, round=state.round + 1, ledger=ledger,
        radius=tuple(st.radius), pending=tuple(new_pending), anchors=anchors, width=width,
        converged=converged, model=tuple(st.models), full=full,
        help=state.help or st.rejected,
        probe=new_theta - theta if memory and not exact else None,
        secant=(theta, np.stack([blk.g for blk in blocks])) if memory and exact else None,
        memory=tuple(memory),
    )
