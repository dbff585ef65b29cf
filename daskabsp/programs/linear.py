"""Binary and one-vs-rest linear models (logistic, squared, squared hinge, hinge) by Newton."""

from __future__ import annotations

import time
from copy import copy as shallow_copy
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import dsyrk

try:  # scipy's sparse kernels; private, so a missing one falls back to X.T @ W
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
except ImportError:  # pragma: no cover
    _csc_matvecs = None

from . import glm_losses
from .newton import NewtonProgram
from .newton_state import NewtonState

#: Dense chunks estimate the Hessian's diagonal from every this many rows: it only scales
#: the L-BFGS steps, and over all rows it cost a third of a multinomial chunk's work.
DIAGONAL_STRIDE = 8


def diagonal_sums(X, D: np.ndarray) -> np.ndarray:
    """``(X * X)^T D``: per feature, the rows' squared values weighted by each column of ``D``.

    For CSR chunks exact (``nnz`` work); for dense chunks estimated from every
    :data:`DIAGONAL_STRIDE`-th row, scaled to the chunk (unbiased).
    """
    if sp.issparse(X):
        # X with its stored values squared, sharing the index arrays: scipy's X.multiply(X)
        # merges the two index lists row by row and cost 40% of a text chunk's work.
        squares = shallow_copy(X)
        squares.data = X.data * X.data
        return np.asarray(squares.T @ D)
    Xs = X[::DIAGONAL_STRIDE]
    return (Xs * Xs).T @ D[::DIAGONAL_STRIDE] * (X.shape[0] / Xs.shape[0])


def add_transposed_product(out: np.ndarray, X, W: np.ndarray, squared: bool = False) -> None:
    """``out += X^T W`` (``(X * X)^T W`` with ``squared``) for a CSR ``X``, in place.

    ``out`` is C-contiguous of shape ``(n_features, W.shape[1])``. scipy's ``X.T @ W`` returns
    a new zeroed array of that shape for every chunk, which is then added into the
    statistics: with many features and classes (8 x 100 000: 1.6 M floats), both cost more
    than the chunk's rows. The product is accumulated into ``out`` by scipy's own sparse
    kernel instead (``_sparsetools.csc_matvecs`` on ``X``'s arrays read as ``X^T`` in CSC).
    """
    data = X.data * X.data if squared else X.data
    W = np.ascontiguousarray(W, dtype=np.float64)
    flat = out.reshape(-1)  # a view: out is C-contiguous
    if _csc_matvecs is None or not np.shares_memory(flat, out):  # pragma: no cover
        squares = shallow_copy(X)
        squares.data = data
        out += np.asarray(squares.T @ W)
        return
    indices = X.indices if X.indices.dtype == X.indptr.dtype else \
        X.indices.astype(X.indptr.dtype)
    _csc_matvecs(X.shape[1], X.shape[0], W.shape[1], X.indptr, indices, data, W.ravel(), flat)


def _gram_into(hess: np.ndarray, X, d2: np.ndarray, fit_intercept: bool, stride: int = 1,
               offset: int = 0) -> None:
    """Add ``[X 1]^T diag(d2) [X 1]`` into the flat ``hess``, estimated from rows ``offset,
    offset + stride, ...`` scaled to the chunk when ``stride > 1``.

    Dense chunks fill the lower triangle only (``dsyrk``: half the multiply-adds of the
    product; :meth:`~daskabsp.programs.newton.NewtonProgram.combine_round` mirrors it).
    ``d2`` must be non-negative (it is for every loss here).
    """
    p = X.shape[1] + int(fit_intercept)
    H = hess.reshape(p, p)
    d = X.shape[1]
    n = X.shape[0]
    if stride > 1:
        X, d2 = X[offset::stride], d2[offset::stride]
        if X.shape[0] == 0:
            return
        d2 = d2 * (n / X.shape[0])
    if sp.issparse(X):
        Xd = sp.diags(d2) @ X
        H[:d, :d] += (X.T @ Xd).toarray()
        col = np.asarray(Xd.sum(axis=0)).ravel()
        if fit_intercept:
            H[:d, d] += col
            H[d, :d] += col
            H[d, d] += d2.sum()
        return
    root = np.sqrt(d2)
    A = np.empty((X.shape[0], p))
    np.multiply(X, root[:, None], out=A[:, :d])
    if fit_intercept:
        A[:, d] = root
    # H^T is the F-ordered view of H, so dsyrk updates it in place (its upper triangle is
    # H's lower one).
    dsyrk(1.0, A.T, beta=1.0, c=H.T, trans=0, lower=0, overwrite_c=1)


