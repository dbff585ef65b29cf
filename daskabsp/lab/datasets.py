"""Synthetic data whose shape makes stragglers: skewed sparse rows, rows in an order.

* :func:`skewed_sparse`: sparse CSR rows whose non-zero counts follow a heavy-tailed (Pareto)
  law, denser in some partitions than in others, so partitions of equal row counts take
  unequal time to scan (the paper's "uneven partitions of sparse data").
* :func:`order_rows`: the same rows sorted by their label or by a feature, within each
  partition, so that the rows a partial pass over a partition sees are a biased sample (rows
  that are not exchangeable).
* :func:`text_like`: TF-IDF-like bag-of-words rows (Zipf word frequencies) and a binary
  target, the sparse shape of text classification.

Both use the engine's split of in-memory input (:func:`daskabsp.engine.partitions.split_rows`): fit
with ``n_partitions`` equal to the one given here and partition ``p`` of the fit is block ``p``.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from ..engine.partitions import split_rows


def _check_positive(value, name: str, owner: str, low: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > low:
        raise ValueError(f"The {name!r} parameter of {owner} must be a number above {low}. "
                         f"Got {value!r} instead.")


def skewed_sparse(
    n_rows: int,
    n_features: int,
    *,
    n_partitions: int = 2,
    skew: float = 8.0,
    mean_nnz: float = 20.0,
    tail: float = 1.5,
    seed: int | None = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Sparse rows with heavy-tailed non-zero counts and partitions of unequal density.

    Partition ``p`` (of ``n_partitions`` near-equal row blocks) has a density factor
    ``skew ** (p / (n_partitions - 1))``: the last partition's rows hold ``skew`` times more
    non-zeros on average than the first's. Within a partition a row's non-zero count is
    ``x_m (1 + Pareto(tail))`` (rounded, clipped to ``[1, n_features]``), so a few rows are far
    denser than the rest; ``x_m`` is set so that the mean over all rows is about ``mean_nnz``.
    Columns are uniform (duplicates in a row are merged); values are normal, scaled by
    ``1 / sqrt(nnz)`` so every row has an expected squared norm of 1.

    Labels come from a planted linear model: ``y = 1`` with probability
    ``expit(3 * (x . w))``, ``w`` standard normal.

    Parameters
    ----------
    n_rows, n_features : int
        Shape of ``X``.
    n_partitions : int, default=2
        Number of row blocks of different density (the fit's ``n_partitions``).
    skew : float, default=8.0
        Density of the densest partition over the sparsest's (>= 1; 1: no skew between
        partitions, heavy-tailed rows still).
    mean_nnz : float, default=20.0
        Mean non-zeros per row over the whole matrix.
    tail : float, default=1.5
        Pareto shape of the non-zero counts (> 1; smaller: heavier tail).
    seed : int or None, default=0
        Random seed.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,), int64 in {0, 1}
    """
    owner = "skewed_sparse"
    _check_positive(skew, "skew", owner, low=1.0 - 1e-12)
    _check_positive(mean_nnz, "mean_nnz", owner)
    _check_positive(tail, "tail", owner, low=1.0)
    if n_partitions < 1 or n_partitions > n_rows:
        raise ValueError(f"The 'n_partitions' parameter of {owner} must be an int in the range "
                         f"[1, n_rows]. Got {n_partitions!r} instead.")
    rng = np.random.default_rng(seed)
    sizes = np.asarray(split_rows(n_rows, n_partitions))
    factor = skew ** (np.arange(n_partitions) / max(n_partitions - 1, 1))
    # mean of x_m (1 + Pareto(a)) is x_m a / (a - 1); weight the factors by the block sizes
    x_m = mean_nnz * (tail - 1.0) / tail / (factor @ sizes / n_rows)
    scale = np.repeat(x_m * factor, sizes)
    nnz = np.clip(np.rint(scale * (1.0 + rng.pareto(tail, n_rows))), 1, n_features)
    nnz = nnz.astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    cols = rng.integers(0, n_features, indptr[-1])
    vals = rng.standard_normal(indptr[-1]) / np.sqrt(np.repeat(nnz, nnz))
    X = sp.csr_matrix((vals, cols, indptr), shape=(n_rows, n_features))
    X.sum_duplicates()
    w = rng.standard_normal(n_features)
    y = (rng.random(n_rows) < expit(3.0 * (X @ w))).astype(np.int64)
    return X, y


def order_rows(X, y, *, by: str | int = "label", n_partitions: int | None = None):
    """The rows of ``X`` and ``y`` sorted by label or by a feature, within each partition.

    A partition whose rows are sorted is not a random sample of itself: the first rows of a
    scan are all of one class (or all small values of the feature), so statistics over a
    partial pass are biased. The rows of each partition stay in that partition, so the
    partitions hold the same rows as before (sorted, not moved).

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    by : "label" or int, default="label"
        Sort key: the label, or the values of feature ``by``. Ties keep their order.
    n_partitions : int, optional
        Sort within each of the engine's ``n_partitions`` row blocks; default: the whole.

    Returns
    -------
    X_sorted, y_sorted
        Same types and shapes as the inputs.
    """
    y = np.asarray(y)
    if by == "label":
        key = y
    elif isinstance(by, (int, np.integer)) and not isinstance(by, bool):
        col = X[:, [int(by)]]
        key = np.asarray(col.toarray() if sp.issparse(col) else col).ravel()
    else:
        raise ValueError("The 'by' parameter of order_rows must be 'label' or an int feature "
                         f"index. Got {by!r} instead.")
    bounds = np.cumsum([0, *split_rows(len(y), n_partitions or 1)])
    order = np.concatenate([lo + np.argsort(key[lo:hi], kind="stable")
                            for lo, hi in itertools.pairwise(bounds)])
    return X[order], y[order]


def text_like(n_rows: int = 200_000, n_features: int = 20_000, nnz_per_row: int = 40,
              seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    """Sparse bag-of-words-like rows and a binary target.

    Feature ``j`` occurs with probability proportional to ``1 / (j + 10)`` (Zipf's law, as
    word frequencies), so a few features are in most rows and most are rare; each row has
    ``nnz_per_row`` distinct features with log-normal counts, scaled to unit L2 norm as TF-IDF
    rows are. The target follows a logistic model whose weights are sparse and larger on rare
    features (as informative words are), with the intercept set for about 1/3 positives.

    Parameters
    ----------
    n_rows, n_features : int
        The shape of ``X``.
    nnz_per_row : int
        Words drawn per row (duplicates merged, so a row may hold fewer).
    seed : int
        Seed of the random generator.

    Returns
    -------
    X : csr_matrix of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,), int64 in {0, 1}
    """
    rng = np.random.default_rng(seed)
    freq = 1.0 / (np.arange(n_features) + 10.0)
    freq /= freq.sum()
    # nnz_per_row draws per row; duplicates are merged by the CSR conversion
    cols = rng.choice(n_features, size=(n_rows, nnz_per_row), p=freq)
    vals = rng.lognormal(0.0, 0.5, size=(n_rows, nnz_per_row))
    rows = np.repeat(np.arange(n_rows), nnz_per_row)
    X = sp.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(n_rows, n_features))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    w = rng.normal(0.0, 1.0, n_features) * (rng.random(n_features) < 0.2)
    w *= 1.0 + 4.0 * (np.arange(n_features) > n_features // 10)
    z = X @ w
    z -= np.quantile(z, 2 / 3)
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-3.0 * z))).astype(np.int64)
    return X.tocsr(), y
