"""scikit-learn's callback API on the estimators, where the installed scikit-learn has it.

scikit-learn 1.9 added ``sklearn.callback`` (experimental): ``est.set_callbacks(ProgressBar())``
and callbacks such as ``ScoringMonitor`` that a ``Pipeline`` or ``GridSearchCV`` passes on to
the estimators they fit. An estimator's fit is one task whose subtasks are its iterations; here
an iteration is an engine round, so a callback sees ``on_fit_task_begin`` and
``on_fit_task_end`` once per round, in the process that called ``fit`` (the engine's round
callbacks, :class:`daskabsp.RoundCallback`), with a ``fitted_estimator`` that predicts with the
round's parameters. A callback whose ``on_fit_task_end`` returns True ends the fit after that
round.

With an older scikit-learn nothing here imports ``sklearn.callback``, and ``set_callbacks``
says which version it needs.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import sklearn

from daskabsp import RoundCallback, RoundInfo

from ._validation import validate_params

#: scikit-learn's first version with ``sklearn.callback``.
MIN_SKLEARN = (1, 9)

_HERE = os.path.dirname(os.path.abspath(__file__))
_SKLEARN_CALLBACK = os.path.join(os.path.dirname(os.path.abspath(sklearn.__file__)), "callback")


def caller_stacklevel() -> int:
    """The ``stacklevel`` for a warning raised by the function that calls this, so that it
    points at the code that called the estimator: the first frame outside this package and
    scikit-learn's callback wrappers (however many of them a fit passes through)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(
            os.path.abspath(frame.f_code.co_filename)) in (_HERE, _SKLEARN_CALLBACK):
        frame, level = frame.f_back, level + 1
    return level


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


@functools.cache
def callback_api() -> ModuleType | None:
    """``sklearn.callback`` if the installed scikit-learn has it (>= 1.9), else None."""
    if _version(sklearn.__version__) < MIN_SKLEARN:
        return None
    try:
        import sklearn.callback as api
    except ImportError:
        return None
    if not all(hasattr(api, n) for n in ("CallbackSupportMixin", "with_callbacks")):
        return None
    return api


class CallbackSupportMixin:
    """``set_callbacks`` and the callback protocol of scikit-learn >= 1.9 on an estimator.

    The estimator's ``fit`` is wrapped with :func:`fit_with_callbacks`; its engine run passes
    :meth:`_sklearn_rounds` to :func:`daskabsp.fit` as a round callback.
    """

    def set_callbacks(self, *callbacks):
        """Set scikit-learn callbacks (``sklearn.callback``, scikit-learn >= 1.9) on the
        estimator.

        They are called once per engine round (``on_fit_task_begin``, ``on_fit_task_end``;
        returning True from the latter ends the fit after that round), in the process that
        calls ``fit``. For a progress bar without them, use ``verbose=1``.

        Parameters
        ----------
        *callbacks : callback instances
            Objects following ``sklearn.callback.FitCallback``, e.g.
            ``sklearn.callback.ProgressBar()`` or ``ScoringMonitor(scoring="accuracy")``.

        Returns
        -------
        self : object
            The estimator.
        """
        api = callback_api()
        if api is None:
            raise RuntimeError(
                "set_callbacks needs scikit-learn >= 1.9 (sklearn.callback); scikit-learn "
                f"{sklearn.__version__} is installed. For a progress bar, set verbose=1."
            )
        return api.CallbackSupportMixin.set_callbacks(self, *callbacks)

    def _sklearn_rounds(self, attributes: Callable[[np.ndarray], dict]) -> RoundCallback | None:
        """The round callback that reports the engine's rounds to scikit-learn callbacks, or
        None outside a fit wrapped by :func:`fit_with_callbacks` (or without
        ``sklearn.callback``)."""
        context = getattr(self, "_callback_fit_ctx", None)
        args = getattr(self, "_callback_fit_args", None)
        if context is None or args is None:
            return None
        return SklearnRounds(self, context, *args, attributes=attributes)

    def _max_rounds(self) -> int:
        """Most engine rounds of a fit."""
        return int(self.max_iter)

    def _callback_max_rounds(self) -> int | None:
        """Most subtasks of the fit task: its rounds (:meth:`_max_rounds`)."""
        return self._max_rounds()


class SklearnRounds(RoundCallback):
    """An engine round as a subtask of the estimator's fit task, for scikit-learn callbacks.

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted.
    context : sklearn.callback.CallbackContext
        Its fit task's context.
    X, y, metadata
        What the callbacks are told the fit is given.
    attributes : callable
        ``attributes(coef)``: the fitted attributes (``coef_``, ``intercept_``,
        ``cluster_centers_``, ...) of the engine's parameters ``coef``, from which scikit-learn
        builds the ``fitted_estimator`` its hooks may ask for.
    """

    def __init__(self, estimator, context, X, y, metadata, *,
                 attributes: Callable[[np.ndarray], dict]) -> None:
        self.estimator = estimator
        self.context = context
        self.data = {"X": X, "y": y, "metadata": metadata}
        self.attributes = attributes
        self.task = None

    def on_round_begin(self, round: int, coef: np.ndarray) -> None:
        self.task = self.context.subcontext(task_name="round")
        self.task.call_on_fit_task_begin(
            estimator=self.estimator, **self.data,
            reconstruction_attributes=lambda: self.attributes(np.array(coef, copy=True)))

    def on_round_end(self, info: RoundInfo) -> bool:
        task, self.task = self.task, None
        return bool(task.call_on_fit_task_end(
            estimator=self.estimator, **self.data,
            reconstruction_attributes=lambda: self.attributes(np.array(info.coef, copy=True))))


def fit_with_callbacks(fit: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate an estimator's ``fit(X, y, sample_weight=None)`` with scikit-learn's callback
    protocol when ``sklearn.callback`` exists: parameters validated first, then the callbacks'
    ``setup``, the fit task's begin and end hooks around ``fit`` and their ``teardown`` after
    it, whatever happens (``sklearn.callback.with_callbacks``). Otherwise ``fit`` as it is."""
    signature = inspect.signature(fit)

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        api = callback_api()
        if api is None:
            return fit(self, *args, **kwargs)
        return api.with_callbacks(_fit_in_context)(self, api, *args, **kwargs)

    def _fit_in_context(self, api, *args, **kwargs):
        # As scikit-learn does: no callback is set up for a fit with invalid parameters.
        validate_params(self, self._parameter_constraints)
        bound = signature.bind(self, *args, **kwargs)
        X, y = bound.arguments["X"], bound.arguments.get("y")
        sample_weight = bound.arguments.get("sample_weight")
        metadata = {"sample_weight": sample_weight} if sample_weight is not None else None
        rounds = self._callback_max_rounds()
        if rounds is not None:  # one engine fit per target column (multi-output models)
            rounds *= getattr(self, "_fits_per_target", lambda y: 1)(y)
        context = api.CallbackSupportMixin._init_callback_context(self, max_subtasks=rounds)
        context.call_on_fit_task_begin(estimator=self, X=X, y=y, metadata=metadata)
        self._callback_fit_args = (X, y, metadata)
        try:
            fitted = fit(self, *args, **kwargs)
        finally:
            del self._callback_fit_args
        context.call_on_fit_task_end(estimator=self, X=X, y=y, metadata=metadata,
                                     reconstruction_attributes={})
        return fitted

    return wrapper
