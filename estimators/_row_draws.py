"""Random draws over the *distinct* rows of a weighted data set, decided by row content.

The k-means initialisation draws rows at random. For a fit with ``sample_weight`` to equal the
fit on the data with each row repeated ``w`` times, every draw must depend only on the multiset
of rows, not on where the rows sit or how a weight is spelled (one row of weight 2 or the same
row twice, in one partition or in two). Here that holds by construction:

* equal rows are one *value*, identified by a 64-bit hash of the row's content (dense and CSR
  rows with the same values hash alike; ``-0.0`` counts as ``0.0``);
* a value's weight is the total weight of its rows over all partitions
  (:func:`distinct_rows` per partition, :func:`merge_tables` for values that occur in several
  partitions, :func:`with_shared` to bring the totals back);
* a value's uniform number for a draw is a function of its hash, the fit's seed and the
  draw's stream (:func:`uniforms`), so twin rows draw the same number;
* a draw of ``m`` values with probabilities proportional to ``mass`` (weight, or weight times
  squared distance) is the exponential race of Efraimidis and Spirakis over values: the ``m``
  smallest ``-log(u) / mass`` win, ties broken by hash (:func:`race_times`, :func:`smallest`).
  Each partition offers its own ``m`` smallest and the union holds the overall ``m`` smallest,
  because a value's time is the same in every partition that holds it.

Everything here is pure numpy, so it is tested without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
#: Rows of a dense block hashed at once: bounds the temporaries to ~1 MB whatever the block.
_HASH_FLOATS = 1 << 17


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, in place on a uint64 array (numpy arrays wrap on overflow)."""
    z ^= z >> _U64(30)
    z *= _U64(0xBF58476D1CE4E5B9)
    z ^= z >> _U64(27)
    z *= _U64(0x94D049BB133111EB)
    z ^= z >> _U64(31)
    return z


def _column_keys(n_features: int) -> np.ndarray:
    keys = np.arange(1, n_features + 1, dtype=_U64)
    keys *= _GOLDEN
    return _mix(keys)


