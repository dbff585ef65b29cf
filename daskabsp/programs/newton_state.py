"""The state and the round parameters of the Newton programs, and the measured constants
their rules and cost model use (shared by :mod:`.newton`, :mod:`.newton_rounds` and
:mod:`.incremental`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .cycles import CycleLedger

#: Header of the statistics: row count, weight sum, and the seconds a task's chunks spent on
#: the model's value and gradient and on its curvature (the cost model's measurements:
#: additive over chunks and partitions like the rest).
HEAD = 4
#: Per block before the gradient: loss sum, weighted sum of squared losses, reported loss sum.
BLOCK_HEAD = 3
#: The Newton decrement test is ``d^2 / 2 <= DECREMENT * tol``: tighter than scikit-learn's
#: ``d^2 / 2 <= tol``, because the point that passes it is returned without a further step,
#: and ``d^2 / 2`` estimates its objective gap.
DECREMENT = 1e-2
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
    #: The score coefficients, features x scores, C-contiguous (two scores: F-contiguous,
    #: each column multiplied on its own): the parameters' scores first, then (L-BFGS) the
    #: probe's. Sparse products copy a non-contiguous operand, which per chunk costs as much
    #: as the chunk's rows when there are many features.
    coef_t: np.ndarray
    #: Intercept of each score (None without an intercept).
    intercept: np.ndarray | None
    #: Full Hessian only: the Hessian is estimated from rows ``offset, offset + stride, ...``
    #: of each chunk (stride 1: every row).
    stride: int = 1
    offset: int = 0


@dataclass(frozen=True)
class Pending:
    """A step taken last round, to be judged by this round's objective."""

    theta: np.ndarray
    f: float
    g: np.ndarray
    h: np.ndarray
    predicted: float
    length: float
    noise: float
    exact: bool
    #: Its model was a pass model (``f`` that model's value, not the objective's).
    stitched: bool = False


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
    pending: tuple[Pending | None, ...] | None = None
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
    #: L-BFGS curvature only: per block, the diagonal scaling the trust region measures
    #: steps in (the first round's Hessian diagonal with the penalty; see
    #: :func:`~daskabsp.programs.trust_region.trust_step`).
    scale: tuple[np.ndarray, ...] = ()
    #: Full Hessian only: the stride of the rows it is estimated from this round, and
    #: ``time.perf_counter()`` at the end of the last update (to measure a round's overhead).
    stride: int = 1
    clock: float | None = None
    #: The stride each round so far used (1: the exact Hessian).
    strides: tuple[int, ...] = ()


