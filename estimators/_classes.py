"""Class labels of classifiers, computed once over the whole training target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from sklearn.utils.multiclass import check_classification_targets

from daskabsp import in_memory_rows

from ._inputs import FitInput


@dataclass
class Targets:
    """Classes and the target encoded as class codes, plus the rows' weights."""

    classes: np.ndarray
    codes: Any  # numpy or dask, float64 codes 0 .. n_classes - 1
    weights: Any  # None, or numpy or dask float64 (sample weight times class weight)
    weight_sum: float


def _encode(block, classes):
    return np.searchsorted(classes, block).astype(np.float64)


def encode_targets(estimator, data: FitInput, class_weight) -> Targets:
    """Compute ``classes_`` globally, encode ``y`` and fold ``class_weight`` into weights."""
    y = data.y
    values = in_memory_rows(y) if data.lazy else None
    if values is not None:
        # a dask target made from a numpy array (da.from_array): its blocks are here, and
        # computing on them through the cluster would send them all in a graph
        check_classification_targets(values)
        classes, inverse = np.unique(values, return_inverse=True)
        codes = da.from_array(inverse.astype(np.float64), chunks=y.chunks)
    elif data.lazy:
        classes = np.unique(da.unique(y).compute())
        check_classification_targets(classes)
        codes = y.map_blocks(_encode, classes, dtype=np.float64)
    else:
        check_classification_targets(y)
        classes, inverse = np.unique(y, return_inverse=True)
        codes = inverse.astype(np.float64)
    K = len(classes)
    if K < 2:
        raise ValueError(
            "This solver needs samples of at least 2 classes in the data, but the data "
            f"contains only one class: {classes[0]!r}"
        )
    cw = np.ones(K)
    if class_weight == "balanced":
        counts = (da.bincount(codes.astype(np.intp), minlength=K).compute() if data.lazy
                  else np.bincount(codes.astype(np.intp), minlength=K))
        cw = data.n_samples / (K * np.maximum(counts, 1))
    elif isinstance(class_weight, dict):
        unknown = [c for c in class_weight if c not in set(classes.tolist())]
        if unknown:
            raise ValueError(f"The classes, {unknown}, are not in class_weight")
        cw = np.array([float(class_weight.get(c, 1.0)) for c in classes.tolist()])
    sw = data.sample_weight
    if class_weight is None and sw is None:
        return Targets(classes=classes, codes=codes, weights=None,
                       weight_sum=float(data.n_samples))
    if data.lazy:
        w = codes.map_blocks(lambda c, cw=cw: cw[c.astype(np.intp)], dtype=np.float64)
        if sw is not None:
            w = w * sw
        total = float(w.sum().compute())
    else:
        w = cw[codes.astype(np.intp)]
        if sw is not None:
            w = w * sw
        total = float(w.sum())
    if total <= 0:
        raise ValueError("The sample weights (times the class weights) sum to zero.")
    return Targets(classes=classes, codes=codes, weights=w, weight_sum=total)
