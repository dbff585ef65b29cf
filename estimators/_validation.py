"""Checks of estimator parameters with scikit-learn's own machinery, and of sample weights.

Parameters are declared as scikit-learn declares them (``_parameter_constraints`` made of
:class:`~sklearn.utils._param_validation.Interval`, ``StrOptions``, types, ``"boolean"``...)
and checked by scikit-learn's ``validate_parameter_constraints``, so errors are scikit-learn's
:class:`~sklearn.utils._param_validation.InvalidParameterError` (both a ``ValueError`` and a
``TypeError``) with its wording, e.g. ``The 'C' parameter of LogisticRegression must be a
float in the range (0.0, inf]. Got -1 instead.``

Where daskabsp accepts fewer values than scikit-learn (``penalty="l1"``, ``solver=
"liblinear"``, ``positive=True``...), the estimator's ``_rejected`` maps the parameter to the
reason, appended to the message: a user who swapped the import learns why, not only what.
``sklearn.utils._param_validation`` is private to scikit-learn; its names used here have been
stable since scikit-learn 1.2 and are imported in one place, this module.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np
from sklearn.utils import check_consistent_length
from sklearn.utils._param_validation import (
    Hidden,
    Interval,
    Options,
    RealNotInt,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils._param_validation import InvalidParameterError as _SkInvalidParameterError

import daskabsp
from daskabsp import SYNC_NAMES, Policy, as_policy
from daskabsp.validation import OPTION_CONSTRAINTS


class InvalidParameterError(_SkInvalidParameterError):
    """An estimator parameter with a value the estimator does not take.

    Raised by ``fit`` (before anything is sent to the cluster) in scikit-learn's wording,
    followed by the reason when scikit-learn's own estimator takes the value and daskabsp's
    does not. A subclass of scikit-learn's ``InvalidParameterError``, itself both a
    ``ValueError`` and a ``TypeError``: code that catches any of these catches it.

    Examples
    --------
    >>> import textwrap
    >>> from daskabsp.estimators import InvalidParameterError, LogisticRegression
    >>> try:
    ...     LogisticRegression(sync="fastest").fit([[0.0], [1.0]], [0, 1])
    ... except InvalidParameterError as e:
    ...     print(textwrap.fill(str(e), 79))
    The 'sync' parameter of LogisticRegression must be a str among {...} or an
    instance of 'daskabsp.Policy'. Got 'fastest' instead.
    >>> issubclass(InvalidParameterError, ValueError)
    True
    """

__all__ = [
    "BOOLEAN",
    "ENGINE_CONSTRAINTS",
    "FALSE_ONLY",
    "VERBOSE",
    "Hidden",
    "Interval",
    "InvalidParameterError",
    "Options",
    "RealNotInt",
    "StrOptions",
    "check_sample_weight",
    "reject",
    "validate_params",
]

#: ``bool`` (numpy booleans accepted but not listed), as scikit-learn's ``"boolean"``.
BOOLEAN = [bool, Hidden(np.bool_)]
#: scikit-learn's ``verbose``: a non-negative int or a bool.
VERBOSE = OPTION_CONSTRAINTS["verbose"]

#: ``False`` only (numpy's False too): for flags whose ``True`` daskabsp does not implement.
FALSE_ONLY = [Options(bool, {False}), Hidden(Options(np.bool_, {np.False_}))]
#: A policy per accepted ``sync`` name (to refuse a quota where there are no rounds).
_POLICIES = {name: as_policy(name) for name in SYNC_NAMES}

#: Constraints of the engine options every estimator takes: the engine's own.
ENGINE_CONSTRAINTS: dict[str, list] = dict(OPTION_CONSTRAINTS)


def validate_params(estimator, constraints: Mapping[str, list]) -> None:
    """Raise scikit-learn's ``InvalidParameterError`` for the first parameter of
    ``estimator`` (in the order of ``constraints``) that satisfies none of its constraints.

    The message is scikit-learn's. When scikit-learn's own estimator (the class attribute
    ``_counterpart``) accepts the value and the estimator's ``_rejected`` names the
    parameter, the reason daskabsp does not follows the message. Then the estimator's
    ``_check_param_combinations()``, if it has one, checks what the constraints of single
    parameters cannot say.
    """
    params = estimator.get_params(deep=False)
    reasons = getattr(estimator, "_rejected", {})
    theirs = getattr(getattr(estimator, "_counterpart", None), "_parameter_constraints", {})
    name_of = type(estimator).__name__
    for name, options in constraints.items():
        try:
            validate_parameter_constraints({name: options}, {name: params[name]},
                                           caller_name=name_of)
        except _SkInvalidParameterError as error:
            message = _public_names(str(error), options)
            if name in reasons and name in theirs and _accepts(theirs[name], params[name]):
                message = f"{message} {reasons[name]}"
            raise InvalidParameterError(message) from None
    _check_quota_with_sync(estimator, params)
    combinations = getattr(estimator, "_check_param_combinations", None)
    if combinations is not None:
        combinations()


def _public_names(message: str, constraints: list) -> str:
    """scikit-learn names a class by the module that defines it (``'daskabsp.policies.
    Policy'``); the name users import (``'daskabsp.Policy'``) instead, for the classes
    daskabsp exports."""
    for c in constraints:
        if isinstance(c, type) and getattr(daskabsp, c.__name__, None) is c:
            message = message.replace(f"'{c.__module__}.{c.__qualname__}'",
                                      f"'daskabsp.{c.__name__}'")
    return message


def _accepts(constraints: list, value) -> bool:
    try:
        validate_parameter_constraints({"p": constraints}, {"p": value}, caller_name="")
    except _SkInvalidParameterError:
        return False
    return True


def reject(estimator, name: str, must_be: str, why: str) -> InvalidParameterError:
    """scikit-learn's wording for a value that passes the constraints alone but not with
    the other parameters: ``The 'name' parameter of Est must be <must_be>. Got v instead.``
    followed by ``why``."""
    value = getattr(estimator, name)
    return InvalidParameterError(
        f"The {name!r} parameter of {type(estimator).__name__} must be {must_be}. "
        f"Got {value!r} instead. {why}"
    )


def _check_quota_with_sync(estimator, params: dict) -> None:
    """A quota (rows per round) has no meaning without rounds (SSP, ASP): refused here,
    before any work, by the policy's own rule (:meth:`daskabsp.Policy.check_quota`)."""
    if params.get("quota") is None or "sync" not in params:
        return
    sync = params["sync"]
    policy = sync if isinstance(sync, Policy) else _POLICIES.get(sync)
    if policy is not None:
        try:
            policy.check_quota(params["quota"], type(estimator).__name__, sync)
        except ValueError as e:
            raise InvalidParameterError(str(e)) from None


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray:
    """Sample weights as a float64 array of shape (n_samples,), in scikit-learn's wording."""
    if sample_weight is None:
        return np.ones(n_samples)
    if isinstance(sample_weight, numbers.Number) or (
            isinstance(sample_weight, np.ndarray) and sample_weight.ndim == 0):
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
