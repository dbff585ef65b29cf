"""Newton steps under a trust region measured in the model's own norm.

A program's rounds give a quadratic model ``q(s) = f + g.s + s.H.s / 2`` of the objective
around the current parameters. The Newton step minimises it; far from the optimum (or when
the model comes from a subset of rows) the quadratic can be a poor guide, so the step is kept
inside a trust region ``||s||_H <= radius``. In the model's norm the constrained minimiser is
the Newton step scaled back to the boundary, which keeps the rule affine invariant (feature
scaling does not change the iterates). The radius follows the usual ratio test (Nocedal and
Wright, *Numerical Optimization*, Algorithm 4.1) between the decrease the model predicted and
the decrease the next round measured; a step that made the objective worse is taken back.

Because a round measures the objective only once the step has been taken, the ratio of a step
is known one round later, and a rejected step costs one round.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import scipy.linalg
from threadpoolctl import ThreadpoolController

_BLAS = ThreadpoolController()
F = TypeVar("F", bound=Callable[..., Any])


def one_blas_thread(func: F) -> F:
    """Run ``func`` with a single BLAS thread.

    The driver's linear algebra usually shares the machine with busy workers: there a
    multi-threaded factorisation of a few hundred rows spins for up to a second instead of
    taking milliseconds (measured on 2 cores, 0.7 s against 4 ms for 650 rows).
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _BLAS.limit(limits=1, user_api="blas"):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


@one_blas_thread
def newton_direction(g: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Solve ``H s = -g``; ``H`` symmetric positive semi-definite.

    A singular ``H`` (e.g. the intercepts of a multinomial model, defined up to a constant)
    gets the minimum-norm solution.
    """
    try:
        c = scipy.linalg.cho_factor(H, lower=True, check_finite=False)
        s = -scipy.linalg.cho_solve(c, g, check_finite=False)
        if np.all(np.isfinite(s)):
            return s
    except (np.linalg.LinAlgError, ValueError):
        pass
    w, V = np.linalg.eigh(H)
    keep = w > w.max(initial=0.0) * 1e-12
    return -(V[:, keep] @ ((V[:, keep].T @ g) / w[keep]))


def round_noise(raw_loss: float, raw_sq: float, wsum: float, rows: int, n_rows: int) -> float:
    """Sampling noise of the difference of two round estimates of the mean loss (three
    standard errors of a mean over ``rows`` of ``n_rows`` rows, without replacement): a
    change of the objective below it says nothing about a step."""
    if rows >= n_rows or wsum <= 0:
        return 0.0
    mean = raw_loss / wsum
    var = max(raw_sq / wsum - mean * mean, 0.0)
    return 3.0 * math.sqrt(2.0 * var * (1.0 - rows / n_rows) / max(rows, 1))


@dataclass(frozen=True)
class Step:
    """A trust-region Newton step."""

    step: np.ndarray
    #: Decrease of the quadratic model along the step.
    predicted: float
    #: Newton decrement ``sqrt(g . H^-1 g)`` (the full step's length in the model's norm).
    decrement: float
    #: Length of the step in the model's norm.
    length: float


def trust_step(g: np.ndarray, direction: np.ndarray, radius: float,
               metric: np.ndarray | None = None) -> Step:
    """The Newton step ``direction`` (``-H^-1 g``), scaled back to ``radius`` if longer.

    Lengths are in the model's norm (``sqrt(s.H.s)``), or with a ``metric`` (the diagonal
    of a fixed positive scaling ``M``) in ``sqrt(s.M.s)``: a quasi-Newton model's own norm
    collapses where its curvature does (a logistic loss saturated on every row after a bad
    step: its curvature falls to the penalty's), and a radius in it then allows steps of
    any length."""
    s = direction
    lam2 = max(float(-g @ s), 0.0)
    lam = float(np.sqrt(lam2))
    full = lam if metric is None else float(np.sqrt(max(float(s @ (metric * s)), 0.0)))
    t = 1.0 if full <= radius else radius / full
    return Step(step=t * s, predicted=lam2 * (t - 0.5 * t * t), decrement=lam, length=t * full)


@dataclass(frozen=True)
class TrustRegion:
    """The radius and the ratio test.

    Parameters
    ----------
    radius : float
        Current radius, in the model's norm (``sqrt(s.H.s)``, the square root of twice the
        quadratic's change along ``s``).
    """

    radius: float

    def _shrink(self, length: float) -> TrustRegion:
        return replace(self, radius=0.25 * length)

    def _grow(self, length: float) -> TrustRegion:
        if length >= 0.99 * self.radius:
            return replace(self, radius=2.0 * self.radius)
        return self

    def judge(self, actual: float, predicted: float, length: float,
              noise: float = 0.0) -> tuple[TrustRegion, bool]:
        """The new region and whether to keep a step of ``length`` that was predicted to
        decrease the objective by ``predicted`` and measured to decrease it by ``actual``.

        Differences smaller than ``noise`` (the sampling noise of the objective estimate) are
        not evidence against the step: it is kept, and the region may grow.
        """
        if predicted <= noise and abs(actual) <= max(noise, predicted):
            return self._grow(length), True
        rho = actual / predicted if predicted > 0 else (1.0 if actual >= 0 else -1.0)
        if rho < 0.0:
            return self._shrink(length), False
        if rho < 0.25:
            return self._shrink(length), True
        if rho > 0.75:
            return self._grow(length), True
        return self, True
