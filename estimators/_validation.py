"""Checks of estimator parameters, with scikit-learn's wording, and of sample weights.

scikit-learn's own declarative validation lives in a private module; this is a small
public-API replacement that produces the same messages, e.g. ``The 'C' parameter of
LogisticRegression must be a float in the range (0.0, inf). Got -1 instead.``
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.utils import check_consistent_length

from daskabsp import SYNC_NAMES, Policy
from daskabsp.policies import as_policy


class InvalidParameterError(ValueError, TypeError):
    """A parameter of an estimator has an invalid type or value (scikit-learn's contract:
    both a ``ValueError`` and a ``TypeError``)."""


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``numbers.Integral`` or ``numbers.Real``) between two bounds."""

    kind: type
    left: float | None
    right: float | None
    closed: str = "left"  # "left", "right", "both", "neither"

    def accepts(self, v: Any) -> bool:
        if isinstance(v, bool | np.bool_) or not isinstance(v, self.kind):
            return False
        if isinstance(v, numbers.Real) and np.isnan(v):
            return False
        lo_ok = self.left is None or (v >= self.left if self.closed in ("left", "both")
                                      else v > self.left)
        hi_ok = self.right is None or (v <= self.right if self.closed in ("right", "both")
                                       else v < self.right)
        return bool(lo_ok and hi_ok)

    def __str__(self) -> str:
        word = "an int" if self.kind is numbers.Integral else "a float"
        lb = "[" if self.closed in ("left", "both") else "("
        rb = "]" if self.closed in ("right", "both") else ")"
        lo = "-inf" if self.left is None else (float(self.left) if self.kind is numbers.Real
                                               else self.left)
        hi = "inf" if self.right is None else (float(self.right) if self.kind is numbers.Real
                                               else self.right)
        return f"{word} in the range {lb}{lo}, {hi}{rb}"


@dataclass(frozen=True)
class Options:
    """One of a set of values of type ``kind``."""

    kind: type
    values: frozenset

    def accepts(self, v: Any) -> bool:
        return isinstance(v, self.kind) and v in self.values

    def __str__(self) -> str:
        name = {str: "str", bool: "bool"}.get(self.kind, self.kind.__name__)
        listed = ", ".join(repr(v) for v in sorted(self.values, key=str))
        return f"a {name} among {{{listed}}}"


@dataclass(frozen=True)
class InstanceOf:
    """An instance of one of ``types``."""

    types: tuple[type, ...]
    label: str

    def accepts(self, v: Any) -> bool:
        return isinstance(v, self.types)

    def __str__(self) -> str:
        return f"an instance of '{self.label}'"


class _NoneConstraint:
    def accepts(self, v: Any) -> bool:
        return v is None

    def __str__(self) -> str:
        return "None"


class _ArrayLike:
    def accepts(self, v: Any) -> bool:
        return hasattr(v, "__len__") or hasattr(v, "shape") or hasattr(v, "__array__")

    def __str__(self) -> str:
        return "an array-like"


class _RandomState:
    def accepts(self, v: Any) -> bool:
        return v is None or isinstance(v, np.random.RandomState) or (
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v < 2**32)

    def __str__(self) -> str:
        return ("an int in the range [0, 4294967295], an instance of 'numpy.random.mtrand."
                "RandomState' or None")


NONE = _NoneConstraint()
BOOLEAN = InstanceOf((bool, np.bool_), "bool")
ARRAY_LIKE = _ArrayLike()
RANDOM_STATE = _RandomState()
SYNC = [Options(str, frozenset(SYNC_NAMES)), InstanceOf((Policy,), "daskabsp.Policy")]
_POLICIES = {name: as_policy(name) for name in SYNC_NAMES}

#: Constraints of the engine options every estimator takes.
ENGINE_CONSTRAINTS: dict[str, list] = {
    "sync": SYNC,
    "n_partitions": [Interval(numbers.Integral, 1, None, "left"), NONE],
    "quota": [Interval(numbers.Integral, 1, None, "left"),
              Interval(numbers.Real, 0, 1, "right"), NONE],
    "chunk_target": [Interval(numbers.Real, 0, None, "neither"), NONE],
    "verbose": [Interval(numbers.Integral, 0, None, "left"), BOOLEAN],
}


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def validate_params(estimator, constraints: dict[str, Iterable]) -> None:
    """Raise :class:`InvalidParameterError` for the first parameter of ``estimator`` that
    satisfies none of its ``constraints``."""
    params = estimator.get_params(deep=False)
    for name, options in constraints.items():
        options = list(options)
        value = params[name]
        if any(c.accepts(value) for c in options):
            continue
        raise InvalidParameterError(
            f"The {name!r} parameter of {type(estimator).__name__} must be "
            f"{_join([str(c) for c in options])}. Got {value!r} instead."
        )
    _check_quota_with_sync(estimator, params)


def _check_quota_with_sync(estimator, params: dict) -> None:
    """A quota (rows per round) has no meaning without rounds (SSP, ASP): refused here,
    before any work, as the engine would refuse it."""
    if params.get("quota") is None or "sync" not in params:
        return
    sync = params["sync"]
    policy = sync if isinstance(sync, Policy) else _POLICIES.get(sync)
    if policy is not None and not policy.rounds:
        raise InvalidParameterError(
            f"The 'quota' parameter of {type(estimator).__name__} must be None with "
            f"sync={sync!r} (its updates replace a partition's whole statistics). Got "
            f"{params['quota']!r} instead."
        )


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray:
    """Sample weights as a float64 array of shape (n_samples,), in scikit-learn's wording."""
    if sample_weight is None:
        return np.ones(n_samples)
    if isinstance(sample_weight, numbers.Number):
        return np.full(n_samples, float(sample_weight))
    sw = np.asarray(sample_weight, dtype=np.float64)
    if sw.ndim != 1:
        raise ValueError(
            f"Sample weights must be 1D array or scalar, got {sw.ndim}D array of shape "
            f"{sw.shape} instead."
        )
    if sw.shape != (n_samples,):
        raise ValueError(f"sample_weight.shape == {sw.shape}, expected {(n_samples,)}!")
    if not np.isfinite(sw).all():
        raise ValueError("Input sample_weight contains NaN or infinity.")
    if (sw < 0).any():
        raise ValueError("Negative values in data passed to `sample_weight`")
    if not sw.any():
        raise ValueError("Sample weights must contain at least one non-zero number.")
    check_consistent_length(sw, np.empty(n_samples))
    return sw