def _entry_hashes(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """A hash per (column, value) entry; 0 for a zero value, so that explicit and implicit
    zeros, and dense and sparse rows, hash alike."""
    bits = (np.asarray(values, dtype=np.float64) + 0.0).view(_U64)  # + 0.0: -0.0 -> 0.0
    e = _mix(bits ^ keys)
    e[bits == 0] = 0
    return e


def row_hashes(X) -> np.ndarray:
    """A 64-bit hash of the content of each row of a dense array or a CSR matrix.

    The hash is a sum (mod 2**64) of mixed (column, value) hashes over the nonzero entries,
    finalised once more: equal rows hash equal, whatever their dtype (float32 values hash as
    their float64 equals), storage (dense or CSR, explicit zeros or not) or position.
    Distinct rows collide with probability about ``2**-64`` per pair.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)

    Returns
    -------
    ndarray of shape (n_samples,), dtype uint64
    """
    n, d = X.shape
    keys = _column_keys(d)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        csum = np.zeros(X.nnz + 1, dtype=_U64)
        np.cumsum(_entry_hashes(X.data, keys[X.indices]), out=csum[1:])
        sums = csum[X.indptr[1:]] - csum[X.indptr[:-1]]
    else:
        X = np.asarray(X)
        sums = np.empty(n, dtype=_U64)
        step = max(1, _HASH_FLOATS // max(d, 1))
        for i in range(0, n, step):
            np.sum(_entry_hashes(X[i:i + step], keys), axis=1, dtype=_U64,
                   out=sums[i:i + step])
    sums += _GOLDEN
    return _mix(sums)


def uniforms(hashes: np.ndarray, seed: int, stream: int) -> np.ndarray:
    """Uniform numbers in (0, 1), one per hash, for the draw ``stream`` of a fit seeded by
    ``seed``: equal hashes get equal numbers; another seed or stream, independent ones.

    Parameters
    ----------
    hashes : ndarray of uint64
    seed, stream : int
        Non-negative integers below ``2**64``.

    Returns
    -------
    ndarray of float64, same shape as ``hashes``
    """
    key = _mix(np.array([stream], dtype=_U64) + _GOLDEN)
    key ^= np.array([seed], dtype=_U64)
    z = _mix(hashes ^ _mix(key))
    z >>= _U64(11)
    u = z.astype(np.float64)
    u += 0.5
    u *= 2.0**-53
    return u


@dataclass(frozen=True)
class DistinctRows:
    """The distinct rows (values) of one partition.

    Attributes
    ----------
    hashes : ndarray of uint64, sorted, unique
        The values' hashes.
    rows : ndarray of int
        For each value, the index of one of its rows in the partition (the first).
    weights : ndarray of float64
        For each value, the total weight of its rows: in this partition after
        :func:`distinct_rows`, over all partitions after :func:`with_shared`.
    """

    hashes: np.ndarray
    rows: np.ndarray
    weights: np.ndarray


def _group(hashes: np.ndarray, *sums: np.ndarray) -> tuple:
    """Sorted unique ``hashes``, the position of each one's first occurrence, and the sums of
    each of ``sums`` over equal hashes."""
    order = np.argsort(hashes, kind="stable")
    hs = hashes[order]
    if hs.size == 0:
        return (hs, order, *(s[order] for s in sums))
    start = np.flatnonzero(np.concatenate(([True], hs[1:] != hs[:-1])))
    return (hs[start], order[start], *(np.add.reduceat(s[order], start) for s in sums))


def distinct_rows(hashes: np.ndarray, weights: np.ndarray | None = None) -> DistinctRows:
    """Group a partition's rows by hash.

    Parameters
    ----------
    hashes : ndarray of uint64 of shape (n_rows,)
        :func:`row_hashes` of the partition.
    weights : ndarray of shape (n_rows,) or None
        Row weights (None: all 1).

    Returns
    -------
    DistinctRows
    """
    w = np.ones(hashes.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    h, first, total = _group(hashes, w)
    return DistinctRows(h, first, total)


@dataclass(frozen=True)
class WeightTable:
    """Total weights of values over several partitions, and in how many partitions each
    value occurs (``hashes`` sorted and unique)."""

    hashes: np.ndarray
    weights: np.ndarray
    parts: np.ndarray

    @classmethod
    def of(cls, rows: DistinctRows) -> WeightTable:
        """The table of one partition."""
        return cls(rows.hashes, rows.weights, np.ones(rows.hashes.shape[0], dtype=np.int64))


def merge_tables(*tables: WeightTable) -> WeightTable:
    """The table of the union of the partitions of ``tables`` (a step of a tree reduction)."""
    h, _first, w, c = _group(np.concatenate([t.hashes for t in tables]),
                             np.concatenate([t.weights for t in tables]),
                             np.concatenate([t.parts for t in tables]))
    return WeightTable(h, w, c)


def shared_values(table: WeightTable) -> WeightTable:
    """The values of ``table`` that occur in more than one partition: the only ones whose
    total weight a partition cannot know by itself."""
    keep = table.parts > 1
    return WeightTable(table.hashes[keep], table.weights[keep], table.parts[keep])


def with_shared(rows: DistinctRows, shared: WeightTable) -> DistinctRows:
    """``rows`` with the total weight over all partitions for the values in ``shared``."""
    if shared.hashes.size == 0 or rows.hashes.size == 0:
        return rows
    pos = np.minimum(np.searchsorted(shared.hashes, rows.hashes), shared.hashes.size - 1)
    hit = shared.hashes[pos] == rows.hashes
    if not hit.any():
        return rows
    w = rows.weights.copy()
    w[hit] = shared.weights[pos[hit]]
    return DistinctRows(rows.hashes, rows.rows, w)


def race_times(hashes: np.ndarray, mass: np.ndarray, seed: int, stream: int,
               exclude: np.ndarray | None = None) -> np.ndarray:
    """Arrival times ``-log(u) / mass`` of the exponential race (smallest first): the
    winners of a race are drawn without replacement with probabilities proportional to
    ``mass``. Values with no mass, and those in ``exclude`` (sorted hashes), never arrive
    (``inf``).

    Parameters
    ----------
    hashes : ndarray of uint64 of shape (n,)
        The values' hashes.
    mass : ndarray of shape (n,)
        Weight (times squared distance) of each value.
    seed, stream : int
        See :func:`uniforms`.
    exclude : ndarray of uint64, sorted, or None
        Hashes that may not be drawn (values drawn already).

    Returns
    -------
    ndarray of float64 of shape (n,)
    """
    t = np.full(hashes.shape[0], np.inf)
    live = mass > 0
    if exclude is not None and exclude.size:
        live &= ~np.isin(hashes, exclude, assume_unique=True)
    u = uniforms(hashes[live], seed, stream)
    t[live] = -np.log(u) / mass[live]
    return t


def smallest(times: np.ndarray, hashes: np.ndarray, m: int) -> np.ndarray:
    """Indices of the (at most) ``m`` smallest finite ``times``, in increasing order of
    (time, hash): the winners of the race, in an order that depends on values only."""
    live = np.flatnonzero(np.isfinite(times))
    if live.size > m:
        cut = np.partition(times[live], m - 1)[m - 1]
        live = live[times[live] <= cut]  # ties at the cut are broken by hash below
    order = np.lexsort((hashes[live], times[live]))[:m]
    return live[order]


def pick(times: np.ndarray, hashes: np.ndarray, m: int) -> np.ndarray:
    """Merge the partitions' offers (concatenated): the ``m`` winners among distinct hashes.

    A value offered by several partitions (its rows are in several) counts once, with its
    smallest time (the partitions' times for it differ at most by rounding of the distance).

    Returns
    -------
    ndarray of int
        Indices into the offers, of the winners in increasing order of (time, hash).
    """
    order = np.lexsort((times, hashes))
    hs = hashes[order]
    first = np.concatenate(([True], hs[1:] != hs[:-1])) if hs.size else np.zeros(0, bool)
    unique = order[first]
    return unique[smallest(times[unique], hashes[unique], m)]
