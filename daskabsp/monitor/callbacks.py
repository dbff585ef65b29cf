"""Watching a fit from the client: per-round callbacks and a progress bar.

:func:`daskabsp.fit` calls its callbacks in the process that called it (in the calling
thread, with a synchronous client), before and after every round, never inside the partition
tasks: a callback sees the round's summary (:class:`RoundInfo`) and the updated parameters,
and returning True ends the fit after that round. The time spent in callbacks is not counted
in the fit history's ``wall_time``.

:class:`ProgressBar` is the callback behind ``verbose=1``: one bar per fit, advanced once per
round, drawn by tqdm (``tqdm.auto``: a widget in a notebook, a text bar in a terminal).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitInfo:
    """What callbacks are told when a fit's rounds are about to start.

    Parameters
    ----------
    max_iter : int
        Most rounds the fit will run.
    n_samples : int
        Rows of the data.
    n_partitions : int
        Row partitions (tasks per round).
    sync : str
        Name of the synchronisation policy (``"bsp"``, ``"absp"``, ...).
    program : str
        Name of the program (``"logreg"``, ``"kmeans"``, ...).
    fit_id : str
        The fit's id, as in its task keys and its history's attributes.
    unit : {"round", "update"}, default="round"
        What the fit reports to callbacks: rounds (BSP, A-BSP), or updates of one
        partition each (SSP, ASP; ``max_iter`` then counts updates, and each update is
        reported as a "round" of one partition).

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> class Announce(daskabsp.RoundCallback):
    ...     def on_fit_begin(self, info):
    ...         print(info.sync, info.program, info.n_samples, info.n_partitions)
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync="bsp", n_partitions=2,
    ...                    max_iter=2, callback=Announce())
    bsp logreg 2000 2
    """

    max_iter: int
    n_samples: int
    n_partitions: int
    sync: str
    program: str
    fit_id: str
    unit: str = "round"


@dataclass(frozen=True)
class RoundInfo:
    """What callbacks are told after each round.

    Parameters
    ----------
    round : int
        The round just finished, from 0.
    max_iter : int
        Most rounds the fit will run.
    objective : float
        The objective estimated from the round's counted statistics (the history's
        ``objective``).
    coef : ndarray
        The parameters after the round's update (``program.coefficients(state)``). Read
        only; copy it to keep it.
    rows : int
        Rows whose statistics the update used.
    rows_asked : int
        Rows the round asked for (the partitions' quotas).
    n_samples : int
        Rows of the data.
    harvested : int
        Partitions stopped before their quota (A-BSP's stragglers).
    n_partitions : int
        Row partitions (tasks per round).
    elapsed : float
        Seconds since the fit's first round started, callback time excluded (the history's
        ``wall_time``).

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> class Rows(daskabsp.RoundCallback):
    ...     def on_round_end(self, info):
    ...         print(info.round, info.rows, info.rows_asked)
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync="bsp", max_iter=2, tol=None,
    ...                    callback=Rows())
    0 2000 2000
    1 2000 2000
    """

    round: int
    max_iter: int
    objective: float
    coef: np.ndarray
    rows: int
    rows_asked: int
    n_samples: int
    harvested: int
    n_partitions: int
    elapsed: float

    @property
    def rows_share(self) -> float:
        """Share of the rows asked for that the update used (1.0 under BSP)."""
        return self.rows / self.rows_asked if self.rows_asked else 0.0


class RoundCallback:
    """Base class of the objects :func:`daskabsp.fit` calls around its rounds.

    Override any of the methods; the defaults do nothing. All are called in the process that
    called :func:`daskabsp.fit` (in its thread, with a synchronous client), never inside a
    partition task.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> class StopBelow(daskabsp.RoundCallback):
    ...     def __init__(self, level):
    ...         self.level = level
    ...     def on_round_end(self, info):
    ...         return info.objective < self.level      # True stops the fit
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, max_iter=100, tol=None,
    ...                    callback=StopBelow(0.5))
    >>> res.n_iter < 100, res.converged
    (True, False)

    A plain function works too: ``callback(round, coef, objective)``.

    >>> seen = []
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, max_iter=3, tol=None,
    ...                    callback=lambda r, coef, obj: seen.append(r))
    >>> seen
    [0, 1, 2]
    """

    def on_fit_begin(self, info: FitInfo) -> None:
        """Called once the data is placed, before the first round.

        Parameters
        ----------
        info : FitInfo
            The fit's size, policy and program.
        """

    def on_round_begin(self, round: int, coef: np.ndarray) -> None:
        """Called before a round is submitted.

        Parameters
        ----------
        round : int
            The round about to run, from 0.
        coef : ndarray
            The parameters it starts from (read only).
        """

    def on_round_end(self, info: RoundInfo) -> bool | None:
        """Called after each round's update.

        Parameters
        ----------
        info : RoundInfo
            The round's summary and the updated parameters.

        Returns
        -------
        bool or None
            True ends the fit after this round.
        """
        return None

    def on_fit_end(self, n_iter: int, converged: bool, error: BaseException | None) -> None:
        """Called once when the fit ends: after its last round, or when it failed.

        Parameters
        ----------
        n_iter : int
            Rounds run.
        converged : bool
            Whether the fit converged (False when stopped by a callback or ``max_iter``).
        error : BaseException or None
            Why the fit failed (``KeyboardInterrupt`` for an interrupted fit), or None.
        """


#: What ``callback=`` of :func:`daskabsp.fit` accepts.
CallbackArg = (RoundCallback | Callable[[int, np.ndarray, float], Any]
               | Sequence[RoundCallback | Callable[[int, np.ndarray, float], Any]] | None)


class _FunctionCallback(RoundCallback):
    """``callback(round, coef, objective)``, the plain-function form."""

    def __init__(self, func: Callable[[int, np.ndarray, float], Any]) -> None:
        self.func = func

    def on_round_end(self, info: RoundInfo) -> bool | None:
        return bool(self.func(info.round, info.coef, info.objective))


def as_callbacks(callback: CallbackArg) -> list[RoundCallback]:
    """The callbacks given to :func:`daskabsp.fit`, as a list of :class:`RoundCallback`.

    Parameters
    ----------
    callback : RoundCallback, callable, list of these, or None
        A function is called as ``callback(round, coef, objective)`` after each round.

    Returns
    -------
    list of RoundCallback
        The callbacks in the order given, functions wrapped.
    """
    if callback is None:
        return []
    if isinstance(callback, RoundCallback):
        return [callback]
    if callable(callback):
        return [_FunctionCallback(callback)]
    if isinstance(callback, Iterable) and not isinstance(callback, str | bytes):
        return [c for item in callback for c in as_callbacks(item)]
    raise TypeError(
        "callback must be a daskabsp.RoundCallback, a function callback(round, coef, "
        f"objective), a list of these or None; got {type(callback).__name__}."
    )


class CallbackList:
    """Several callbacks called in order; a round ends the fit if any of them asks to."""

    def __init__(self, callbacks: list[RoundCallback]) -> None:
        self.callbacks = callbacks
        self.begun = False
        self.ended = False

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def begin(self, info: FitInfo) -> None:
        self.begun = True
        for c in self.callbacks:
            c.on_fit_begin(info)

    def round_begin(self, round: int, coef: np.ndarray) -> None:
        for c in self.callbacks:
            c.on_round_begin(round, coef)

    def round_end(self, info: RoundInfo) -> bool:
        stop = False
        for c in self.callbacks:  # all of them see the round, also after one said stop
            stop = bool(c.on_round_end(info)) or stop
        return stop

    def end(self, n_iter: int, converged: bool, error: BaseException | None) -> None:
        """Once, and only after :meth:`begin`; every callback is ended even if one fails."""
        if not self.begun or self.ended:
            return
        self.ended = True
        failed = None
        for c in self.callbacks:
            try:
                c.on_fit_end(n_iter, converged, error)
            except Exception as e:  # the first failure is raised once the others have ended
                failed = failed or e
        if failed is not None and error is None:
            raise failed


class ProgressBar(RoundCallback):
    """A progress bar of a fit's rounds: rounds done (of ``max_iter``), elapsed time, and
    after each round the objective, the share of the rows asked for that were used, and how
    many partitions were harvested.

    Drawn by tqdm's ``tqdm.auto`` (a widget in a Jupyter notebook when ipywidgets is
    installed, a text bar elsewhere). ``daskabsp.fit(..., verbose=1)`` and the estimators'
    ``verbose=1`` use one. A fit that converges or is stopped by a callback before
    ``max_iter`` ends its bar complete at the rounds it ran; a fit that fails leaves it where
    it stopped.

    Parameters
    ----------
    desc : str, optional
        Text before the bar. Default: the program and the sync model (``"logreg absp"``).
    file : file-like, optional
        Where a text bar is written (tqdm's ``file``; default ``sys.stderr``). Giving one
        draws a text bar also in a notebook.
    leave : bool, default=True
        Keep the bar once the fit has ended.
    **tqdm_kwargs
        Further options of ``tqdm`` (e.g. ``position``, ``ncols``, ``mininterval``).

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import io
    >>> import daskabsp
    >>> out = io.StringIO()
    >>> res = daskabsp.fit(daskabsp.LogisticGD(), X, y, max_iter=5, tol=None,
    ...                    callback=daskabsp.ProgressBar(file=out))
    >>> "5/5" in out.getvalue()
    True
    """

    def __init__(self, *, desc: str | None = None, file: IO[str] | None = None,
                 leave: bool = True, **tqdm_kwargs: Any) -> None:
        self.desc = desc
        self.file = file
        self.leave = leave
        self.tqdm_kwargs = tqdm_kwargs
        self.bar = None

    def on_fit_begin(self, info: FitInfo) -> None:
        if self.file is None:
            from tqdm.auto import tqdm  # here: tqdm.auto picks the notebook bar at run time
        else:
            from tqdm import tqdm
        self.bar = tqdm(total=info.max_iter, desc=self.desc or f"{info.program} {info.sync}",
                        unit=info.unit, file=self.file, leave=self.leave, **self.tqdm_kwargs)

    def on_round_end(self, info: RoundInfo) -> None:
        if self.bar is None:
            return
        postfix = {"obj": f"{info.objective:.4g}"}
        if self.bar.unit == "round":  # an update (SSP, ASP) scans one whole partition
            postfix.update(rows=f"{info.rows_share:.0%}",
                           harvested=f"{info.harvested}/{info.n_partitions}")
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def on_fit_end(self, n_iter: int, converged: bool, error: BaseException | None) -> None:
        bar, self.bar = self.bar, None
        if bar is None:
            return
        if error is None and bar.n < (bar.total or 0):
            # Converged or stopped: the fit is complete at the rounds it ran.
            bar.total = bar.n
            for widget in getattr(getattr(bar, "container", None), "children", ()):
                if hasattr(widget, "max"):  # the notebook widget's progress bar
                    widget.max = bar.n
            bar.refresh()
        bar.close()
