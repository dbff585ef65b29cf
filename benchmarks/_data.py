"""Data sets of the sizes and shapes users bring, generated (the benchmarks download nothing)."""

from __future__ import annotations

import numpy as np

from daskabsp.lab.datasets import text_like

__all__ = ["dense_classification", "dense_regression", "text_like"]


def dense_classification(n_rows: int, n_features: int, n_classes: int = 2,
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features and labels drawn from a softmax (logistic for two classes)
    model with random coefficients of norm about 2 per class."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    W = rng.standard_normal((n_features, n_classes)) * (2.0 / np.sqrt(n_features))
    Z = X @ W
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    u = rng.random((n_rows, 1))
    y = np.minimum((P.cumsum(axis=1) < u).sum(axis=1), n_classes - 1)
    return X, y.astype(np.int64)


def dense_regression(n_rows: int, n_features: int,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features, a linear target with unit-variance noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    w = rng.standard_normal(n_features)
    return X, X @ w + 1.5 + rng.standard_normal(n_rows)


def poisson_counts(n_rows: int, n_features: int,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal features and Poisson counts with a log-linear mean (claim counts with
    a mean of about 1.6 per row)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    w = rng.standard_normal(n_features) * (0.5 / np.sqrt(n_features))
    return X, rng.poisson(np.exp(X @ w + 0.3)).astype(np.float64)


def sparse_truth_regression(n_rows: int, n_features: int, n_informative: int = 10,
                            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Correlated normal features (neighbours correlated 0.5) and a target that depends on
    ``n_informative`` of them, with unit-variance noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    X[:, 1:] += 0.5 * X[:, :-1]
    w = np.zeros(n_features)
    w[rng.choice(n_features, n_informative, replace=False)] = rng.choice([-1.0, 1.0],
                                                                         n_informative)
    return X, X @ w + 2.0 + rng.standard_normal(n_rows)


def low_rank(n_rows: int, n_features: int, rank: int = 20,
             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows near a ``rank``-dimensional subspace (decaying scales) plus isotropic noise, off
    the origin; the target is zeros (PCA needs none)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((n_features, rank)))[0]
    scales = 10.0 * 0.8 ** np.arange(rank)
    X = (rng.standard_normal((n_rows, rank)) * scales) @ basis.T
    X += rng.standard_normal((n_rows, n_features))
    X += rng.uniform(-3.0, 3.0, n_features)
    return X, np.zeros(n_rows)
