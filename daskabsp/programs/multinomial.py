"""Multinomial (softmax) logistic regression by trust-region Newton."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import dsyrk
from scipy.special import logsumexp

from .curvature import Curvature
from .linear import add_transposed_product, diagonal_sums
from .newton import NewtonProgram
from .newton_state import HEAD, NewtonState


def _softmax_terms(Z: np.ndarray, y: np.ndarray, sample_weight):
    """Per row, the class probabilities ``P`` (softmax of the scores ``Z``), the loss
    ``log sum exp(z) - z_y``, and the score-space gradient ``G`` (``P`` less the label's
    indicator, weighted)."""
    rows = np.arange(Z.shape[0])
    yi = y.astype(np.intp)
    zy = Z[rows, yi]
    # logsumexp by hand: scipy's costs twice this in the hot loop
    zmax = Z.max(axis=1)
    P = Z - zmax[:, None]
    np.exp(P, out=P)
    psum = P.sum(axis=1)
    P /= psum[:, None]
    lv = np.log(psum)
    lv += zmax
    lv -= zy
    G = P.copy()
    G[rows, yi] -= 1.0
    if sample_weight is not None:
        G *= sample_weight[:, None]
    return P, lv, G


@dataclass
class MultinomialNewton(NewtonProgram):
    """Softmax regression over ``n_classes`` classes, by trust-region Newton.

    Minimises scikit-learn's multinomial ``LogisticRegression`` objective on the mean scale:
    ``sum_i s_i (log sum_k exp(z_ik) - z_iy) / sum_i s_i + l2 / 2 ||W||^2`` with one
    coefficient row and one (unpenalised) intercept per class; the target holds class codes
    ``0 .. n_classes-1``. The parameters form one block of ``n_classes * (n_features + 1)``
    values, class by class.

    The Hessian of ``K`` classes and ``p`` parameters per class has ``(K p)^2`` entries.
    Up to ``max_hessian`` parameters it is used whole; above, the partitions compute its
    diagonal and its product with the last step (the coupling between classes included), and
    the driver takes L-BFGS steps (:mod:`~daskabsp.programs.curvature`).

    Parameters
    ----------
    n_classes : int, default=3
        Number of classes.
    l2, l2_intercept, fit_intercept, tol, max_hessian, hessian_stride, start
        See :class:`~daskabsp.programs.newton.NewtonProgram`.

    Examples
    --------
    >>> import daskabsp
    >>> from daskabsp.programs import MultinomialNewton
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=3_000, n_features=6, n_informative=4,
    ...                            n_classes=3, random_state=0)
    >>> res = daskabsp.fit(MultinomialNewton(n_classes=3, l2=1.0 / len(y)), X, y)
    >>> res.converged, res.coef.shape           # per class: 6 weights and the intercept
    (True, (3, 7))
    """

    n_classes: int = 3

    @property
    def name(self) -> str:  # type: ignore[override]
        return "softmax"

    def check_input(self, X, y) -> None:
        bad = np.setdiff1d(np.unique(y), np.arange(self.n_classes))
        if bad.size:
            raise ValueError(
                f"{type(self).__name__} needs y in 0 .. {self.n_classes - 1}; got the values "
                f"{bad[:5].tolist()}."
            )

    def shape(self, n_features: int) -> tuple[int, int]:
        return 1, self.n_classes * (n_features + int(self.fit_intercept))

    def curvature(self, m: int) -> Curvature:
        K = self.n_classes
        p = m // K
        flat = tuple(range(p - 1, m, p)) if self.fit_intercept and self.l2_intercept == 0 \
            else ()
        if m <= self.max_hessian:
            return Curvature("full", m, flat=flat)
        return Curvature("lbfgs", m)

    def project(self, theta: np.ndarray) -> np.ndarray:
        """Unpenalised intercepts are defined up to a common constant: centre them (as the
        full Newton step and scikit-learn's solvers do from zero)."""
        if not self.fit_intercept or self.l2_intercept != 0:
            return theta
        W = theta.reshape(self.n_classes, -1).copy()
        W[:, -1] -= W[:, -1].mean()
        return W.reshape(theta.shape)

    def reg(self, m: int) -> np.ndarray:
        p = m // self.n_classes
        per = np.full(p, float(self.l2))
        if self.fit_intercept:
            per[-1] = float(self.l2_intercept)
        return np.tile(per, self.n_classes)

    def _scores(self, W: np.ndarray, X) -> np.ndarray:
        d = X.shape[1]
        Z = np.asarray(X @ W[:, :d].T)
        if self.fit_intercept:
            Z += W[:, d]
        return Z

    def score_coefficients(self, theta: np.ndarray) -> np.ndarray:
        return theta[0].reshape(self.n_classes, -1)

    def accumulate(self, acc, params, X, y, sample_weight) -> None:
        tp = self.prepare(params)
        t0 = time.perf_counter()
        K = self.n_classes
        Z = self.scores(tp, X)
        V = None
        if tp.probe is not None:
            Z, V = Z[:, :K], Z[:, K:]
        P, lv, G = _softmax_terms(Z, y, sample_weight)
        n = X.shape[0]
        acc[0] += n
        acc[1] += sample_weight.sum() if sample_weight is not None else n
        wl = lv * sample_weight if sample_weight is not None else lv
        if tp.lbfgs:
            self._add_lbfgs(acc, tp, X, P, G, V, wl, lv, sample_weight, t0)
        else:
            self._add_full(acc, tp, X, P, G, wl, lv, sample_weight, t0)

    def _add_lbfgs(self, acc, tp, X, P, G, V, wl, lv, sample_weight, t0: float) -> None:
        """A chunk's loss sums, gradient, Hessian diagonal and (with a probe ``V``, the
        scores of the probe direction) Hessian-vector product, for L-BFGS steps."""
        K, d = self.n_classes, X.shape[1]
        sP = P * sample_weight[:, None] if sample_weight is not None else P
        # Row i's Hessian times the probe, in score space: s_i (P_i * v_i - P_i (P_i . v_i)),
        # from the same product with X as the gradient.
        U = None if V is None else sP * (V - (P * V).sum(axis=1, keepdims=True))
        head, Gf, Df, Vf = self._lbfgs_views(acc, tp.theta.shape[1] // K)
        head[0] += wl.sum()
        head[1] += wl @ lv
        head[2] += wl.sum()
        if sp.issparse(X):
            add_transposed_product(Gf[:d], X, G)
            if U is not None:
                add_transposed_product(Vf[:d], X, U)
        elif U is None:
            Gf[:d] += X.T @ G
        else:
            GU = X.T @ np.hstack([G, U])
            Gf[:d] += GU[:, :K]
            Vf[:d] += GU[:, K:]
        if self.fit_intercept:
            Gf[d] += G.sum(axis=0)
            if U is not None:
                Vf[d] += U.sum(axis=0)
        t1 = time.perf_counter()
        acc[2] += t1 - t0
        Dm = sP * (1.0 - P)
        if sp.issparse(X):
            add_transposed_product(Df[:d], X, Dm, squared=True)
        else:
            Df[:d] += diagonal_sums(X, Dm)
        if self.fit_intercept:
            Df[d] += Dm.sum(axis=0)
        acc[3] += time.perf_counter() - t1

    def _add_full(self, acc, tp, X, P, G, wl, lv, sample_weight, t0: float) -> None:
        """A chunk's loss sums, gradient and full Hessian (from one row in ``tp.stride``,
        weighted up to the chunk, when the Hessian is sub-sampled)."""
        K, n, d = self.n_classes, X.shape[0], X.shape[1]
        ((loss, sq, rep, grad, hess),) = self.block_views(acc, tp.theta)
        p = tp.theta.shape[1] // K
        loss[0] += wl.sum()
        sq[0] += wl @ lv
        rep[0] += wl.sum()
        g = grad.reshape(K, p)
        if self.fit_intercept:
            g[:, d] += G.sum(axis=0)
        g[:, :d] += np.asarray(X.T @ G).T
        t1 = time.perf_counter()
        acc[2] += t1 - t0
        s = sample_weight if sample_weight is not None else np.ones(n)
        if tp.stride > 1:
            # A sub-sampled Hessian: rows offset, offset + stride, ... weighted up to the chunk.
            rows = slice(tp.offset, None, tp.stride)
            X, P, s = X[rows], P[rows], s[rows]
            if X.shape[0] == 0:
                return
            s = s * (n / X.shape[0])
            n = X.shape[0]
        sP = P * s[:, None]
        Xt = X.toarray() if sp.issparse(X) else X
        if self.fit_intercept:
            Xt = np.hstack([Xt, np.ones((n, 1))])
        H = hess.reshape(K * p, K * p)
        for k in range(K):
            H[k * p:(k + 1) * p, k * p:(k + 1) * p] += Xt.T @ (Xt * sP[:, k:k + 1])
        R = (np.sqrt(s)[:, None] * P)[:, :, None] * Xt[:, None, :]
        R = R.reshape(n, K * p)
        # H -= R^T R, in place and on one triangle only (half the work of the dominant
        # term); combine_round restores the symmetry.
        dsyrk(-1.0, R.T, beta=1.0, c=H.T, trans=0, lower=0, overwrite_c=1)
        acc[3] += time.perf_counter() - t1

    def _lbfgs_views(self, acc: np.ndarray, p: int):
        """With L-BFGS curvature the statistics hold, after the block's three loss sums, the
        gradient, the Hessian's diagonal and the Hessian-vector product as three
        feature-major ``(p, K)`` arrays (a chunk's products with ``X`` are accumulated into
        them in place); :meth:`block_views` gives them class-major, as the parameters."""
        K = self.n_classes
        o = HEAD
        m = K * p
        return (acc[o:o + 3], acc[o + 3:o + 3 + m].reshape(p, K),
                acc[o + 3 + m:o + 3 + 2 * m].reshape(p, K),
                acc[o + 3 + 2 * m:o + 3 + 3 * m].reshape(p, K))

    def block_views(self, acc: np.ndarray, theta: np.ndarray):
        m = theta.shape[1]
        if self.curvature(m).kind != "lbfgs":
            return super().block_views(acc, theta)
        head, Gf, Df, Vf = self._lbfgs_views(acc, m // self.n_classes)
        # copies, class by class (the driver only reads them)
        return [(head[0:1], head[1:2], head[2:3], Gf.T.ravel(),
                 np.concatenate([Df.T.ravel(), Vf.T.ravel()]))]

    def coefficients(self, state: NewtonState) -> np.ndarray:
        return state.theta[0].reshape(self.n_classes, -1)

    def full_objective(self, coef: np.ndarray, X, y, sample_weight=None) -> float:
        """The exact objective (mean scale) of ``coef`` of shape (n_classes, n_params)."""
        W = np.asarray(coef).reshape(self.n_classes, -1)
        Z = self._scores(W, X)
        n = X.shape[0]
        s = np.ones(n) if sample_weight is None else sample_weight
        lv = logsumexp(Z, axis=1) - Z[np.arange(n), y.astype(np.intp)]
        reg = self.reg(W.size)
        return float(lv @ s / s.sum() + 0.5 * W.ravel() @ (reg * W.ravel()))
