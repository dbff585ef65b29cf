"""Second-order information of a Newton program: a full Hessian, or limited-memory curvature.

A Newton program's partition statistics hold second-order information over the rows they
processed. Up to a few hundred parameters per block that is the whole Hessian (``m^2``
floats; a few Newton rounds reach the optimum). Above, the Hessian costs ``m^2`` work per row
and ``m^2`` floats per task, which dwarfs the gradient's ``m``: the statistics then hold only
the Hessian's **diagonal** and one **Hessian-vector product** with the last step, both
additive over rows and about one gradient pass of work, and the driver keeps an L-BFGS
memory of those products (stochastic quasi-Newton with Hessian-vector pairs: Byrd, Hansen,
Nocedal and Singer, SIAM J. Optim. 2016), started from the diagonal (Jacobi) scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .trust_region import newton_direction

#: Curvature pairs kept per block by the L-BFGS memory.
MEMORY = 10


@dataclass(frozen=True, eq=False)
class Curvature:
    """The layout of a block's second-order statistics, and the Newton direction they give.

    Parameters
    ----------
    kind : {"full", "lbfgs"}
        The whole ``m x m`` Hessian, or its diagonal followed by one Hessian-vector product
        (``2 m`` floats).
    m : int
        Number of parameters.
    flat : tuple of int, default=()
        Parameters whose sum the objective does not depend on (the intercepts of a
        multinomial model): the full Hessian is singular along that direction, and steps keep
        the sum unchanged.
    pairs : tuple of (ndarray, ndarray), default=()
        L-BFGS memory, oldest first: steps ``s`` and the objective's Hessian times ``s``
        (penalty included), for ``kind="lbfgs"``.
    """

    kind: Literal["full", "lbfgs"]
    m: int
    flat: tuple[int, ...] = ()
    pairs: tuple[tuple[np.ndarray, np.ndarray], ...] = ()

    @property
    def size(self) -> int:
        """Number of floats stored."""
        return self.m * self.m if self.kind == "full" else 2 * self.m

    def matvec(self, h: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``H v`` for the stored full Hessian ``h``."""
        if self.kind != "full":
            raise ValueError("matvec needs the full Hessian")
        return h.reshape(self.m, self.m) @ v

    def quad(self, h: np.ndarray, v: np.ndarray, reg: np.ndarray) -> float:
        """``v.(H + diag(reg)).v`` for the stored full Hessian ``h``."""
        return float(v @ self.matvec(h, v) + v @ (reg * v))

    def direction(self, h: np.ndarray, reg: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The (quasi-)Newton direction ``-(H + diag(reg))^-1 g``."""
        if self.kind == "full":
            H = h.reshape(self.m, self.m) + np.diag(reg)
            if self.flat:
                # The gradient has no component along the flat direction v; adding v v^T
                # (scaled like H) makes H invertible without changing the step.
                idx = np.asarray(self.flat)
                H[np.ix_(idx, idx)] += np.trace(H) / self.m / len(idx)
            return newton_direction(g, H)
        return -lbfgs_solve(self.pairs, diagonal(h[:self.m] + reg), g)


def diagonal(d: np.ndarray) -> np.ndarray:
    """A positive initial diagonal: entries at or below zero (a feature absent from the rows
    seen) get the median positive entry."""
    pos = d[d > 0]
    fill = float(np.median(pos)) if pos.size else 1.0
    return np.where(d > 0, d, fill)


def lbfgs_solve(pairs, d0: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``B^-1 g`` for the BFGS matrix ``B`` built from ``diag(d0)`` and ``pairs`` (the
    two-loop recursion, Nocedal and Wright, *Numerical Optimization*, Algorithm 7.4)."""
    q = g.copy()
    alphas = []
    for s, y in reversed(pairs):
        rho = 1.0 / float(y @ s)
        a = rho * float(s @ q)
        q -= a * y
        alphas.append((rho, a, s, y))
    r = q / d0
    for rho, a, s, y in reversed(alphas):
        b = rho * float(y @ r)
        r += (a - b) * s
    return r


def lbfgs_times(pairs, d0: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``B v`` for the BFGS matrix ``B`` built from ``diag(d0)`` and the curvature ``pairs``
    ``(s, y)`` (oldest first; each with ``s.y > 0``), by the unrolled update
    ``B_{k+1} = B_k - B_k s s^T B_k / (s.B_k s) + y y^T / (y.s)`` (``O(len(pairs) m)`` work
    after ``O(len(pairs)^2 m)`` for the vectors ``B_k s_k``)."""
    Bs: list[np.ndarray] = []
    for k, (s, _y) in enumerate(pairs):
        a = d0 * s
        for i in range(k):
            si, yi = pairs[i]
            a -= Bs[i] * (float(Bs[i] @ s) / float(si @ Bs[i]))
            a += yi * (float(yi @ s) / float(yi @ si))
        Bs.append(a)
    out = d0 * v
    for (s, y), a in zip(pairs, Bs, strict=True):
        sa = float(s @ a)
        if sa > 0:
            out -= a * (float(a @ v) / sa)
        out += y * (float(y @ v) / float(y @ s))
    return out


def add_pair(pairs, s: np.ndarray, y: np.ndarray):
    """The memory with the pair ``(s, y)`` added (oldest dropped past :data:`MEMORY`), or
    unchanged when the pair carries no usable curvature."""
    sy = float(s @ y)
    if not (sy > 1e-12 * float(s @ s) and np.isfinite(sy)):
        return pairs
    return (*pairs, (s, y))[-MEMORY:]
