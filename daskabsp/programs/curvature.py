"""Second-order statistics stored flat: a full Hessian, per-class diagonal blocks, or a diagonal.

A Newton program's partition statistics hold the Hessian of the loss over the rows processed.
Its full form has ``m^2`` entries for ``m`` parameters; when that is too large to ship every
round the programs keep only diagonal blocks (one per class of a multinomial model) or the
diagonal, and the Newton step becomes a quasi-Newton step with that approximation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .trust_region import newton_direction


@dataclass(frozen=True)
class Curvature:
    """The layout of the (approximate) Hessian of ``m`` parameters.

    Parameters
    ----------
    kind : {"full", "blocks", "diag"}
        The whole ``m x m`` matrix, ``n_blocks`` diagonal blocks of ``m / n_blocks`` rows
        each, or the diagonal.
    m : int
        Number of parameters.
    n_blocks : int, default=1
        Number of diagonal blocks (``kind="blocks"``).
    flat : tuple of int, default=()
        Parameters whose sum the objective does not depend on (the intercepts of a
        multinomial model): the full Hessian is singular along that direction, and steps keep
        the sum unchanged.
    """

    kind: Literal["full", "blocks", "diag"]
    m: int
    n_blocks: int = 1
    flat: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        """Number of floats stored."""
        if self.kind == "full":
            return self.m * self.m
        if self.kind == "blocks":
            q = self.m // self.n_blocks
            return self.n_blocks * q * q
        return self.m

    def _blocks(self, h: np.ndarray) -> np.ndarray:
        q = self.m // self.n_blocks
        return h.reshape(self.n_blocks, q, q)

    def matvec(self, h: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``H v`` for the stored ``h``."""
        if self.kind == "full":
            return h.reshape(self.m, self.m) @ v
        if self.kind == "blocks":
            q = self.m // self.n_blocks
            return np.einsum("kij,kj->ki", self._blocks(h), v.reshape(self.n_blocks, q)).ravel()
        return h * v

    def quad(self, h: np.ndarray, v: np.ndarray, reg: np.ndarray) -> float:
        """``v.(H + diag(reg)).v``."""
        return float(v @ self.matvec(h, v) + v @ (reg * v))

    def direction(self, h: np.ndarray, reg: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The Newton direction ``-(H + diag(reg))^-1 g``."""
        if self.kind == "full":
            H = h.reshape(self.m, self.m) + np.diag(reg)
            if self.flat:
                # The gradient has no component along the flat direction v; adding v v^T
                # (scaled like H) makes H invertible without changing the step.
                idx = np.asarray(self.flat)
                H[np.ix_(idx, idx)] += np.trace(H) / self.m / len(idx)
            return newton_direction(g, H)
        if self.kind == "blocks":
            q = self.m // self.n_blocks
            blocks = self._blocks(h).copy()
            out = np.empty(self.m)
            for k in range(self.n_blocks):
                sl = slice(k * q, (k + 1) * q)
                blocks[k][np.diag_indices(q)] += reg[sl]
                out[sl] = newton_direction(g[sl], blocks[k])
            return out
        d = h + reg
        safe = d > 0
        return np.where(safe, -g / np.where(safe, d, 1.0), 0.0)
