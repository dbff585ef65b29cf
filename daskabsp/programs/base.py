"""The contract of an iterative program the engine can run under any policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np


class Program(ABC):
    """An iterative data-parallel program: additive statistics per row range, then an update.

    The engine calls, per fit::

        state = program.init(n_features, n_rows)            # on the driver
        loop:
            params = program.params(state)                   # broadcast to partition tasks
            acc = program.new_stats(params)                  # in each task
            program.accumulate(acc, params, X, y, sw)        # per chunk of rows, in place
            stats = program.combine([acc_1, ..., acc_p])     # on the driver
            objective = program.objective(state, stats, k)
            state = program.update(state, stats, k)          # k = rows counted this round

    Statistics must be additive over rows, so that the statistics of the rows a stopped
    partition did process are exact for those rows. A program object is shipped to every
    partition task: keep its attributes small (hyper-parameters), and keep what the driver
    needs between rounds in ``state``.
    """

    #: Short name used in task keys and the fit history.
    name: ClassVar[str] = "program"
    #: Whether the program needs the target ``y``.
    needs_y: ClassVar[bool] = True
    #: Whether :meth:`accumulate` uses ``sample_weight``.
    accepts_sample_weight: ClassVar[bool] = False

    def check_input(self, X, y) -> None:
        """Raise ``ValueError`` if in-memory ``X``, ``y`` are not valid for this program."""
        return None

    @abstractmethod
    def init(self, n_features: int, n_rows: int) -> Any:
        """Return the driver state before the first round."""

    def params(self, state: Any) -> Any:
        """Return what the partition tasks need from ``state`` (default: the state itself)."""
        return state

    @abstractmethod
    def new_stats(self, params: Any) -> np.ndarray:
        """Return a zeroed statistics accumulator (a float64 array) for ``params``."""

    @abstractmethod
    def accumulate(
        self,
        acc: np.ndarray,
        params: Any,
        X: Any,
        y: np.ndarray | None,
        sample_weight: np.ndarray | None,
    ) -> None:
        """Add the statistics of the rows ``X`` (with ``y``, ``sample_weight``) into ``acc``.

        This runs once per chunk in the partition task's hot loop: no locks, no I/O, and no
        allocation beyond the numpy temporaries of the computation itself.
        """

    def combine(self, stats: list[np.ndarray]) -> np.ndarray:
        """Combine the statistics of several partitions (default: their sum)."""
        return np.sum(stats, axis=0)

    @abstractmethod
    def update(self, state: Any, stats: np.ndarray, n_rows: int) -> Any:
        """Return the next state from the combined statistics over ``n_rows`` rows."""

    @abstractmethod
    def objective(self, state: Any, stats: np.ndarray, n_rows: int) -> float:
        """Return the objective at ``state`` estimated from statistics over ``n_rows`` rows."""

    def coefficients(self, state: Any) -> np.ndarray:
        """Return the fitted parameters as an array (for the history and the user)."""
        return np.asarray(self.params(state))
