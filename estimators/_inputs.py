"""Turning user input (numpy, CSR, pandas, dask, xarray) into what the engine and predict use.

In-memory input goes through scikit-learn's ``validate_data`` as usual. Dask arrays, dask
DataFrames and dask-backed ``xarray.DataArray`` objects are never materialised on the client:
their shape and dtype are checked lazily, and their feature names (DataFrame columns, or the
coordinate of the DataArray's feature dimension) are checked with scikit-learn's own logic
through a zero-row pandas stand-in.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

from ._callbacks import caller_stacklevel
from ._validation import check_sample_weight

FLOATS = [np.float64, np.float32]


def is_dask_array(a: Any) -> bool:
    return isinstance(a, da.Array)


def is_dask_frame(a: Any) -> bool:
    """A dask DataFrame or Series (without importing dask.dataframe eagerly)."""
    return type(a).__module__.startswith("dask.dataframe") and hasattr(a, "to_dask_array")


def is_xarray(a: Any) -> bool:
    return type(a).__name__ == "DataArray" and type(a).__module__.startswith("xarray")


@dataclass
class Unpacked:
    """Input reduced to an array (numpy, CSR or dask) and its feature names, if any."""

    data: Any
    names: list | None
    lazy: bool


def _unpack(X) -> Unpacked:
    if is_xarray(X):
        if X.ndim != 2:
            raise ValueError(
                f"Expected a 2D DataArray (samples x features), got {X.ndim} dimensions "
                f"{X.dims} instead."
            )
        feature_dim = X.dims[1]
        names = list(X.coords[feature_dim].values) if feature_dim in X.coords else None
        return Unpacked(X.data, names, is_dask_array(X.data))
    if is_dask_frame(X):
        names = list(X.columns) if hasattr(X, "columns") else None
        return Unpacked(_frame_values(X), names, True)
    return Unpacked(X, None, is_dask_array(X))


def _frame_values(frame):
    """A dask DataFrame's or Series' values as a dask array whose chunk sizes are known.

    Not ``to_dask_array(lengths=True)``: on columns selected from ``read_parquet``, Dask's
    optimiser fuses partitions when it computes their lengths, and the lengths then do not
    match the partitions (dask/dask#12411: "The number of items in 'lengths' does not match
    the number of partitions"). The array's own chunk sizes, computed from its blocks, do.
    """
    values = frame.to_dask_array()
    values.compute_chunk_sizes()
    return values


def _vector(y):
    """A target or weight vector as numpy or dask (DataArray and dask Series unwrapped)."""
    if y is None:
        return None
    if is_xarray(y):
        y = y.data
    if is_dask_frame(y):
        y = _frame_values(y)
    return y


def _proxy(names: list | None, n_features: int):
    """A zero-row stand-in for ``validate_data(skip_check_array=True)``: it carries the
    number of features and the feature names of a lazy or xarray input."""
    if names is None:
        return np.empty((0, n_features))
    return pd.DataFrame(columns=pd.Index(names))


def _check_lazy_matrix(X) -> Any:
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead.")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"dtype={X.dtype} is not supported: X must be numeric.")
    if X.shape[1] == 0:
        raise ValueError(
            f"0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
        )
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first.")
    if X.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of "
                         "1 is required.")
    if X.dtype.kind != "f":
        X = X.astype(np.float64)
    return X.rechunk({1: -1})


def _align(v, X, name: str):
    """A numpy or dask vector ``v`` as a dask vector chunked like the rows of dask ``X``."""
    if v is None:
        return None
    if not is_dask_array(v):
        v = np.asarray(v)
        if v.ndim == 2 and v.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change "
                "the shape of y to (n_samples, ), for example using ravel().",
                DataConversionWarning, stacklevel=caller_stacklevel(),
            )
            v = v.ravel()
        v = da.from_array(v, chunks=(X.chunks[0],)) if v.shape[:1] == X.shape[:1] else v
    elif v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]
    if v.ndim != 1 or v.shape[0] != X.shape[0]:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: "
            f"[{X.shape[0]}, {v.shape[0] if v.ndim else 0}] ({name})"
        )
    return v.rechunk((X.chunks[0],))


@dataclass
class FitInput:
    """Validated fit input: ``X`` is an ndarray, a CSR matrix or a dask array."""

    X: Any
    y: Any
    sample_weight: Any
    lazy: bool

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])


def validate_fit(estimator, X, y=None, *, sample_weight=None, needs_y: bool = True,
                 y_numeric: bool = False, min_samples: int = 1,
                 multi_output: bool = False) -> FitInput:
    """Validate the fit input and set ``n_features_in_`` / ``feature_names_in_``
    (``multi_output``: an in-memory 2D target is kept, as scikit-learn's ``multi_output``).
    """
    u = _unpack(X)
    y = _vector(y)
    sample_weight = _vector(sample_weight)
    if needs_y and y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y is None."
        )
    if u.lazy:
        Xd = _check_lazy_matrix(u.data)
        if Xd.shape[0] < min_samples:
            raise ValueError(f"Found array with {Xd.shape[0]} sample(s) (shape={Xd.shape}) "
                             f"while a minimum of {min_samples} is required.")
        validate_data(estimator, _proxy(u.names, Xd.shape[1]), skip_check_array=True,
                      reset=True)
        yd = _align(y, Xd, "y") if needs_y else None
        if sample_weight is not None and not is_dask_array(sample_weight):
            sample_weight = check_sample_weight(sample_weight, Xd.shape[0])
        swd = _align(sample_weight, Xd, "sample_weight")
        return FitInput(Xd, yd, swd, True)
    if u.names is not None:  # in-memory DataArray: check the values, then set the names
        data = u.data
        if needs_y:
            data, y = validate_data(estimator, data, y, accept_sparse="csr", dtype=FLOATS,
                                    y_numeric=y_numeric, ensure_min_samples=min_samples,
                                    multi_output=multi_output)
        else:
            data = validate_data(estimator, data, accept_sparse="csr", dtype=FLOATS,
                                 ensure_min_samples=min_samples)
        validate_data(estimator, _proxy(u.names, data.shape[1]), skip_check_array=True,
                      reset=True)
    elif needs_y:
        data, y = validate_data(estimator, u.data, y, accept_sparse="csr", dtype=FLOATS,
                                y_numeric=y_numeric, ensure_min_samples=min_samples,
                                multi_output=multi_output)
    else:
        data = validate_data(estimator, u.data, accept_sparse="csr", dtype=FLOATS,
                             ensure_min_samples=min_samples)
    if sp.issparse(data):
        data = data.tocsr()
    # (a scalar weight stays a scalar: np.asarray would make it a 0D array)
    sw = None if sample_weight is None else check_sample_weight(sample_weight, data.shape[0])
    return FitInput(data, y, sw, False)


def validate_predict(estimator, X):
    """Validate predict/transform input against the fit; returns (array, lazy)."""
    u = _unpack(X)
    if u.lazy:
        Xd = _check_lazy_matrix(u.data)
        validate_data(estimator, _proxy(u.names, Xd.shape[1]), skip_check_array=True,
                      reset=False)
        return Xd, True
    if u.names is not None:
        validate_data(estimator, _proxy(u.names, u.data.shape[1]), skip_check_array=True,
                      reset=False)
        return check_array(u.data, accept_sparse="csr", dtype=FLOATS), False
    return validate_data(estimator, u.data, reset=False, accept_sparse="csr",
                         dtype=FLOATS), False


def map_rows(X, func, *, n_out: int | None, dtype) -> da.Array:
    """Apply ``func`` to the row blocks of dask ``X`` lazily: a vector (``n_out`` None) or a
    matrix with ``n_out`` columns."""
    if n_out is None:
        return X.map_blocks(func, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype))
    return X.map_blocks(func, chunks=(X.chunks[0], (n_out,)), dtype=dtype,
                        meta=np.empty((0, 0), dtype))
