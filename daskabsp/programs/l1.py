"""Solvers of L1-penalised quadratic models, run on the driver.

The programs with an L1 penalty (:mod:`.gram`, :mod:`.proximal`) reduce each update to a
quadratic model of the smooth part of the objective plus the L1 term:

    minimise  q(x) = x.A.x / 2 - b.x + sum_j lam_j |x_j|      (optionally x >= 0)

with ``A`` positive semi-definite: the centred Gram matrix of a least-squares problem (then
``q`` is the whole objective) or the Hessian of a proximal Newton step. The model has at
most a few thousand variables and lives on the driver, so it is solved to machine precision:
cyclic coordinate descent until the support settles, then the linear system on the support
(its exact solution, kept when the signs and the optimality conditions off the support hold).
The sign pattern of the exact solution is what a fit reports as its non-zero coefficients.

Also here: the optimality measure of a composite objective (:func:`kkt_violation`), used
by the stopping rules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg

#: Sweeps of coordinate descent between two attempts at the exact solution on the support.
SWEEPS_PER_CHECK = 4


#: ``positive`` below: False (no bound), True (every variable >= 0), or a boolean mask of the
#: variables bounded at zero (a model's coefficients, not its intercept).
Positive = bool | np.ndarray


def _bounded(positive: Positive, m: int) -> np.ndarray | None:
    """The mask of the variables bounded at zero, or None when none is."""
    if np.ndim(positive) == 0:
        return np.ones(m, dtype=bool) if positive else None
    mask = np.asarray(positive, dtype=bool)
    return mask if mask.any() else None


def soft_threshold(z: np.ndarray, t: np.ndarray | float,
                   positive: Positive = False) -> np.ndarray:
    """``sign(z) max(|z| - t, 0)`` (``max(z - t, 0)`` where ``positive``)."""
    if np.ndim(positive) == 0 and positive:
        return np.maximum(z - t, 0.0)
    out = np.sign(z) * np.maximum(np.abs(z) - t, 0.0)
    if np.ndim(positive):
        out = np.where(positive, np.maximum(z - t, 0.0), out)
    return out


def kkt_violation(x: np.ndarray, grad: np.ndarray, lam: np.ndarray,
                  positive: Positive = False) -> np.ndarray:
    """Per variable, the distance of ``-grad`` to the subdifferential of ``lam |x|`` at ``x``
    (0 at an optimum of ``f(x) + sum lam |x|`` whose smooth part has gradient ``grad``).

    For a non-zero ``x_j`` it is ``|grad_j + lam_j sign(x_j)|``; at zero, how far
    ``|grad_j|`` exceeds ``lam_j`` (with ``positive``: how far ``-grad_j`` does).
    """
    lam = np.broadcast_to(lam, x.shape)
    on = x != 0
    out = np.empty_like(grad)
    out[on] = np.abs(grad[on] + lam[on] * np.sign(x[on]))
    off = ~on
    out[off] = np.maximum(np.abs(grad[off]) - lam[off], 0.0)
    pos = _bounded(positive, x.shape[0])
    if pos is not None:
        low = off & pos
        out[low] = np.maximum(-grad[low] - lam[low], 0.0)
    return out


def _cd_sweep(A: np.ndarray, diag: np.ndarray, x: np.ndarray, grad: np.ndarray,
              lam: np.ndarray, order, pos: np.ndarray | None) -> float:
    """One cyclic pass of exact coordinate minimisation over ``order``; ``x`` and
    ``grad = A x - b`` updated in place. Returns the largest change of a variable."""
    largest = 0.0
    for j in order:
        a = diag[j]
        old = x[j]
        if a <= 0.0:  # a variable the model does not depend on (an all-zero feature)
            new = 0.0
        else:
            z = old - grad[j] / a
            t = lam[j] / a
            if pos is not None and pos[j]:
                new = z - t if z > t else 0.0
            elif z > t:
                new = z - t
            elif z < -t:
                new = z + t
            else:
                new = 0.0
        delta = new - old
        if delta != 0.0:
            x[j] = new
            grad += delta * A[j]  # A is symmetric: its row j is its column j
            largest = max(largest, abs(delta))
    return largest


def _exact_on_support(A: np.ndarray, b: np.ndarray, lam: np.ndarray, x: np.ndarray,
                      positive: Positive, tol: float) -> np.ndarray | None:
    """The exact minimiser with the support and signs of ``x``, if it is optimal: the linear
    system ``A_SS x_S = b_S - lam_S sign(x_S)`` solved, kept when its signs are those of
    ``x`` and no variable off the support violates the optimality conditions."""
    S = np.flatnonzero(x)
    out = np.zeros_like(x)
    if S.size:
        sign = np.sign(x[S])
        rhs = b[S] - lam[S] * sign
        A_SS = A[np.ix_(S, S)]
        try:
            xs = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A_SS, check_finite=False),
                                        rhs, check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            xs = np.linalg.lstsq(A_SS, rhs, rcond=None)[0]
        if not np.all(np.isfinite(xs)) or np.any(np.sign(xs) != sign):
            return None
        out[S] = xs
    grad = A @ out - b
    if kkt_violation(out, grad, lam, positive).max(initial=0.0) > tol:
        return None
    return out


def l1_quadratic(A: np.ndarray, b: np.ndarray, lam, x0: np.ndarray | None = None, *,
                 positive: Positive = False, tol: float = 1e-10, max_sweeps: int = 100_000,
                 recentre: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Minimise ``x.A.x / 2 - b.x + sum_j lam_j |x_j|`` (subject to ``x >= 0`` when
    ``positive``).

    Parameters
    ----------
    A : ndarray of shape (m, m)
        Symmetric positive semi-definite.
    b : ndarray of shape (m,)
    lam : float or ndarray of shape (m,)
        Non-negative L1 weight of each variable (0: not penalised).
    x0 : ndarray of shape (m,), optional
        Starting point (a warm start: the previous solution).
    positive : bool or ndarray of bool of shape (m,), default=False
        Constrain every variable (True), or those of the mask, to be non-negative.
    tol : float, default=1e-10
        Largest violation of the optimality conditions (:func:`kkt_violation`) accepted,
        relative to ``max(|b|, max_j A_jj, 1)``.
    max_sweeps : int, default=100000
        Most coordinate-descent passes over the variables.
    recentre : callable, optional
        For a model that does not change along some directions (``A v = 0`` and ``b.v =
        0``, as a multinomial model's coefficients shifted alike in every class): the point
        moved along them to where its L1 term is smallest. Coordinate descent moves one
        variable at a time, so along such a direction it crawls; this move is made after
        every sweep.

    Returns
    -------
    ndarray of shape (m,)
        The minimiser: exact (from the linear system on its support) whenever coordinate
        descent found the support; else the coordinate-descent iterate at ``tol``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.programs.l1 import l1_quadratic
    >>> l1_quadratic(np.eye(2), np.array([3.0, 0.5]), 1.0)
    array([2., 0.])
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m = b.shape[0]
    lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), (m,)).copy()
    x = np.zeros(m) if x0 is None else np.array(x0, dtype=np.float64)
    pos = _bounded(positive, m)
    if pos is not None:
        x[pos] = np.maximum(x[pos], 0.0)
    diag = np.diagonal(A).copy()
    scale = max(float(np.max(np.abs(b), initial=0.0)), float(np.max(diag, initial=0.0)), 1.0)
    atol = tol * scale
    grad = A @ x - b
    everything = range(m)
    sweeps = 0
    while sweeps < max_sweeps:
        _cd_sweep(A, diag, x, grad, lam, everything, pos)
        sweeps += 1
        if recentre is not None:
            x = recentre(x)
            grad = A @ x - b
        # sweeps over the support until it settles, then a check of every variable
        active = np.flatnonzero(x)
        for _ in range(SWEEPS_PER_CHECK):
            if not active.size:
                break
            change = _cd_sweep(A, diag, x, grad, lam, active, pos)
            sweeps += 1
            if change <= atol:
                break
        grad = A @ x - b  # fresh: the in-place updates accumulate rounding
        exact = _exact_on_support(A, b, lam, x, positive, atol)
        if exact is not None:
            return exact
        if kkt_violation(x, grad, lam, positive).max(initial=0.0) <= atol:
            return x
    return x
