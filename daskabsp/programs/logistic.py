"""Binary L2-regularised logistic regression by (accelerated) gradient descent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from .aggregate import Piece, put_piece, rows_of, total
from .base import PartitionStats, Program


def squared_norm_sum(X) -> float:
    """Sum of the squared row norms of a dense or CSR block, without a temporary copy."""
    if sp.issparse(X):
        return float(np.dot(X.data, X.data))
    return float(np.einsum("ij,ij->", X, X))


@dataclass
class LogisticGD(Program):
    """Binary logistic regression with an L2 penalty, by gradient descent.

    Minimises the objective of scikit-learn's ``LogisticRegression(C=C)`` scaled by
    ``1 / (C * n)`` (same optimum)::

        f(w, b) = mean_i log(1 + exp(-s_i (x_i . w + b))) + ||w||^2 / (2 C n)

    with ``s_i = 2 y_i - 1`` and ``y_i`` in {0, 1}; the intercept ``b`` is not penalised.

    The step is ``1 / L`` with ``L = (mean_i ||x_i||^2 + 1) / 4 + 1 / (C n)``, an upper bound on
    the gradient's Lipschitz constant computed from the round's own statistics, so no step size
    has to be tuned. With ``accelerated=True`` the iterates follow Nesterov's method.

    Statistics of a row range (additive): loss sum, squared row norm sum, gradient of the loss
    sum (features, then intercept).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength, as in scikit-learn.
    accelerated : bool, default=True
        Use Nesterov's accelerated gradient.
    helpers : bool, default=False
        Let the default A-BSP help the rounds: copy a straggler's partition to other workers
        and scan there the rows a stopped partition leaves (a second wave of tasks per round,
        and the copies' memory). Off, each round is A-BSP as published: a gradient step from
        the rows the fastest workers scanned moves about as far as one from every row, and
        the stopped partitions resume at their cursors next round.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.programs import LogisticGD
    >>> res = daskabsp.fit(LogisticGD(C=1.0), X, y, max_iter=300)
    >>> res.converged
    True
    >>> w, b = res.coef[:-1], res.coef[-1]      # weights, then the intercept
    >>> w.shape
    (5,)
    """

    name: ClassVar[str] = "logreg"
    C: float = 1.0
    accelerated: bool = True
    helpers: bool = False

    @property
    def helpable(self) -> bool:  # type: ignore[override]
        return self.helpers

    def check_input(self, X, y) -> None:
        bad = np.setdiff1d(np.unique(y), [0.0, 1.0])
        if bad.size:
            raise ValueError(
                f"{type(self).__name__} needs y in {{0, 1}}; got the values {bad[:5].tolist()}."
            )

    def init(self, n_features: int, n_rows: int) -> dict:
        w = np.zeros(n_features + 1)
        return {"w": w, "v": w.copy(), "t": 1.0, "n": n_rows}

    def params(self, state: dict) -> np.ndarray:
        # Gradients are taken at the extrapolated point v (v == w without acceleration).
        return state["v"]

    def new_stats(self, params: np.ndarray) -> np.ndarray:
        return np.zeros(params.shape[0] + 2)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        z = X @ params[:-1]
        z += params[-1]
        acc[0] += np.logaddexp(0.0, z).sum() - np.dot(y, z)
        acc[1] += squared_norm_sum(X)
        r = expit(z)
        r -= y
        acc[2:-1] += X.T @ r
        acc[-1] += r.sum()

    def _loss_grad(self, v: np.ndarray, stats: np.ndarray, k: int, n: int):
        reg = 1.0 / (self.C * n)
        grad = stats[2:] / k
        grad[:-1] += reg * v[:-1]
        lipschitz = 0.25 * (stats[1] / k + 1.0) + reg
        return grad, lipschitz

    def update(self, state: dict, stats: np.ndarray, n_rows: int) -> dict:
        if n_rows == 0:
            return state
        v, w, t, n = state["v"], state["w"], state["t"], state["n"]
        grad, lipschitz = self._loss_grad(v, stats, n_rows, n)
        w_next = v - grad / lipschitz
        if not self.accelerated:
            return {"w": w_next, "v": w_next, "t": 1.0, "n": n}
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        v_next = w_next + ((t - 1.0) / t_next) * (w_next - w)
        return {"w": w_next, "v": v_next, "t": t_next, "n": n}

    def objective(self, state: dict, stats: np.ndarray, n_rows: int) -> float:
        v = state["v"]
        reg = 1.0 / (self.C * state["n"])
        return float(stats[0] / max(n_rows, 1) + 0.5 * reg * np.dot(v[:-1], v[:-1]))

    def coefficients(self, state: dict) -> np.ndarray:
        return state["w"]

    def partition_update(self, state: dict, piece: PartitionStats, params: np.ndarray,
                         staleness: int) -> dict:
        """SSP/ASP: a gradient step from the aggregate of every partition's latest
        statistics (see :mod:`~daskabsp.programs.aggregate`).

        Each partition ``p`` last computed its gradient at ``w_p``; the new parameters are
        the row-weighted mean of the partitions' own steps ``w_p - grad_p(w_p) / L``, i.e.
        ``mean_w - (mean_grad + penalty'(mean_w)) / L``: the delay-tolerant averaged
        gradient step of Mishchenko et al. (2018), with the step ``1 / L`` of the rounds and
        no acceleration. Under ``SSP(0)`` each sweep is a round of unaccelerated gradient
        descent under BSP.
        """
        pieces = put_piece(state.get("pieces", ()), Piece(piece.partition, piece.rows,
                                                          piece.stats, np.asarray(params)))
        k = rows_of(pieces)
        center = np.sum([q.params * (q.rows / k) for q in pieces], axis=0)
        grad, lipschitz = self._loss_grad(center, total(pieces), k, state["n"])
        w = center - grad / lipschitz
        return {"w": w, "v": w, "t": 1.0, "n": state["n"], "pieces": pieces,
                "center": center}

    def partition_objective(self, state: dict, piece: PartitionStats, params) -> float:
        """The partitions' latest losses (each at its own parameters) over their rows, plus
        the penalty at their mean parameters."""
        pieces = state["pieces"]
        return self.objective({"v": state["center"], "n": state["n"]}, total(pieces),
                              rows_of(pieces))

    def full_objective(self, w: np.ndarray, X, y) -> float:
        """The exact objective at ``w`` over all of ``X``, ``y`` (in memory)."""
        z = X @ w[:-1] + w[-1]
        n = X.shape[0]
        loss = (np.logaddexp(0.0, z).sum() - np.dot(y, z)) / n
        return float(loss + np.dot(w[:-1], w[:-1]) / (2.0 * self.C * n))
