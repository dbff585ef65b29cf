"""Checks of fit arguments, in scikit-learn's wording, run before anything is submitted."""

from __future__ import annotations

from numbers import Integral, Real

import dask.array as da
import numpy as np
from sklearn.utils import check_array, check_consistent_length, column_or_1d
from sklearn.utils._param_validation import (
    Hidden,
    Interval,
    StrOptions,
    validate_parameter_constraints,
)

from .policies import SYNC_NAMES, Policy

__all__ = ["FIT_CONSTRAINTS", "OPTION_CONSTRAINTS", "check_options"]

#: What each engine option may be, in scikit-learn's form of parameter constraints:
#: :func:`daskabsp.fit` checks its arguments against these, and the estimators take the same
#: lists for their engine options.
OPTION_CONSTRAINTS: dict[str, list] = {
    "sync": [StrOptions(set(SYNC_NAMES)), Policy],
    "n_partitions": [Interval(Integral, 1, None, closed="left"), None],
    "quota": [Interval(Integral, 1, None, closed="left"),
              Interval(Real, 0, 1, closed="right"), None],
    "chunk_target": [Interval(Real, 0, None, closed="neither"), None],
    "verbose": [Interval(Integral, 0, None, closed="left"), bool, Hidden(np.bool_)],
}
#: The other arguments of :func:`daskabsp.fit`.
FIT_CONSTRAINTS: dict[str, list] = {
    **OPTION_CONSTRAINTS,
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left"), None],
    "record_params": ["boolean"],
}


def check_options(params: dict, owner: str) -> None:
    """Raise scikit-learn's ``InvalidParameterError`` (a ``ValueError``) for the first of
    ``params`` that none of its :data:`FIT_CONSTRAINTS` allow, in scikit-learn's wording,
    before anything is submitted."""
    validate_parameter_constraints({k: FIT_CONSTRAINTS[k] for k in params}, params,
                                   caller_name=owner)


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