@dataclass
class LinearNewton(NewtonProgram):
    """Linear models ``z = X w + b`` with a pointwise loss, by trust-region Newton.

    With ``n_blocks = 1`` the target is used as given (``{0, 1}`` for the classification
    losses, real values for ``"squared"``); with ``n_blocks = K > 1`` the target holds class
    codes ``0 .. K-1`` and block ``k`` fits class ``k`` against the rest (one-vs-rest), all
    blocks from the same scans.

    Parameters
    ----------
    loss : {"logistic", "squared", "squared_hinge", "hinge"}, default="logistic"
        The pointwise loss. ``"hinge"`` is fitted through softplus-smoothed hinges
        (:func:`~daskabsp.programs.glm_losses.softplus_hinge`) whose width shrinks from 1 to
        ``3e-4`` (by factors of 10), each stage warm-started (continuation); the smoothed
        objective is above the hinge's by at most ``width * log(2)`` (mean scale), and by far
        less in practice.
    n_blocks : int, default=1
        Number of one-vs-rest problems.
    l2, l2_intercept, fit_intercept, tol, max_hessian, hessian_stride, start
        See :class:`~daskabsp.programs.newton.NewtonProgram`.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.programs import LinearNewton
    >>> prog = LinearNewton(loss="logistic", l2=1.0 / len(y))   # LogisticRegression(C=1)
    >>> res = daskabsp.fit(prog, X, y, sync="bsp")
    >>> res.converged, res.n_iter < 20
    (True, True)
    >>> res.coef.shape                          # one block: 5 weights and the intercept
    (1, 6)
    """

    loss: str = "logistic"
    n_blocks: int = 1

    def __post_init__(self) -> None:
        if self.loss not in glm_losses.LOSSES:
            raise ValueError(
                f"The 'loss' parameter of {type(self).__name__} must be a str among "
                f"{sorted(glm_losses.LOSSES)}. Got {self.loss!r} instead."
            )

    @property
    def quadratic(self) -> bool:  # type: ignore[override]
        return self.loss == "squared"

    @property
    def smoothed(self) -> bool:  # type: ignore[override]
        return self.loss == "hinge"

    @property
    def name(self) -> str:  # type: ignore[override]
        return {"logistic": "logreg", "squared": "ridge", "squared_hinge": "svm",
                "hinge": "svm"}[self.loss]

    def pointwise(self):
        """The loss of a row as a function of its score: ``fn(z, y, width) -> (loss, d1,
        d2)`` (see :mod:`~daskabsp.programs.glm_losses`); subclasses with other losses
        (:class:`~daskabsp.programs.GLMNewton`) override it."""
        return glm_losses.LOSSES[self.loss]

    def check_input(self, X, y) -> None:
        if self.loss == "squared":
            return
        allowed = np.arange(self.n_blocks) if self.n_blocks > 1 else np.array([0.0, 1.0])
        bad = np.setdiff1d(np.unique(y), allowed)
        if bad.size:
            raise ValueError(
                f"{type(self).__name__} needs y in {set(allowed.tolist())}; got the values "
                f"{bad[:5].tolist()}."
            )

    def shape(self, n_features: int) -> tuple[int, int]:
        return self.n_blocks, n_features + int(self.fit_intercept)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        self._accumulate(acc, self.prepare(params), X, y, sample_weight)

    def _accumulate(self, acc, p, X, y, sample_weight) -> np.ndarray | None:
        """:meth:`accumulate` with prepared ``p``; returns, with L-BFGS curvature, the rows'
        weighted second derivatives of each block (rows x blocks; ``None`` otherwise)."""
        t0 = time.perf_counter()
        theta, width, probe = p.theta, p.width, p.probe
        fn = self.pointwise()
        d = X.shape[1]
        B = theta.shape[0]
        # With L-BFGS curvature the probe's scores come from the same product as the model's.
        Z = self.scores(p, X)
        n = X.shape[0]
        acc[0] += n
        acc[1] += n if sample_weight is None else sample_weight.sum()
        curv0 = acc[3]
        if p.lbfgs:
            # per block: d1, then (with a probe) d2 times the probe's score
            R = np.empty((n, B if probe is None else 2 * B))
            D2 = np.empty((n, B))
        curvature = []
        views = self.block_views(acc, theta)
        for b, (loss, sq, rep, grad, hess) in enumerate(views):
            t = y if self.n_blocks == 1 else (y == b).astype(np.float64)
            z = Z[:, b]
            lv, d1, d2 = fn(z, t, width)
            if sample_weight is not None:
                d1 = d1 * sample_weight
                d2 = d2 * sample_weight
                wl = lv * sample_weight
            else:
                wl = lv
            total = wl.sum()
            loss[0] += total
            sq[0] += wl @ lv
            rep[0] += (glm_losses.hinge(z, t) @ (sample_weight if sample_weight is not None
                                                 else np.ones(n))
                       if self.smoothed else total)
            if p.lbfgs:
                R[:, b] = d1
                if probe is not None:
                    R[:, B + b] = d2 * Z[:, B + b]
                D2[:, b] = d2
                continue
            g = X.T @ d1
            grad[:d] += np.asarray(g).ravel()
            if self.fit_intercept:
                grad[d] += d1.sum()
            curvature.append((hess, d2))
        if p.lbfgs:
            self._lbfgs_stats(acc, theta, X, R, D2)
            # the diagonal's seconds went to acc[3]
            acc[2] += time.perf_counter() - t0 - acc[3] + curv0
            return D2
        t1 = time.perf_counter()
        for hess, d2 in curvature:
            _gram_into(hess, X, d2, self.fit_intercept, p.stride, p.offset)
        acc[2] += t1 - t0
        acc[3] += time.perf_counter() - t1
        return None

    def _lbfgs_stats(self, acc, theta, X, R, D2) -> None:
        """Add the gradients, Hessian diagonals and Hessian-vector products of all blocks,
        from two products with ``X`` (``R``: per-row gradient and probe weights)."""
        d, B = X.shape[1], theta.shape[0]
        m = theta.shape[1]
        probe = R.shape[1] > B
        GV = np.asarray(X.T @ R)
        t0 = time.perf_counter()
        Dg = diagonal_sums(X, D2)
        acc[3] += time.perf_counter() - t0
        for b, (_l, _s, _r, grad, hess) in enumerate(self.block_views(acc, theta)):
            grad[:d] += GV[:, b]
            hess[:d] += Dg[:, b]
            if self.fit_intercept:
                grad[d] += R[:, b].sum()
                hess[d] += D2[:, b].sum()
            if probe:
                hess[m:m + d] += GV[:, B + b]
                if self.fit_intercept:
                    hess[m + d] += R[:, B + b].sum()

    def full_objective(self, state_or_theta, X, y, sample_weight=None) -> float:
        """The exact objective (mean scale) at the given parameters over in-memory data."""
        theta = (state_or_theta.theta if isinstance(state_or_theta, NewtonState)
                 else np.atleast_2d(state_or_theta))
        d = X.shape[1]
        Z = X @ theta[:, :d].T
        if self.fit_intercept:
            Z += theta[:, d]
        sw = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        reg = self.reg(theta.shape[1])
        total = 0.0
        for b in range(theta.shape[0]):
            t = y if self.n_blocks == 1 else (y == b).astype(np.float64)
            if self.loss == "hinge":
                lv = glm_losses.hinge(Z[:, b], t)
            else:
                lv = self.pointwise()(Z[:, b], t, 1.0)[0]
            total += lv @ sw / sw.sum() + 0.5 * theta[b] @ (reg * theta[b])
        return float(total)
