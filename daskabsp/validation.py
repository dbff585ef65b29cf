"""Checks of fit arguments, in scikit-learn's wording, run before anything is submitted."""

from __future__ import annotations

import numbers

import dask.array as da
import numpy as np
from sklearn.utils import check_array, check_consistent_length, column_or_1d


def check_int(value, name: str, owner: str, *, low: int = 1, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        extra = " or None" if none_ok else ""
        raise ValueError(
            f"The '{name}' parameter of {owner} must be an int in the range [{low}, inf)"
            f"{extra}. Got {value!r} instead."
        )


def check_real(value, name: str, owner: str, *, low: float = 0.0, closed: bool = True,
               none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if not ok or value < low or (not closed and value == low):
        bracket = "[" if closed else "("
        extra = " or None" if none_ok else ""
        raise ValueError(
            f"The '{name}' parameter of {owner} must be a float in the range "
            f"{bracket}{low}, inf){extra}. Got {value!r} instead."
        )


def check_quota(value, owner: str) -> None:
    if value is None:
        return
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value <= 1:
        return
    raise ValueError(
        f"The 'quota' parameter of {owner} must be an int in the range [1, inf), a float in "
        f"the range (0, 1] or None. Got {value!r} instead."
    )


def check_data(X, y, sample_weight, *, needs_y: bool):
    """Validate the fit input; in-memory input is converted to float64 ndarray or CSR."""
    if isinstance(X, da.Array):
        return _check_dask(X, y, sample_weight, needs_y=needs_y)
    # dtype="numeric" rejects strings (an explicit float dtype would parse "1.5" silently)
    X = check_array(X, accept_sparse="csr", dtype="numeric", input_name="X")
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    if needs_y:
        if y is None:
            raise ValueError("This program requires y to be passed, but the target y is None.")
        y = column_or_1d(y, warn=True).astype(np.float64, copy=False)
        check_consistent_length(X, y)
        if not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
    if sample_weight is not None:
        sample_weight = column_or_1d(sample_weight).astype(np.float64, copy=False)
        check_consistent_length(X, sample_weight)
    return X, y, sample_weight


def check_source(source, X) -> tuple:
    """``fit``'s ``source``: the in-memory ``(X, y, sample_weight)`` (None where there is
    none) whose rows a dask ``X`` holds, in the same order."""
    if not (isinstance(source, tuple) and len(source) == 3):
        raise ValueError("source must be a tuple (X, y, sample_weight) of in-memory arrays "
                         f"(None where there is none), got {source!r:.80}.")
    if any(isinstance(a, da.Array) for a in source):
        raise ValueError("source must hold in-memory arrays (the rows the dask X was made "
                         "from), got a dask array.")
    shape = getattr(source[0], "shape", None)
    if shape != X.shape:
        raise ValueError(f"source's X must have the shape of X, {X.shape}, got {shape}.")
    for name, a in zip(("y", "sample_weight"), source[1:], strict=True):
        if a is not None and len(a) != X.shape[0]:
            raise ValueError(f"source's {name} must have one entry per row of X "
                             f"({X.shape[0]}), got {len(a)}.")
    return source


def _check_dask(X, y, sample_weight, *, needs_y: bool):
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D dask array, got a {X.ndim}D array instead.")
    if X.dtype.kind not in "biuf":
        raise ValueError(
            f"X must have a numeric dtype (bool, int, unsigned or float). Got {X.dtype} instead."
        )
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(
            "X has unknown chunk sizes; call X.compute_chunk_sizes() before fitting."
        )
    X = X.astype(np.float64) if X.dtype.kind != "f" else X
    for a, _name in ((y, "y"), (sample_weight, "sample_weight")):
        if a is None:
            continue
        if a.shape[0] != X.shape[0]:
            raise ValueError(
                "Found input variables with inconsistent numbers of samples: "
                f"[{X.shape[0]}, {a.shape[0]}]"
            )
    if needs_y and y is None:
        raise ValueError("This program requires y to be passed, but the target y is None.")
    if y is not None and not isinstance(y, da.Array):
        y = da.from_array(column_or_1d(y).astype(np.float64), chunks=(X.chunks[0],))
    if sample_weight is not None and not isinstance(sample_weight, da.Array):
        sample_weight = da.from_array(np.asarray(sample_weight, dtype=np.float64),
                                      chunks=(X.chunks[0],))
    return X, y, sample_weight
