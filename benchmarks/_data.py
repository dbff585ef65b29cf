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
